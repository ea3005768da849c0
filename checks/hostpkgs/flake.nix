{
  description = "Host package set for the nix-sandbox-mcp offline harness: stands in for nixpkgs (--override-input nixpkgs) with the host's own tools";

  inputs.nixpkgs-lib.url = "github:nix-community/nixpkgs.lib";

  outputs =
    { self, nixpkgs-lib }:
    let
      # Not a nixpkgs checkout: manifests record no nixpkgs revision.
      lib = nixpkgs-lib.lib.extend (
        final: prev: { trivial = prev.trivial // { revisionWithDefault = default: default; }; }
      );
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
      legacyPackages.x86_64-linux = import ./packages.nix { inherit lib host; };
    };
}
