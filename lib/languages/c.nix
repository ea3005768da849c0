# C, as an environment's `program` (environment.nix): a table, not a
# function. The code is one C17 file with `main`, built by `cc` with
# optimisation and warnings, linked with libm.
{
  language = "C";
  file = "main.c";
  build = ''
    cc -std=c17 -O2 -Wall -o "$out/main" "$src" -lm
  '';
  run = ''exec "$out/main"'';
}
