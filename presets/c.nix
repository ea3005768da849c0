# Takes pkgs; returns the mkSandbox arguments of the `c` environment, which
# a server serves when asked for by name (mkServer's `presets`, the
# modules' `presets`): C programs of one file, built by gcc and run
# (lib/languages/c.nix).
pkgs: {
  name = "c";
  interpreter = "program";
  program = import ../lib/languages/c.nix;
  description = "C17 (gcc ${pkgs.lib.versions.major pkgs.gcc.version}), one file with main. Built with -O2 and libm, then run.";
  packages = [ pkgs.gcc ];
}
