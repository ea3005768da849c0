{
  description = "Host package set for the nix-sandbox-mcp offline harness: stands in for nixpkgs (--override-input nixpkgs) with the host's own tools";

  inputs.nixpkgs-lib.url = "github:nix-community/nixpkgs.lib";

  outputs =
    { self, nixpkgs-lib }:
    let
      lib = import ./lib.nix nixpkgs-lib.lib;
      host =
        if builtins.pathExists ./host.json then
          lib.importJSON ./host.json
        else
          throw "hostpkgs: checks/hostpkgs/host.json is missing; checks/run writes it (versions of the host's tools, its Rust toolchain)";
    in
    {
      inherit lib;
      # The Debian packages whose versions host.json must give.
      debianPackages = lib.unique (
        lib.concatMap (tool: tool.debs) (
          lib.attrValues (import ./tools.nix) ++ lib.attrValues (import ./pythonPackages.nix)
        )
      );
      legacyPackages.x86_64-linux = import ./packages.nix { inherit lib host; } // {
        path = import ./path.nix {
          source = self.outPath;
          nixpkgsLib = nixpkgs-lib.outPath;
        };
      };
    };
}
