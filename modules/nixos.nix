# Takes the flake's library (mkSandbox, mkServer, presets); returns the NixOS
# module: programs.nix-sandbox-mcp (the server package, built from the
# environments, in environment.systemPackages) and services.nix-sandbox-mcp,
# a hardened systemd service serving the same server as streamable HTTP with
# a bearer token.
#
# The hardening keeps what bubblewrap needs: unprivileged user namespaces
# (no RestrictNamespaces, no PrivateUsers), AF_NETLINK (bwrap brings up the
# jail's loopback), and a /proc with nothing mounted over it (bwrap mounts a
# fresh proc in the jail's pid namespace, which the kernel refuses when parts
# of the outer /proc are hidden: so no ProtectKernelTunables,
# ProtectKernelLogs, ProtectProc or ProcSubset), and sethostname (jail.nix's
# network combinator gives a `network = true` jail its hostname with
# bwrap's --hostname, which ProtectHostname's seccomp filter refuses in
# every child: no ProtectHostname). HOME is a StateDirectory:
# jail.nix writes its fake passwd under ~/.local/share/jail.nix. Delegate
# gives the launcher the cgroup it enforces memory and process limits with
# (so no ProtectControlGroups either).
sandboxLib:
{ config, lib, ... }:
let
  inherit (lib) mkOption types;
  program = config.programs.nix-sandbox-mcp;
  cfg = config.services.nix-sandbox-mcp;
  unit = config.systemd.services.nix-sandbox-mcp;
  stateDirectory = "nix-sandbox-mcp";
  userNamespacesAssertion = option: {
    assertion = config.security.allowUserNamespaces;
    message = "${option} needs security.allowUserNamespaces = true: every sandbox is a bubblewrap jail in unprivileged user namespaces.";
  };
