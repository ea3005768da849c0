# Takes a package set, this flake (its outputs and source) and home-manager's
# source; returns the offline harness's tests of the NixOS and home-manager
# modules, each evaluated with lib.evalModules: home-manager's real
# programs/mcp.nix with homeManagerStubs.nix, and nixosStubs.nix.
#   packages:     what the module snippets (snippets/) configure, to build
#                 and run: home-server, home-mcp-json (~/.config/mcp/mcp.json),
#                 nixos-server; and two sandboxes named like bundled presets,
#                 python-replacement and node-replacement, each with jq, for
#                 NIX_SANDBOX_DIR and NIX_SANDBOX_ENVS to replace the presets;
#                 what the VM test (checks/vm/run) boots: vm-service, the
#                 NixOS service's unit file, vm-mcp-json and
#                 vm-languages (vm/configurations.nix).
#   service:      how systemd would start the snippet's service, on port 0:
#                 { ExecStart, environment }, for checks/e2e/served.py to run.
#   expectations: name -> { got, want }: got must equal want (as JSON).
#   failures:     id -> { title, value, error }: evaluating `value` must fail
#                 with a message containing `error`.
{
  pkgs,
  nix-sandbox-mcp,
  home-manager,
}:
let
  inherit (pkgs) lib;
  checked = import ./checkAssertions.nix lib;
  hmLib = import "${home-manager}/modules/lib/stdlib-extended.nix" lib;
  hmPkgs = pkgs // {
    formats = (pkgs.formats or { }) // {
      json = import ./jsonFormat.nix pkgs;
    };
  };
  home =
    modules:
    checked (
      hmLib.evalModules {
        modules = [
          "${home-manager}/modules/programs/mcp.nix"
          ./homeManagerStubs.nix
          nix-sandbox-mcp.homeManagerModules.default
          { _module.args.pkgs = hmPkgs; }
        ]
        ++ modules;
      }
    );
  nixos =
    modules:
    checked (
      lib.evalModules {
        modules = [
          ./nixosStubs.nix
          nix-sandbox-mcp.nixosModules.default
          { _module.args.pkgs = pkgs; }
        ]
        ++ modules;
      }
    );

  homeSnippet = home [ ./snippets/home-manager.nix ];
  homeServer = homeSnippet.programs.nix-sandbox-mcp.finalPackage;
  registered = homeSnippet.programs.mcp.servers.nix-sandbox;
  nixosSnippet = nixos [ ./snippets/nixos.nix ];
  nixosServer = nixosSnippet.programs.nix-sandbox-mcp.finalPackage;
  unit = nixosSnippet.systemd.services.nix-sandbox-mcp;
  vmTest = import ../vm/configurations.nix { inherit pkgs nixos home; };

  # The environments a server package serves, by name: { description, packages }.
  served =
    server:
    lib.listToAttrs (
      map (sandbox: {
        inherit (sandbox.sandbox) name;
        value = {
          inherit (sandbox.sandbox.environment) description;
          packages = map (package: package.name) sandbox.sandbox.environment.packages;
        };
      }) server.sandboxes
    );
  enabled = {
    programs.nix-sandbox-mcp.enable = true;
  };
  custom = {
    interpreter = "python";
    packages = [ pkgs.python3 ];
  };
