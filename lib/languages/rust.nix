# Rust, as an environment's `program` (environment.nix): a table, not a
# function. The code is one crate root with `fn main`, edition 2021;
# rustc builds it unoptimised (the fastest build) and incrementally, its
# incremental cache in the runner's cache, which a session keeps. rustc
# links with `cc`, which the environment's packages must provide.
{
  language = "Rust";
  file = "main.rs";
  build = ''
    rustc --edition 2021 -C incremental="$cache/rust-incremental" -o "$out/main" "$src"
  '';
  run = ''exec "$out/main"'';
}
