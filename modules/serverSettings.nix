# Takes nixpkgs' lib; returns the option declarations of how the server
# runs, shared by programs.nix-sandbox-mcp (home-manager) and
# services.nix-sandbox-mcp (NixOS): projectDir, projectMount, projectWritable,
# projectDevShell,
# sessionIdleTimeout, sessionMaxLifetime, maxSessions, maxSessionsTotal,
# maxCheckpoints,
# maxRuns, warmJails, maxUnreadBytes, outputDir, outputMaxMb, outputCallMb, and
# packages on demand's bounds, maxCompositions and packagesCacheMax.
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
  projectWritable = mkOption {
    type = types.bool;
    default = false;
    description = ''
      Each session sees {option}`projectDir` writable through a copy-on-write
      layer of its own (`NIX_SANDBOX_PROJECT_WRITABLE`): builds and edits
      work in place, the host's tree is never written, and the changes are
      the resource `sandbox://SESSION/project.diff` for a person to apply.
      Not served by a server running as root; under the NixOS service's
      dynamic user, the project's owner's files cannot be modified.
    '';
    example = true;
  };
  projectDevShell = mkOption {
    type = types.bool;
    default = false;
    description = ''
      When {option}`projectDir` holds a `flake.nix`, the model gets the
      environment `project`: that flake's `devShells.<system>.default` (its
      packages, its variables but host paths and secret-named ones, its
      shellHook run inside the jail), in a jail like any other, offline, with
      the default limits (`NIX_SANDBOX_PROJECT_DEVSHELL`). Built by the
      server's Nix on first use, from a pure evaluation of the flake, and
      built again at the next call after `flake.nix` or `flake.lock`
      changes. The server's user needs the Nix daemon or a store it owns.
    '';
    example = true;
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
  maxSessionsTotal = mkOption {
    type = types.ints.positive;
    default = 32;
    description = ''
      Sessions open at once, all MCP clients together
      (`NIX_SANDBOX_MAX_SESSIONS_TOTAL`); a client's own
      {option}`maxSessions` is at most this.
    '';
    example = 8;
  };
  maxCheckpoints = mkOption {
    type = types.ints.unsigned;
    default = 0;
    description = ''
      Checkpoints kept per session (`NIX_SANDBOX_MAX_CHECKPOINTS`): its
      files at the end of each of its last N calls that changed them, which
      a call's `from: "NAME@CALL"` starts a session from; the oldest go
      first. Each holds memory of the session's `workspace_mb`. 0 keeps
      none (`from: "NAME"` still copies a session as it is).
    '';
    example = 8;
  };
  maxRuns = mkOption {
    type = types.ints.positive;
    default = 8;
    description = ''
      Runs without a session (each a jail) at once, all MCP clients
      together (`NIX_SANDBOX_MAX_RUNS`); one more waits up to 10 s for a
      slot, then is refused.
    '';
    example = 4;
  };
  warmJails = mkOption {
    type = types.ints.unsigned;
    default = 4;
    description = ''
      Most warm jails, all environments together
      (`NIX_SANDBOX_WARM_JAILS`): session jails started ahead of demand,
      each serving one `run` without a session (read as the run wrapper's
      run, and returning its `/workspace/outputs`; one that finds none
      ready uses the run wrapper and returns none) or one new session,
      then killed. An environment no call used for 120 s keeps none.
      Each idle one holds its interpreter's memory (about 15 MiB for
      Python). `0` starts none.
    '';
    example = 0;
  };
  maxUnreadBytes = mkOption {
    type = types.ints.positive;
    default = 16777216;
    description = ''
      Bytes of answers a stdio client has not read
      (`NIX_SANDBOX_MAX_UNREAD_BYTES`); past them the server reads no more
      of its requests until it reads.
    '';
    example = 4194304;
  };
  maxCompositions = mkOption {
    type = types.ints.positive;
    default = 1;
    description = ''
      Compositions of packages on demand (each a Nix evaluation, and a
      build or substitution) at once, all MCP clients together
      (`NIX_SANDBOX_MAX_COMPOSITIONS`); one more waits up to
      `packagesOnDemand.timeoutSeconds` for a slot, then is refused. One
      evaluation of nixpkgs takes hundreds of MB.
    '';
    example = 2;
  };
  packagesCacheMax = mkOption {
    type = types.ints.positive;
    default = 32;
    description = ''
      Composed package sets kept, each with a GC root
      (`NIX_SANDBOX_PACKAGES_CACHE_MAX`); past them the least recently
      used set is dropped with its root, and Nix may collect it.
    '';
    example = 8;
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
  outputMaxMb = mkOption {
    type = types.ints.positive;
    default = 1024;
    description = ''
      Most MiB in {option}`outputDir`, what was there before counted
      (`NIX_SANDBOX_OUTPUT_MAX_MB`); past them outputs are not mirrored,
      and results say so.
    '';
    example = 4096;
  };
  outputCallMb = mkOption {
    type = types.ints.positive;
    default = 64;
    description = "Most MiB mirrored to {option}`outputDir` per call (`NIX_SANDBOX_OUTPUT_CALL_MB`).";
    example = 256;
  };
  filesMb = mkOption {
    type = types.ints.positive;
    default = 50;
    description = ''
      Most MiB the `files` of one `run` call may hold in all
      (`NIX_SANDBOX_FILES_MB`), and never more than the environment's
      `workspace_mb`; a call over it is refused with `files_too_large`.
    '';
    example = 200;
  };
  layersMb = mkOption {
    type = types.nullOr types.ints.positive;
    default = null;
    description = ''
      Most MiB all session layers reserve together (`NIX_SANDBOX_LAYERS_MB`):
      each is a tmpfs of its environment's `workspace_mb` (memory) holding
      the session's `/workspace`, project changes and checkpoints, reserved
      while its jail lives; a session whose layer does not fit is refused
      with `layers_full`. `null`: the server's default, the machine's
      memory (`MemTotal`).
    '';
    example = 8192;
  };
}
