# Takes the flake's library (mkSandbox, mkServer, presets); returns the
# home-manager module programs.nix-sandbox-mcp. Enabled, it registers the
# server in home-manager's programs.mcp.servers.<serverName> (and turns on
# programs.mcp), which every client module with `enableMcpIntegration`
# (Claude Code, Codex, opencode, gemini-cli, VS Code, Zed...) reads.
sandboxLib:
{ config, lib, ... }:
let
  inherit (lib) mkOption types;
  cfg = config.programs.nix-sandbox-mcp;
  anyEnabled = lib.any (environment: environment.enable) (lib.attrValues cfg.environments);
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
  };

  config = lib.mkIf cfg.enable {
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
  };
}