in
{
  _file = ./nixos.nix;
  imports = [ (import ./program.nix sandboxLib) ];

  options.services.nix-sandbox-mcp = import ./serverSettings.nix lib // {
    enable = lib.mkEnableOption ''
      the nix-sandbox-mcp service: the environments of
      {option}`programs.nix-sandbox-mcp.environments` served as MCP over
      streamable HTTP, to clients holding the bearer token in
      {option}`services.nix-sandbox-mcp.tokenFile`
    '';

    listenAddress = mkOption {
      type = types.strMatching "([[][0-9a-fA-F:.]+[]]|[0-9.]+|localhost):[0-9]+";
      default = "127.0.0.1:8765";
      description = ''
        Address and port of the HTTP endpoint (`/mcp`). Loopback by
        default; any other address is reachable from the network, so open
        the firewall yourself only if you mean it. A loopback address (or
        `localhost`, or `0.0.0.0`) is held on both loopback families: the
        server also listens on the same port of `::1` (or `127.0.0.1`), so
        that no other process, a `network = true` jail among them, can
        answer clients that resolve `localhost` there; the service does not
        start while another process holds that port.
      '';
      example = "[::1]:8765";
    };

    tokenFile = mkOption {
      type = types.nullOr (types.strMatching "/.*");
      default = null;
      description = ''
        A file holding the bearer token clients must send
        (`Authorization: Bearer TOKEN`); required. The service reads it as
        a systemd credential (LoadCredential). A string, so the secret never
        enters the Nix store.
      '';
      example = "/run/secrets/nix-sandbox-mcp-token";
    };

    allowedOrigins = mkOption {
      type = types.listOf (types.strMatching "https?://[]A-Za-z0-9.:[-]+");
      default = [ ];
      description = ''
        Browser origins allowed besides the loopback ones. A request with
        an `Origin` header naming any other origin gets 403 (DNS rebinding
        protection); requests without `Origin` (non-browser clients) pass.
      '';
      example = [ "https://agent.example.org" ];
    };

    maxMcpSessions = mkOption {
      type = types.ints.positive;
      default = 64;
      description = ''
        MCP sessions at once (`NIX_SANDBOX_MAX_MCP_SESSIONS`); past them an
        `initialize` request ends the least recently used MCP session that
        is idle and holds no run or session (its client's next request
        gets 404 and starts a new one), or, when every one holds something,
        gets 503.
      '';
      example = 16;
    };

    clientRunsShare = mkOption {
      type = types.ints.positive;
      default = 4;
      description = ''
        Runs one client (an MCP session; requests without one count as one
        client together) may hold while other clients want slots
        (`NIX_SANDBOX_CLIENT_RUNS_SHARE`), out of
        {option}`maxRuns`. Beyond it a client takes a free slot only while
        no client within its share waits and another slot stays free;
        waiting runs of clients within their share go first.
      '';
      example = 2;
    };

    clientSessionsShare = mkOption {
      type = types.ints.positive;
      default = 16;
      description = ''
        Sessions one client may hold while other clients want slots
        (`NIX_SANDBOX_CLIENT_SESSIONS_SHARE`), out of
        {option}`maxSessionsTotal`. Beyond it a client opens a session
        only while another slot stays free, and a client within its share
        that finds no slot free gets the least recently used idle session
        of a client beyond its share ended for it.
      '';
      example = 8;
    };

    mcpSessionIdleTimeout = mkOption {
      type = types.ints.positive;
      default = 300;
      description = ''
        Seconds after which an MCP session without requests ends
        (`NIX_SANDBOX_MCP_SESSION_IDLE_TIMEOUT`); at least
        {option}`sessionIdleTimeout`, and the longest run's timeout.
      '';
      example = 3600;
    };

    maxConnections = mkOption {
      type = types.ints.positive;
      default = 128;
      description = ''
        HTTP connections at once (`NIX_SANDBOX_MAX_CONNECTIONS`); past them a
        new connection closes the oldest that has not sent the token.
      '';
      example = 32;
    };

    requestReadTimeout = mkOption {
      type = types.ints.positive;
      default = 10;
      description = ''
        Seconds a request's headers may take to arrive, and as many its body
        (`NIX_SANDBOX_REQUEST_READ_TIMEOUT`); then the connection is closed.
      '';
      example = 30;
    };
  };

  config = lib.mkMerge [
    (lib.mkIf program.enable {
      assertions = [ (userNamespacesAssertion "programs.nix-sandbox-mcp") ];
      environment.systemPackages = [ program.finalPackage ];
    })

    (lib.mkIf cfg.enable {
      assertions = [
        (userNamespacesAssertion "services.nix-sandbox-mcp")
        {
          assertion = cfg.tokenFile != null;
          message = "services.nix-sandbox-mcp.tokenFile must be set: the HTTP service always requires a bearer token.";
        }
        {
          assertion = cfg.tokenFile == null || !lib.hasPrefix "${builtins.storeDir}/" cfg.tokenFile;
          message = "services.nix-sandbox-mcp.tokenFile is in the Nix store, readable by every user; give the path of a file outside it.";
        }
        {
          assertion = lib.any (environment: environment.enable) (lib.attrValues program.environments);
          message = "services.nix-sandbox-mcp: every environment of programs.nix-sandbox-mcp.environments is disabled.";
        }
      ];

      systemd.services.nix-sandbox-mcp = {
        description = "nix-sandbox-mcp: sandboxed code execution over MCP (streamable HTTP)";
        wantedBy = [ "multi-user.target" ];
        after = [ "network.target" ];
        environment = import ./serverEnvironment.nix lib cfg // {
          HOME = "/var/lib/${stateDirectory}";
          NIX_SANDBOX_MAX_MCP_SESSIONS = toString cfg.maxMcpSessions;
          NIX_SANDBOX_CLIENT_RUNS_SHARE = toString cfg.clientRunsShare;
          NIX_SANDBOX_CLIENT_SESSIONS_SHARE = toString cfg.clientSessionsShare;
          NIX_SANDBOX_MCP_SESSION_IDLE_TIMEOUT = toString cfg.mcpSessionIdleTimeout;
          NIX_SANDBOX_MAX_CONNECTIONS = toString cfg.maxConnections;
          NIX_SANDBOX_REQUEST_READ_TIMEOUT = toString cfg.requestReadTimeout;
        };
        # The server builds the flakes of NIX_SANDBOX_ENVS (set in
        # `environment` above) with nix at start-up, and the packages calls
        # ask for (packagesOnDemand) and the project's dev shell
        # (projectDevShell) through the Nix daemon.
        path = lib.mkIf (
          unit.environment ? NIX_SANDBOX_ENVS
          || program.packagesOnDemand.allow != null
          || unit.environment ? NIX_SANDBOX_PROJECT_DEVSHELL
        ) [ config.nix.package ];
        serviceConfig = {
          ExecStart = lib.concatStringsSep " " (
            [
              (lib.getExe program.finalPackage)
              "--http"
              cfg.listenAddress
              "--token-file"
              "%d/token"
            ]
            ++ lib.concatMap (origin: [
              "--allow-origin"
              origin
            ]) cfg.allowedOrigins
          );
          LoadCredential = [ "token:${toString cfg.tokenFile}" ];
          Restart = "on-failure";

          DynamicUser = true;
          StateDirectory = stateDirectory;
          StateDirectoryMode = "0700";
          UMask = "0077";
          ProtectSystem = "strict";
          # With a project directory: an empty /home, /root and /run/user
          # with only the project in it, read-only.
          ProtectHome = if cfg.projectDir == null then true else "tmpfs";
          BindReadOnlyPaths = lib.optional (cfg.projectDir != null) cfg.projectDir;
          # The outputs mirror, when outside the state directory.
          ReadWritePaths = lib.optional (
            cfg.outputDir != null && !lib.hasPrefix "/var/lib/${stateDirectory}/" cfg.outputDir
          ) cfg.outputDir;
          PrivateTmp = true;
          NoNewPrivileges = true;
          RestrictAddressFamilies = [
            "AF_UNIX"
            "AF_INET"
            "AF_INET6"
            "AF_NETLINK"
          ];
          RestrictNamespaces = false;
          PrivateUsers = false;
          # A cgroup v2 subtree of its own: the launcher makes one cgroup
          # per run in it, which enforces memory_mb and pids.
          Delegate = true;
          # A run killed at its memory limit is the limit working: systemd's
          # default (stop) would stop the whole server for it.
          OOMPolicy = "continue";
          # Open files, soft and hard: systemd's default soft limit (1,024)
          # is less than the server can need (every run, session and
          # connection, and up to 128 for each jail's network gate). The
          # launcher raises a lower soft limit to the hard one itself; its
          # jails set their own (`limits.nofile`).
          LimitNOFILE = 65536;
          LockPersonality = true;
          RestrictRealtime = true;
          RestrictSUIDSGID = true;
          SystemCallArchitectures = "native";
          ProtectKernelModules = true;
          # Not ProtectHostname: its seccomp filter makes sethostname fail
          # in every child, and bwrap calls it (--hostname) for every jail
          # of a `network = true` environment, which would then never
          # start. The jails have UTS namespaces of their own, and the jail's
          # seccomp filter refuses sethostname to the code in them.
          ProtectHostname = false;
        };
      };
    })
  ];
}
