# Takes pkgs; returns the mkSandbox arguments of the `cpp` environment,
# which a server serves when asked for by name (mkServer's `presets`, the
# modules' `presets`): C++ programs of one file, built by g++ and run
# (lib/languages/cpp.nix).
pkgs: {
  name = "cpp";
  interpreter = "program";
  program = import ../lib/languages/cpp.nix;
  description = "C++20 (g++ ${pkgs.lib.versions.major pkgs.gcc.version}), one file with main. Built with -O2, then run.";
  packages = [ pkgs.gcc ];
}
