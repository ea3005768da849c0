{
  description = "nix-sandbox-mcp offline harness: evaluation checks against the pinned nixpkgs lib, jail.nix and home-manager";

  # checks/run needs every input below in the Nix store (see checks/README.md,
  # "Seeding the store"); the product flake.lock and checks/hostpkgs pin
  # the same jail.nix and nixpkgs lib, and checks/run tests that they agree.
  inputs = {
    nixpkgs-lib.url = "github:nix-community/nixpkgs.lib";
    jail-nix.url = "sourcehut:~alexdavid/jail.nix";
    home-manager = {
      url = "github:nix-community/home-manager";
      flake = false;
    };
  };

  outputs =
    {
      self,
      nixpkgs-lib,
      jail-nix,
      home-manager,
    }:
    let
      inherit (nixpkgs-lib) lib;
      # The host package set with made-up versions: evaluated, never built.
      pkgs = {
        # What packages on demand's helper would import (never, here).
        path = import ./hostpkgs/path.nix {
          source = ./hostpkgs;
          nixpkgsLib = nixpkgs-lib.outPath;
        };
      }
      // import ./hostpkgs/packages.nix {
        inherit lib;
        host.debianVersions = lib.genAttrs (lib.concatMap (tool: tool.debs) (
          lib.attrValues (import ./hostpkgs/tools.nix)
        )) (_: "0");
        host.rust = {
          toolchain = "/rust";
          cargoHome = "/cargo";
          targetDir = "/target";
        };
      };
      sandboxLib = import ../lib { inherit jail-nix; };
    in
    {
      # name -> { sandbox, error }: evaluating `sandbox.drvPath` must fail
      # with a message containing `error`, or succeed when `error` is null.
      validation = import ./eval/validation.nix { inherit lib pkgs; inherit (sandboxLib) mkSandbox mkServer; };
      # name -> { got, want }: mkSandbox's arguments and the modules'
      # environment options are one schema; got must equal want.
      schema = import ./eval/schema.nix { inherit lib pkgs sandboxLib home-manager; };
    };
}
