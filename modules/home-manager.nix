# Takes the flake's library (mkSandbox, mkServer, presets); returns the
# home-manager module programs.nix-sandbox-mcp. Enabled, it registers the
# server in home-manager's programs.mcp.servers.<serverName> (and turns on
# programs.mcp), which every client module with `enableMcpIntegration`
# (Claude Code, Codex, opencode, gemini-cli, VS Code, Zed...) reads.
# `agents` puts the bundled agents' agent-NAME commands (lib.agents,
# lib.mkAgentSandbox; docs/agents.md) in home.packages, whether the server
# is enabled or not.
sandboxLib:
{
  config,
  lib,
  pkgs,
  ...
}:
let
  inherit (lib) mkOption types;
  cfg = config.programs.nix-sandbox-mcp;
  anyEnabled = lib.any (environment: environment.enable) (lib.attrValues cfg.environments);
  bundled = sandboxLib.agents pkgs;
  missing = lib.filter (name: !(bundled ? ${name})) cfg.agents;
in
{
  _file = ./home-manager.nix;
  imports = [ (import ./program.nix sandboxLib) ];

  options.programs.nix-sandbox-mcp = import ./serverSettings.nix lib // {
    serverName = mkOption {
      type = types.strMatching "[A-Za-z0-9_-]+";
      default = "nix-sandbox";
      description = "The server's name in {option}`programs.mcp.servers`, as MCP clients show it.";
      example = "sandbox";
    };
    agents = mkOption {
      type = types.listOf (
        types.enum [
          "codex"
          "gemini-cli"
          "opencode"
          "claude-code"
        ]
      );
      default = [ ];
      description = ''
        Bundled coding agents whose `agent-NAME` command goes in
        {option}`home.packages`: the agent on the project in a jail whose
        only network is its model API, the API key put in by the egress
        proxy and kept out of the jail, its changes kept until
        `agent-NAME --apply` (docs/agents.md). `claude-code` needs a `pkgs`
        with `allowUnfree`.
      '';
      example = [ "codex" ];
    };
  };

  config = lib.mkMerge [
    (lib.mkIf (cfg.agents != [ ]) {
      assertions = [
        {
          assertion = missing == [ ];
          message = "programs.nix-sandbox-mcp.agents: ${lib.concatStringsSep ", " missing} has no package in this nixpkgs (pkgs.codex, pkgs.gemini-cli, pkgs.opencode, pkgs.claude-code)";
        }
      ];
      home.packages = map (
        name: sandboxLib.mkAgentSandbox pkgs (bundled.${name} // { inherit name; })
      ) (lib.filter (name: bundled ? ${name}) cfg.agents);
    })
    (lib.mkIf cfg.enable {
      assertions = [
        {
          assertion = anyEnabled;
          message = "programs.nix-sandbox-mcp: every environment is disabled; enable one, or disable programs.nix-sandbox-mcp.";
        }
      ];

      programs.mcp = {
        enable = lib.mkDefault true;
        # Without environments there is no server to build: the assertion says why.
        servers.${cfg.serverName} = lib.mkIf anyEnabled {
          command = lib.getExe cfg.finalPackage;
          args = [ "--stdio" ];
          env = import ./serverEnvironment.nix lib cfg;
        };
      };
    })
  ];
}
