# A user's flake with environments of its own from lib.mkSandbox. checks/run
# copies it to a scratch directory as flake.nix, @SOURCE@ and @NIXPKGS@
# replaced by this checkout and the package set to build with, builds it,
# and serves its `online` environment through NIX_SANDBOX_ENVS.
{
  inputs = {
    nixpkgs.url = "@NIXPKGS@";
    nix-sandbox-mcp = {
      url = "@SOURCE@";
      inputs.nixpkgs.follows = "nixpkgs";
    };
  };

  outputs =
    {
      self,
      nixpkgs,
      nix-sandbox-mcp,
    }:
    {
      packages.x86_64-linux =
        import "${nix-sandbox-mcp}/checks/flakes/environments.nix" {
          pkgs = nixpkgs.legacyPackages.x86_64-linux;
          inherit (nix-sandbox-mcp.lib) mkSandbox;
        }
        // import "${nix-sandbox-mcp}/checks/flakes/packagesServers.nix" {
          pkgs = nixpkgs.legacyPackages.x86_64-linux;
          sandboxLib = nix-sandbox-mcp.lib;
        }
        // import "${nix-sandbox-mcp}/checks/flakes/languagesServer.nix" {
          pkgs = nixpkgs.legacyPackages.x86_64-linux;
          sandboxLib = nix-sandbox-mcp.lib;
        };
    };
}
