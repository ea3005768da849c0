# A user's flake evaluating this flake's NixOS and home-manager modules
# (checks/eval/modules.nix). checks/run copies it to a scratch directory as
# flake.nix, @SOURCE@, @NIXPKGS@ and @HOME_MANAGER@ replaced by this
# checkout, the package set to build with and home-manager's source (pinned
# by checks/flake.lock, from the Nix store).
{
  inputs = {
    nixpkgs.url = "@NIXPKGS@";
    nix-sandbox-mcp = {
      url = "@SOURCE@";
      inputs.nixpkgs.follows = "nixpkgs";
    };
    home-manager = {
      url = "@HOME_MANAGER@";
      flake = false;
    };
  };

  outputs =
    {
      self,
      nixpkgs,
      nix-sandbox-mcp,
      home-manager,
    }:
    let
      tests = import "${nix-sandbox-mcp}/checks/eval/modules.nix" {
        pkgs = nixpkgs.legacyPackages.x86_64-linux;
        inherit nix-sandbox-mcp home-manager;
      };
    in
    {
      packages.x86_64-linux = tests.packages;
      inherit (tests) service expectations failures;
    };
}
