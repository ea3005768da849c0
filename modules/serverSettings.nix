# Takes nixpkgs' lib; returns the option declarations of how the server
# runs, shared by programs.nix-sandbox-mcp (home-manager) and
# services.nix-sandbox-mcp (NixOS): projectDir, projectMount,
# sessionIdleTimeout, sessionMaxLifetime, maxSessions and outputDir.
# serverEnvironment.nix turns them into the server's environment variables.
lib:
let
  inherit (lib) mkOption types;
in
{
  projectDir = mkOption {
    type = types.nullOr (types.strMatching "/.*");
    default = null;
    description = ''
      A directory shown read-only in every jail at {option}`projectMount`
      (`PROJECT_DIR`). A string, so the directory is not copied into the
      Nix store.
    '';
    example = "/home/alice/src/project";
  };
  projectMount = mkOption {
    type = types.strMatching "/.*";
    default = "/project";
    description = "Where {option}`projectDir` appears in the jail (`PROJECT_MOUNT`).";
    example = "/src";
  };
  sessionIdleTimeout = mkOption {
    type = types.ints.positive;
    default = 300;
    description = "Seconds after which an unused session is closed (`SESSION_IDLE_TIMEOUT`).";
    example = 900;
  };
  sessionMaxLifetime = mkOption {
    type = types.ints.positive;
    default = 3600;
    description = "Seconds after which a session is closed however busy (`SESSION_MAX_LIFETIME`).";
    example = 14400;
  };
  maxSessions = mkOption {
    type = types.ints.positive;
    default = 32;
    description = "Sessions open at once, per MCP client (`NIX_SANDBOX_MAX_SESSIONS`).";
    example = 4;
  };
  outputDir = mkOption {
    type = types.nullOr (types.strMatching "/.*");
    default = null;
    description = ''
      A host directory where the files code writes to /workspace/outputs
      are copied, one subdirectory per session (`NIX_SANDBOX_OUTPUT_DIR`),
      so that you can open the charts. Off when null. The server creates
      it; it never follows a symbolic link inside it. For the NixOS
      service, a directory under /var/lib/nix-sandbox-mcp (its state
      directory) needs nothing more; another one is made writable for the
      service (ReadWritePaths) and must exist.
    '';
    example = "/home/alice/sandbox-outputs";
  };
}
