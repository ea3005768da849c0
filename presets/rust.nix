# Takes pkgs; returns the mkSandbox arguments of the `rust` environment,
# which a server serves when asked for by name (mkServer's `presets`, the
# modules' `presets`): Rust programs of one file, built by rustc and run
# (lib/languages/rust.nix); gcc is its linker. More processes than the
# default: rustc starts threads by the CPU.
pkgs: {
  name = "rust";
  interpreter = "program";
  program = import ../lib/languages/rust.nix;
  description = "Rust ${pkgs.lib.versions.majorMinor pkgs.rustc.version}, one file with fn main. Edition 2021, std only, built unoptimised and run.";
  packages = [
    pkgs.rustc
    pkgs.gcc
  ];
  limits.pids = 128;
}
