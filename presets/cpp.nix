# Takes pkgs; returns the mkSandbox arguments of the `cpp` environment,
# which a server serves when asked for by name (mkServer's `presets`, the
# modules' `presets`): C++ programs of one file, built by g++ and run
# (lib/languages/cpp.nix).
pkgs: {
  name = "cpp";
  interpreter = "program";
  program = import ../lib/languages/cpp.nix;
  description = "C++ (g++ ${pkgs.gcc.version}, C++20, -O2): the code is one file with main, built and run";
  packages = [ pkgs.gcc ];
}
