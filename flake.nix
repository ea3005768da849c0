{
  description = "Sandboxed code execution for LLM agents over MCP: Nix environments in bubblewrap jails";

  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/nixpkgs-unstable";
    jail-nix.url = "sourcehut:~alexdavid/jail.nix";
  };

  outputs =
    {
      self,
      nixpkgs,
      jail-nix,
    }:
    let
      inherit (nixpkgs) lib;
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forAllSystems = f: lib.genAttrs systems (system: f system nixpkgs.legacyPackages.${system});
      # `nix run .#agent-codex` and the like (docs/agents.md): the bundled
      # agents this nixpkgs has, but unfree claude-code.
      agents =
        pkgs:
        lib.mapAttrs' (
          name: agent: lib.nameValuePair "agent-${name}" (self.lib.mkAgentSandbox pkgs (agent // { inherit name; }))
        ) (removeAttrs (self.lib.agents pkgs) [ "claude-code" ]);
    in
    {
      # mkSandbox pkgs environment, mkServer pkgs { environments; }, and the
      # bundled presets (pkgs -> mkSandbox arguments).
      lib = import ./lib { inherit jail-nix; };

      # programs.nix-sandbox-mcp, registered in programs.mcp.servers.
      homeManagerModules.default = import ./modules/home-manager.nix self.lib;
      homeModules.default = self.homeManagerModules.default;
      # programs.nix-sandbox-mcp and the HTTP service services.nix-sandbox-mcp.
      nixosModules.default = import ./modules/nixos.nix self.lib;

      templates = {
        default = self.templates.custom-env;
        custom-env = {
          path = ./templates/custom-env;
          description = "A server of your own environments: a data-science Python and a tools shell";
        };
      };

      packages = forAllSystems (
        _system: pkgs:
        let
          launcher = pkgs.callPackage ./package.nix { };
          presets = lib.mapAttrs (_: preset: self.lib.mkSandbox pkgs (preset pkgs)) self.lib.presets;
          # `nix run .#sandbox-go` and the like; served only when named.
          optional = lib.mapAttrs' (
            name: preset: lib.nameValuePair "sandbox-${name}" (self.lib.mkSandbox pkgs (preset pkgs))
          ) self.lib.optionalPresets;
        in
        optional
        // agents pkgs
        // {
          inherit launcher;
          sandbox-python = presets.python;
          sandbox-shell = presets.shell;
          sandbox-node = presets.node;
          default = self.lib.mkServer pkgs {
            environments = lib.attrValues presets;
            inherit launcher;
          };
        }
      );

      apps = forAllSystems (
        _system: pkgs:
        lib.mapAttrs (name: agent: {
          type = "app";
          program = "${agent}/bin/${name}";
        }) (agents pkgs)
      );

      # The offline harness's end-to-end tests, against real nixpkgs builds.
      checks = forAllSystems (
        system: pkgs:
        import ./checks/e2e/e2e.nix {
          inherit pkgs;
          inherit (self.lib) mkSandbox;
          packages = self.packages.${system};
        }
        # The HTTP service in a NixOS VM (needs KVM).
        // lib.optionalAttrs (system == "x86_64-linux") {
          nixos-service = import ./checks/eval/nixosService.nix {
            inherit pkgs;
            module = self.nixosModules.default;
          };
        }
      );

      devShells = forAllSystems (
        _system: pkgs: {
          default = pkgs.mkShell {
            packages = with pkgs; [
              cargo
              rustc
              clippy
              rustfmt
              bubblewrap
              python3
              nodejs
              jq
              shellcheck
              nixfmt
            ];
          };
        }
      );

      formatter = forAllSystems (_system: pkgs: pkgs.nixfmt);
    };
}
