# Takes pkgs; returns the mkSandbox arguments of the `go` environment, which
# a server serves when asked for by name (mkServer's `presets`, the
# modules' `presets`): Go programs of one file, built and run
# (lib/languages/go.nix). More processes than the default: the go command
# and the compiler start threads by the CPU.
pkgs: {
  name = "go";
  interpreter = "program";
  program = import ../lib/languages/go.nix;
  description = "Go ${pkgs.lib.versions.majorMinor pkgs.go.version}, one file of package main. Built and run; standard library only.";
  packages = [ pkgs.go ];
  limits.pids = 128;
}
