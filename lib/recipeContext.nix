# Takes a helper's recipe, read (a server's environment as mkServer wrote
# it: `sandbox`, and the store paths of the server's nixpkgs, jail.nix and
# this flake's source, which holds this file); returns what the helpers'
# Nix files (composeSandbox.nix, devShellSandbox.nix) build with:
# { pkgs, lib, mkSandbox }. pkgs is the server's nixpkgs as a flake's
# legacyPackages: no config or overlays of the user running the server
# (~/.config/nixpkgs), which would change what is built. Those files are
# copied to the store alone, so they load this one from the recipe's
# source.
environment:
let
  pkgs = import environment.nixpkgs {
    inherit (environment) system;
    config = { };
    overlays = [ ];
  };
in
{
  inherit pkgs;
  inherit (pkgs) lib;
  mkSandbox = import (environment.source + "/lib/mkSandbox.nix") {
    jail-nix.lib = import (environment.jailNix + "/lib");
  };
}