in
{
  packages = {
    vm-service = vmTest.service;
    vm-mcp-json = vmTest.mcp-json;
    vm-languages = vmTest.languages;
    home-server = homeServer;
    home-mcp-json = homeSnippet.xdg.configFile."mcp/mcp.json".source;
    nixos-server = nixosServer;
    python-replacement = nix-sandbox-mcp.lib.mkSandbox pkgs {
      name = "python";
      interpreter = "python";
      description = "Python with jq, from NIX_SANDBOX_DIR";
      packages = [
        pkgs.python3
        pkgs.jq
      ];
    };
    node-replacement = nix-sandbox-mcp.lib.mkSandbox pkgs {
      name = "node";
      interpreter = "node";
      description = "Node.js with jq, from NIX_SANDBOX_ENVS";
      packages = [
        pkgs.nodejs
        pkgs.jq
      ];
    };
  };

  service =
    let
      onAnyPort = nixos [
        ./snippets/nixos.nix
        { services.nix-sandbox-mcp.listenAddress = "127.0.0.1:0"; }
      ];
    in
    {
      inherit (onAnyPort.systemd.services.nix-sandbox-mcp.serviceConfig) ExecStart;
      inherit (onAnyPort.systemd.services.nix-sandbox-mcp) environment;
    };

  expectations = {
    "home-manager: the built-in profiles reach the manifest, every field present" = {
      got = (home [ enabled ]).programs.nix-sandbox-mcp.finalPackage.profiles;
      want = {
        strict = {
          description = "No network, no added packages, no project; small limits: for code you do not trust";
          network = false;
          packages = false;
          project = "none";
          limits = {
            memory_mb = 512;
            cpu_s = 60;
            timeout_s = 30;
            max_timeout_s = 120;
            nofile = 256;
            file_mb = 64;
            workspace_mb = 64;
          };
        };
        offline-review = {
          description = "Reads the project read-only, without network or added packages: review and test, change nothing";
          network = false;
          packages = false;
          project = "read-only";
          limits = { };
        };
        build-install = {
          description = "The environment as configured: its network policy, the server's packages, the project as the server mounts it";
          network = null;
          packages = true;
          project = null;
          limits = { };
        };
      };
    };
    "nixos: a profile of one's own, and a built-in's limit set, reach the manifest beside the built-ins" = {
      got =
        let
          profiles =
            (nixos [
              enabled
              {
                programs.nix-sandbox-mcp.profiles = {
                  review-small = {
                    description = "Reads the project, no network";
                    network = false;
                    project = "read-only";
                    limits.memory_mb = 512;
                  };
                  strict.limits.cpu_s = 30;
                };
              }
            ]).programs.nix-sandbox-mcp.finalPackage.profiles;
        in
        {
          names = builtins.attrNames profiles;
          inherit (profiles) review-small;
          strict = profiles.strict.limits;
        };
      want = {
        names = [
          "build-install"
          "offline-review"
          "review-small"
          "strict"
        ];
        review-small = {
          description = "Reads the project, no network";
          network = false;
          packages = true;
          project = "read-only";
          limits.memory_mb = 512;
        };
        strict = {
          memory_mb = 512;
          cpu_s = 30;
          timeout_s = 30;
          max_timeout_s = 120;
          nofile = 256;
          file_mb = 64;
          workspace_mb = 64;
        };
      };
    };
    "home-manager: profiles = lib.mkForce { } serves no profile" = {
      got =
        (home [
          enabled
          { programs.nix-sandbox-mcp.profiles = lib.mkForce { }; }
        ]).programs.nix-sandbox-mcp.finalPackage.profiles;
      want = { };
    };
    "home-manager: agents puts each agent's agent-NAME command in home.packages, the server off" = {
      got =
        let
          config = home [
            {
              # The stand-in package set has no codex: bash stands in.
              _module.args.pkgs = lib.mkForce (hmPkgs // { codex = pkgs.bash; });
              programs.nix-sandbox-mcp.agents = [ "codex" ];
            }
          ];
        in
        map (package: {
          inherit (package) name;
          program = package.meta.mainProgram;
          servers = builtins.attrNames config.programs.mcp.servers;
        }) config.home.packages;
      want = [
        {
          name = "agent-codex";
          program = "agent-codex";
          servers = [ ];
        }
      ];
    };
    "home-manager: the optional presets are served only when named, and a named one's fields can be set" =
      {
        got =
          let
            served =
              modules: map (sandbox: sandbox.sandbox.name) (home ([ enabled ] ++ modules)).programs.nix-sandbox-mcp.finalPackage.sandboxes;
          in
          {
            default = served [ ];
            named = served [
              {
                programs.nix-sandbox-mcp.presets = [ "go" ];
                programs.nix-sandbox-mcp.environments.go.limits.memory_mb = 2048;
              }
            ];
            memory =
              (home [
                enabled
                {
                  programs.nix-sandbox-mcp.presets = [ "go" ];
                  programs.nix-sandbox-mcp.environments.go.limits.memory_mb = 2048;
                }
              ]).programs.nix-sandbox-mcp.environments.go.limits.memory_mb;
          };
        want = {
          default = [
            "node"
            "python"
            "shell"
          ];
          named = [
            "go"
            "node"
            "python"
            "shell"
          ];
          memory = 2048;
        };
      };
    "home-manager: packagesOnDemand is off by default" = {
      got = homeServer.packagesOnDemand;
      want = { };
    };
    "home-manager: packagesOnDemand reaches each environment's manifest entry" = {
      got = lib.mapAttrs (_: entry: removeAttrs entry.packages_on_demand [ "compose" ]) (
        home [
          enabled
          {
            programs.nix-sandbox-mcp.packagesOnDemand = {
              allow = [
                "jq"
                "python3Packages."
              ];
              timeoutSeconds = 60;
            };
            programs.nix-sandbox-mcp.environments.node.enable = false;
          }
        ]
      ).programs.nix-sandbox-mcp.finalPackage.packagesOnDemand;
      want = lib.genAttrs [ "python" "shell" ] (_: {
        allow = [
          "jq"
          "python3Packages."
        ];
        build = false;
        timeout_s = 60;
      });
    };
    "nixos: packagesOnDemand \"any\" with building reaches the server" = {
      got =
        (nixos [
          enabled
          {
            programs.nix-sandbox-mcp.packagesOnDemand = {
              allow = "any";
              build = true;
            };
          }
        ]).programs.nix-sandbox-mcp.finalPackage.packagesOnDemand.python.packages_on_demand.build;
      want = true;
    };
    "home-manager: the snippet registers the server in programs.mcp.servers.nix-sandbox and enables programs.mcp" =
      {
        got = {
          inherit (registered) command args;
          mcp = homeSnippet.programs.mcp.enable;
        };
        want = {
          command = "${homeServer}/bin/nix-sandbox-mcp";
          args = [ "--stdio" ];
          mcp = true;
        };
      };
    "home-manager: projectDir, projectMount and the session settings are the server's env" = {
      got = registered.env;
      want = {
        PROJECT_DIR = "/home/alice/src/project";
        PROJECT_MOUNT = "/project";
        SESSION_IDLE_TIMEOUT = "300";
        SESSION_MAX_LIFETIME = "3600";
        NIX_SANDBOX_MAX_SESSIONS = "32";
        NIX_SANDBOX_MAX_SESSIONS_TOTAL = "32";
        NIX_SANDBOX_MAX_CHECKPOINTS = "0";
        NIX_SANDBOX_FILES_MB = "50";
        NIX_SANDBOX_MAX_RUNS = "8";
        NIX_SANDBOX_WARM_JAILS = "4";
        NIX_SANDBOX_MAX_UNREAD_BYTES = "16777216";
        NIX_SANDBOX_MAX_COMPOSITIONS = "1";
        NIX_SANDBOX_PACKAGES_CACHE_MAX = "32";
      };
    };
    "home-manager: projectWritable is the server's NIX_SANDBOX_PROJECT_WRITABLE=1" = {
      got =
        (home [
          ./snippets/home-manager.nix
          { programs.nix-sandbox-mcp.projectWritable = true; }
        ]).programs.mcp.servers.nix-sandbox.env.NIX_SANDBOX_PROJECT_WRITABLE;
      want = "1";
    };
    "home-manager: projectDevShell is the server's NIX_SANDBOX_PROJECT_DEVSHELL=1" = {
      got =
        (home [
          ./snippets/home-manager.nix
          { programs.nix-sandbox-mcp.projectDevShell = true; }
        ]).programs.mcp.servers.nix-sandbox.env.NIX_SANDBOX_PROJECT_DEVSHELL;
      want = "1";
    };
    "home-manager: the server serves the presets and the custom environment, not the disabled node" = {
      got = lib.attrNames (served homeServer);
      want = [
        "data-science"
        "python"
        "shell"
      ];
    };
    "home-manager: a field set on a preset replaces the preset's, the rest of the preset stays" = {
      got =
        (served
          (home [
            enabled
            { programs.nix-sandbox-mcp.environments.python.description = "mine"; }
          ]).programs.nix-sandbox-mcp.finalPackage
        ).python;
      want = {
        description = "mine";
        packages = [ pkgs.python3.name ];
      };
    };
    "home-manager: the session settings and packages on demand's bounds reach the server's env" = {
      got =
        (home [
          enabled
          {
            programs.nix-sandbox-mcp = {
              sessionIdleTimeout = 60;
              sessionMaxLifetime = 600;
              maxSessions = 4;
              maxSessionsTotal = 6;
              maxRuns = 2;
              warmJails = 2;
              maxUnreadBytes = 1024;
              maxCompositions = 2;
              packagesCacheMax = 8;
              maxCheckpoints = 3;
              filesMb = 8;
              layersMb = 512;
            };
          }
        ]).programs.mcp.servers.nix-sandbox.env;
      want = {
        SESSION_IDLE_TIMEOUT = "60";
        SESSION_MAX_LIFETIME = "600";
        NIX_SANDBOX_MAX_SESSIONS = "4";
        NIX_SANDBOX_MAX_SESSIONS_TOTAL = "6";
        NIX_SANDBOX_MAX_CHECKPOINTS = "3";
        NIX_SANDBOX_FILES_MB = "8";
        NIX_SANDBOX_LAYERS_MB = "512";
        NIX_SANDBOX_MAX_RUNS = "2";
        NIX_SANDBOX_WARM_JAILS = "2";
        NIX_SANDBOX_MAX_UNREAD_BYTES = "1024";
        NIX_SANDBOX_MAX_COMPOSITIONS = "2";
        NIX_SANDBOX_PACKAGES_CACHE_MAX = "8";
      };
    };
    "home-manager: outputDir and its caps are the server's NIX_SANDBOX_OUTPUT_*" = {
      got =
        lib.filterAttrs (name: _: lib.hasPrefix "NIX_SANDBOX_OUTPUT_" name)
          (home [
            enabled
            {
              programs.nix-sandbox-mcp.outputDir = "/home/alice/outputs";
              programs.nix-sandbox-mcp.outputCallMb = 8;
            }
          ]).programs.mcp.servers.nix-sandbox.env;
      want = {
        NIX_SANDBOX_OUTPUT_DIR = "/home/alice/outputs";
        NIX_SANDBOX_OUTPUT_MAX_MB = "1024";
        NIX_SANDBOX_OUTPUT_CALL_MB = "8";
      };
    };
    "home-manager: serverName names the entry in programs.mcp.servers" = {
      got = lib.attrNames (
        home [
          enabled
          { programs.nix-sandbox-mcp.serverName = "sandbox"; }
        ]
      ).programs.mcp.servers;
      want = [ "sandbox" ];
    };
    "nixos: the server package is in environment.systemPackages" = {
      got = map toString nixosSnippet.environment.systemPackages;
      want = [ "${nixosServer}" ];
    };
    "nixos: the service serves HTTP on loopback with the token file as a systemd credential" = {
      got = {
        inherit (unit.serviceConfig) ExecStart LoadCredential;
        inherit (unit) wantedBy environment;
      };
      want = {
        ExecStart = "${nixosServer}/bin/nix-sandbox-mcp --http 127.0.0.1:8765 --token-file %d/token";
        LoadCredential = [ "token:/run/secrets/nix-sandbox-mcp-token" ];
        wantedBy = [ "multi-user.target" ];
        environment = {
          HOME = "/var/lib/nix-sandbox-mcp";
          SESSION_IDLE_TIMEOUT = "300";
          SESSION_MAX_LIFETIME = "3600";
          NIX_SANDBOX_MAX_SESSIONS = "32";
          NIX_SANDBOX_MAX_SESSIONS_TOTAL = "32";
          NIX_SANDBOX_MAX_CHECKPOINTS = "0";
          NIX_SANDBOX_FILES_MB = "50";
          NIX_SANDBOX_MAX_RUNS = "8";
          NIX_SANDBOX_WARM_JAILS = "4";
          NIX_SANDBOX_MAX_UNREAD_BYTES = "16777216";
          NIX_SANDBOX_MAX_COMPOSITIONS = "1";
          NIX_SANDBOX_PACKAGES_CACHE_MAX = "32";
          NIX_SANDBOX_MAX_MCP_SESSIONS = "64";
          NIX_SANDBOX_CLIENT_RUNS_SHARE = "4";
          NIX_SANDBOX_CLIENT_SESSIONS_SHARE = "16";
          NIX_SANDBOX_MCP_SESSION_IDLE_TIMEOUT = "300";
          NIX_SANDBOX_MAX_CONNECTIONS = "128";
          NIX_SANDBOX_REQUEST_READ_TIMEOUT = "10";
        };
      };
    };
    "nixos: the service is hardened and keeps what bubblewrap needs" = {
      got = lib.getAttrs (lib.attrNames (import ./nixosHardening.nix)) unit.serviceConfig;
      want = import ./nixosHardening.nix;
    };
    "nixos: the service has nix on its PATH when NIX_SANDBOX_ENVS is set (it builds those flakes), not otherwise" =
      {
        got =
          let
            withEnvs =
              (nixos [
                ./snippets/nixos.nix
                { systemd.services.nix-sandbox-mcp.environment.NIX_SANDBOX_ENVS = "/srv/envs#data"; }
              ]);
          in
          {
            withEnvs = map toString withEnvs.systemd.services.nix-sandbox-mcp.path;
            without = unit.path;
          };
        want = {
          withEnvs = [ "${nixosSnippet.nix.package}" ];
          without = [ ];
        };
      };
    "nixos: the service has nix on its PATH when packagesOnDemand is on (it realises packages)" = {
      got = map toString (
        nixos [
          ./snippets/nixos.nix
          { programs.nix-sandbox-mcp.packagesOnDemand.allow = [ "jq" ]; }
        ]
      ).systemd.services.nix-sandbox-mcp.path;
      want = [ "${nixosSnippet.nix.package}" ];
    };
    "nixos: packages on demand's bounds reach the service" = {
      got =
        lib.getAttrs
          [
            "NIX_SANDBOX_MAX_COMPOSITIONS"
            "NIX_SANDBOX_PACKAGES_CACHE_MAX"
          ]
          (nixos [
            ./snippets/nixos.nix
            {
              services.nix-sandbox-mcp = {
                maxCompositions = 3;
                packagesCacheMax = 4;
              };
            }
          ]).systemd.services.nix-sandbox-mcp.environment;
      want = {
        NIX_SANDBOX_MAX_COMPOSITIONS = "3";
        NIX_SANDBOX_PACKAGES_CACHE_MAX = "4";
      };
    };
    "nixos: outputDir reaches the service, writable when outside its state directory" = {
      got =
        let
          unitWith =
            dir:
            (nixos [
              ./snippets/nixos.nix
              { services.nix-sandbox-mcp.outputDir = dir; }
            ]).systemd.services.nix-sandbox-mcp;
          outside = unitWith "/srv/outputs";
          inside = unitWith "/var/lib/nix-sandbox-mcp/outputs";
        in
        {
          outside = [
            outside.environment.NIX_SANDBOX_OUTPUT_DIR
            outside.serviceConfig.ReadWritePaths
          ];
          inside = [
            inside.environment.NIX_SANDBOX_OUTPUT_DIR
            inside.serviceConfig.ReadWritePaths
          ];
          unset = unit.serviceConfig.ReadWritePaths;
        };
      want = {
        outside = [
          "/srv/outputs"
          [ "/srv/outputs" ]
        ];
        inside = [
          "/var/lib/nix-sandbox-mcp/outputs"
          [ ]
        ];
        unset = [ ];
      };
    };
    "nixos: a project directory is bound read-only into an otherwise empty /home" = {
      got =
        let
          withProject = nixos [
            ./snippets/nixos.nix
            { services.nix-sandbox-mcp.projectDir = "/home/alice/src"; }
          ];
        in
        {
          inherit (withProject.systemd.services.nix-sandbox-mcp.serviceConfig) ProtectHome BindReadOnlyPaths;
        };
      want = {
        ProtectHome = "tmpfs";
        BindReadOnlyPaths = [ "/home/alice/src" ];
      };
    };
  };

  failures = {
    hm-profile-network = {
      title = "home-manager: a profile that opens the network fails with mkServer's line";
      value =
        (home [
          enabled
          {
            programs.nix-sandbox-mcp.profiles.open = {
              description = "opens the network";
              network = true;
            };
          }
        ]).programs.nix-sandbox-mcp.finalPackage.profiles;
      error = "mkServer: profile open: `network` must be null (the environment's own) or false (no network): a profile cannot open the network (got true)";
    };
    nixos-profile-pids = {
      title = "nixos: a profile lowering pids fails: it is the environment's";
      value =
        (nixos [
          enabled
          { programs.nix-sandbox-mcp.profiles.strict.limits.pids = 8; }
        ]).programs.nix-sandbox-mcp.finalPackage.profiles;
      error = "mkServer: profile strict: `limits.pids` is built into the environment's wrapper and cannot be lowered per session: set it on the environment instead";
    };
    hm-agents-missing = {
      title = "home-manager: an agent whose package this nixpkgs lacks fails naming it";
      value = (home [ { programs.nix-sandbox-mcp.agents = [ "opencode" ]; } ]).home.packages;
      error = "programs.nix-sandbox-mcp.agents: opencode has no package in this nixpkgs";
    };
    hm-packages-allow = {
      title = "home-manager: a packagesOnDemand.allow entry that is not an attribute name fails";
      value =
        (home [
          enabled
          { programs.nix-sandbox-mcp.packagesOnDemand.allow = [ "jq; rm -rf /" ]; }
        ]).programs.nix-sandbox-mcp.finalPackage.packagesOnDemand;
      error = "packagesOnDemand.allow.\"[definition 1-entry 1]\"' is not of type `string matching the pattern";
    };
    hm-type = {
      title = "home-manager: a wrong option type fails with a readable message";
      value =
        (home [
          enabled
          { programs.nix-sandbox-mcp.environments.bad = custom // { network = "yes"; }; }
        ]).programs.mcp.servers.nix-sandbox.command;
      error = "programs.nix-sandbox-mcp.environments.bad.network' is not of type `true, false or { allow = [ RULE ]; credentials = { ... }; }'";
    };
    hm-interpreter = {
      title = "home-manager: an unknown interpreter fails with a readable message";
      value =
        (home [
          enabled
          { programs.nix-sandbox-mcp.environments.bad = custom // { interpreter = "ruby"; }; }
        ]).programs.mcp.servers.nix-sandbox.command;
      error = "programs.nix-sandbox-mcp.environments.bad.interpreter' is not of type `one of \"bash\", \"node\", \"program\", \"python\"'";
    };
    hm-none = {
      title = "home-manager: disabling every environment fails its assertion";
      value =
        (home [
          enabled
          {
            programs.nix-sandbox-mcp.environments = lib.genAttrs [ "python" "shell" "node" ] (_: {
              enable = false;
            });
          }
        ]).programs.mcp.servers.nix-sandbox.command;
      error = "programs.nix-sandbox-mcp: every environment is disabled";
    };
    nixos-userns = {
      title = "nixos: the assertion fires when user namespaces are off";
      value =
        (nixos [
          ./snippets/nixos.nix
          { security.allowUserNamespaces = false; }
        ]).systemd.services.nix-sandbox-mcp.serviceConfig.ExecStart;
      error = "services.nix-sandbox-mcp needs security.allowUserNamespaces = true: every sandbox is a bubblewrap jail";
    };
    nixos-no-token = {
      title = "nixos: the service without a token file fails its assertion";
      value =
        (nixos [
          enabled
          { services.nix-sandbox-mcp.enable = true; }
        ]).systemd.services.nix-sandbox-mcp.serviceConfig.ExecStart;
      error = "services.nix-sandbox-mcp.tokenFile must be set";
    };
    nixos-store-token = {
      title = "nixos: a token file in the Nix store fails its assertion";
      value =
        (nixos [
          ./snippets/nixos.nix
          { services.nix-sandbox-mcp.tokenFile = lib.mkForce "${pkgs.writeText "token" "secret"}"; }
        ]).systemd.services.nix-sandbox-mcp.serviceConfig.ExecStart;
      error = "services.nix-sandbox-mcp.tokenFile is in the Nix store";
    };
  };
}
