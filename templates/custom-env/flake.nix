{
  description = "My sandboxed environments for LLM agents, served over MCP by nix-sandbox-mcp";

  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/nixpkgs-unstable";
    nix-sandbox-mcp = {
      # Your flake registry's nix-sandbox-mcp: the checkout you registered
      # with `nix registry add nix-sandbox-mcp git+file:///path/of/checkout`
      # (see its README, "Get it"). To pin a fork instead, this is the one
      # line to edit: url = "github:YOU/nix-sandbox-mcp"; then `nix flake lock`.
      url = "flake:nix-sandbox-mcp";
      inputs.nixpkgs.follows = "nixpkgs";
    };
  };

  outputs =
    { nixpkgs, nix-sandbox-mcp, ... }:
    let
      inherit (nixpkgs) lib;
      inherit (nix-sandbox-mcp.lib) mkSandbox mkServer presets;
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forAllSystems = f: lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});

      # Each environment: lib.mkSandbox's arguments (the attribute name is
      # the environment's name). Add a package to its `packages`.
      environments = pkgs: {
        data-science = {
          interpreter = "python";
          description = "Python with numpy, pandas and matplotlib";
          packages = [
            (pkgs.python3.withPackages (ps: [
              ps.numpy
              ps.pandas
              ps.matplotlib
            ]))
          ];
          env.MPLBACKEND = "Agg";
          limits.memory_mb = 2048;
        };
        # Network by policy: PyPI and nothing else. `pip install NAME`
        # puts packages in /workspace/.pip (kept for a session's life),
        # which the interpreter imports from.
        packaging = {
          interpreter = "python";
          description = "Python with pip. It installs from PyPI and reaches nothing else.";
          packages = [ (pkgs.python3.withPackages (ps: [ ps.pip ])) ];
          network.allow = [
            { host = "pypi.org"; }
            { host = "files.pythonhosted.org"; }
          ];
          env = {
            PIP_TARGET = "/workspace/.pip";
            PYTHONPATH = "/workspace/.pip";
            PIP_DISABLE_PIP_VERSION_CHECK = "1";
          };
        };
        tools = {
          interpreter = "bash";
          description = "Bash with jq, ripgrep and the usual tools";
          packages = with pkgs; [
            bash
            coreutils
            findutils
            gnugrep
            gnused
            gawk
            jq
            ripgrep
          ];
        };
      };
    in
    {
      packages = forAllSystems (
        pkgs:
        let
          mine = environments pkgs;
        in
        # `nix run .#data-science`: that environment's interpreter, jailed.
        lib.mapAttrs (name: environment: mkSandbox pkgs ({ inherit name; } // environment)) mine
        // {
          # `nix run`: the MCP server (stdio) with the bundled python, shell
          # and node, and yours. Serve only yours: `environments = mine;`.
          default = mkServer pkgs {
            environments = lib.mapAttrs (_: preset: preset pkgs) presets // mine;
            # Compiled languages and network tools, served when named
            # (each run builds one source file): "go", "rust", "java",
            # "c", "cpp", "network-tools".
            # presets = [ "go" "rust" ];
          };
        }
      );
    };
}
