# Takes pkgs; returns the mkSandbox arguments of the `c` environment, which
# a server serves when asked for by name (mkServer's `presets`, the
# modules' `presets`): C programs of one file, built by gcc and run
# (lib/languages/c.nix).
pkgs: {
  name = "c";
  interpreter = "program";
  program = import ../lib/languages/c.nix;
  description = "C (gcc ${pkgs.gcc.version}, C17, -O2, libm): the code is one file with main, built and run";
  packages = [ pkgs.gcc ];
}
