# The environment schema: a module whose options are lib.mkSandbox's
# arguments, one option each, with their types and defaults. mkSandbox
# checks its arguments against these options and evaluates them with
# lib.evalModules (evalEnvironment.nix); the NixOS and home-manager modules
# declare each of programs.nix-sandbox-mcp.environments with the same
# options (modules/environmentType.nix), so the two cannot drift apart.
{ lib, config, ... }:
let
  inherit (lib) mkOption types literalExpression;
  # What else an `env` value may be: it becomes a string, as in "${...}".
  stringLike = types.oneOf [
    types.int
    types.path
    types.package
  ];
  # A rule of a network policy: which requests the egress proxy lets out.
  networkRule = types.submodule {
    options = {
      host = mkOption {
        type = types.strMatching "([*][.])?[A-Za-z0-9_.:-]+";
        description = ''
          The host: a name (`pypi.org`), `*.suffix` for every name under
          the suffix (not the suffix itself), or an address literal (IPv6
          without brackets; the only way to reach a private, loopback,
          link-local or other special-purpose address).
        '';
        example = "*.pythonhosted.org";
      };
      port = mkOption {
        type = types.nullOr types.port;
        default = null;
        description = "The port; null allows 443 and 80.";
        example = 8443;
      };
      paths = mkOption {
        type = types.listOf (types.strMatching "/.*");
        default = [ ];
        description = ''
          Path prefixes allowed, in normal form (no dot segments, no
          escapes of unreserved characters); empty allows every path. A
          prefix ending in `/` holds the paths that start with it, another
          one itself and the paths under it. Requests are decided on their
          path's normal form, which is what is sent; ambiguous paths
          (`%2F`, `\`, `;`, ...) are refused. For HTTPS the proxy must see
          the requests, so it terminates the TLS to this host with the
          server's own CA, which only this environment's jails trust.
        '';
        example = [ "/simple/" ];
      };
      methods = mkOption {
        type = types.listOf (types.strMatching "[A-Z]+");
        default = [ ];
        description = "Methods allowed; empty allows every method (TLS is terminated as for {option}`paths`).";
        example = [ "GET" ];
      };
      credentials = mkOption {
        type = types.listOf types.str;
        default = [ ];
        description = ''
          Names of {option}`network.credentials` whose secrets the proxy
          puts into requests to this host (TLS is terminated as for
          {option}`paths`); plain HTTP to the host is then refused.
        '';
        example = [ "GITHUB_TOKEN" ];
      };
    };
  };
  # A secret of a network policy: the jail sees a placeholder only.
  networkCredential = types.submodule {
    options = {
      fromFile = mkOption {
        type = types.nullOr (types.strMatching "/.*");
        default = null;
        description = ''
          A file the server reads the secret from at start-up; a string,
          so that the secret is never copied into the Nix store.
        '';
        example = "/run/secrets/github-token";
      };
      fromEnv = mkOption {
        type = types.nullOr types.str;
        default = null;
        description = "A variable of the server's environment holding the secret (instead of {option}`fromFile`).";
        example = "GITHUB_TOKEN";
      };
      headers = mkOption {
        type = types.nonEmptyListOf (types.strMatching "[A-Za-z0-9-]+");
        default = [ "Authorization" ];
        description = "Request headers in which the proxy replaces the placeholder with the secret.";
        example = [ "X-Api-Key" ];
      };
    };
  };
  # The third form of `network`: an allowlist through the egress proxy.
  networkPolicy = types.submodule {
    options = {
      allow = mkOption {
        type = types.listOf networkRule;
        description = "The rules; a request no rule allows is refused.";
        example = [ { host = "pypi.org"; } ];
      };
      credentials = mkOption {
        type = types.attrsOf networkCredential;
        default = { };
        description = ''
          Secrets by the name of the jail's variable that holds a
          placeholder in their place (`nix-sandbox-placeholder-NAME`). The
          proxy puts the secret in place of the placeholder in requests
          to the hosts whose rules name it; the secret never enters the
          jail.
        '';
        example = {
          GITHUB_TOKEN.fromFile = "/run/secrets/github-token";
        };
      };
      caBundle = mkOption {
        type = types.nullOr (types.either types.path types.str);
        default = null;
        description = ''
          The CA bundle the jail's bundle starts with (then the proxy's
          CA when it terminates TLS); null uses the host's
          /etc/ssl/certs/ca-certificates.crt, as `network = true` shows.
        '';
        example = literalExpression ''"''${pkgs.cacert}/etc/ssl/certs/ca-bundle.crt"'';
      };
    };
  };
  # One option of `limits`: a positive integer with its default.
  limit =
    default: example: description:
    mkOption {
      type = types.ints.positive;
      inherit default example description;
    };
in
{
  options = {
    name = mkOption {
      type = types.strMatching "[A-Za-z0-9][A-Za-z0-9_.-]{0,63}";
      description = ''
        The environment's name, as the model passes it to `run` (`env`);
        the sandbox's programs are `sandbox-NAME` and `sandbox-NAME-session`.
      '';
      example = "data-science";
    };

    interpreter = mkOption {
      type = types.enum (builtins.attrNames (import ./interpreters.nix));
      description = ''
        What runs the code: `python` (python3), `bash` or `node`, found in
        `bin/` of one of {option}`packages`; or `program`: the code is one
        source file of a compiled language, built and run as
        {option}`program` says.
      '';
      example = "python";
    };

    program = mkOption {
      type = types.nullOr (
        types.submodule {
          options = {
            language = mkOption {
              type = types.str;
              description = "The language's name, as messages show it.";
              example = "Go";
            };
            file = mkOption {
              type = types.strMatching "[A-Za-z0-9_][A-Za-z0-9_.+-]*";
              description = "The name the source file is written under, in the directory the build runs in.";
              example = "main.go";
            };
            build = mkOption {
              type = types.lines;
              description = ''
                Bash run (with `set -e`) in the source's directory, with
                `$src` the source file's name, `$out` an empty directory for
                what it builds and `$cache` a directory for the language's
                own cache (the session's `/tmp/build-cache`); its messages
                and its exit status are the call's when it fails.
              '';
              example = ''GOCACHE="$cache/go" go build -o "$out/main" "$src"'';
            };
            run = mkOption {
              type = types.lines;
              description = ''
                Bash that runs what {option}`program.build` made in `$out`,
                in /workspace, usually with `exec`.
              '';
              example = ''exec "$out/main"'';
            };
          };
        }
      );
      default = null;
      description = ''
        For `interpreter = "program"`: how the one source file of the
        code is built and run (the languages shipped are
        `lib.languages.NAME`: go, rust, java, c, cpp). Built
        programs are kept by the source's hash for a session's life.
      '';
      example = literalExpression "nix-sandbox-mcp.lib.languages.go";
    };

    packages = mkOption {
      type = types.nonEmptyListOf types.package;
      description = ''
        The packages visible in the jail (their runtime closure, and their
        `bin/` on `PATH`); one of them provides the interpreter.
      '';
      example = literalExpression "[ (pkgs.python3.withPackages (ps: [ ps.numpy ps.pandas ])) ]";
    };

    description = mkOption {
      type = types.str;
      default = lib.concatMapStringsSep ", " (package: package.name) config.packages;
      defaultText = literalExpression ''lib.concatMapStringsSep ", " (package: package.name) packages'';
      description = "One line the model reads about this environment.";
      example = "Python with numpy and pandas";
    };

    limits = mkOption {
      type = types.submodule {
        options = {
          timeout_s = limit 30 120 ''
            Wall-clock seconds a run or a session call may take. Then a run's
            jail is killed; a session call is interrupted (state kept), and
            the session reset if the code does not stop.
          '';
          max_timeout_s = limit 600 3600 ''
            The longest wall-clock seconds a call may ask for with the `run`
            tool's `timeout_s` argument; a longer request is cut to it, and
            the result says so. Below `timeout_s` it counts as `timeout_s`
            (calls cannot ask for more). It does not lift `cpu_s`: a long
            build needs `cpu_s` raised too.
          '';
          memory_mb = limit 1024 4096 ''
            Memory in MiB: each process's private writable memory
            (`RLIMIT_DATA`, so that a runtime that allocates past it fails
            with its own out-of-memory error; JVM, Node.js and Go are told
            this limit), and the run's cgroup (`memory.max`, no swap) when
            the server has a cgroup to delegate. Without one, a run's
            processes together may use up to `pids` times this.
          '';
          pids = limit 32 64 ''
            Processes and threads at once: the run's cgroup (`pids.max`), else
            `RLIMIT_NPROC` inside the jail's user namespace. Low, so that
            without a cgroup `pids` times `memory_mb` stays a bound.
          '';
          cpu_s = limit 60 300 ''
            CPU seconds (`RLIMIT_CPU`, each process: `SIGXCPU`, then `SIGKILL`
            a second later); a session's processes together, across its
            calls, are held to it by the launcher (the session is reset).
          '';
          file_mb = limit 256 1024 "Largest file the code can write, in MiB (`RLIMIT_FSIZE`).";
          nofile = limit 1024 4096 "Files open at once (`RLIMIT_NOFILE`).";
          workspace_mb = limit 512 2048 "Size of `/workspace`, a tmpfs, in MiB.";
          tmp_mb = limit 256 1024 ''
            Size of `/tmp`, a tmpfs, in MiB; the home (`/home/sandbox`) and
            `/dev/shm` are tmpfs of the same size each.
          '';
          output_bytes = limit 65536 262144 ''
            Bytes of stdout, and as many of stderr, a result keeps; the middle
            of a longer output is dropped with a marker.
          '';
        };
      };
      default = { };
      description = ''
        Limits of one run or session; every limit is enforced (see
        docs/security.md). Those not set keep their defaults.
      '';
      example = {
        timeout_s = 120;
        memory_mb = 4096;
      };
    };

    network = mkOption {
      type = types.either types.bool networkPolicy // {
        description = "true, false or { allow = [ RULE ]; credentials = { ... }; }";
      };
      default = false;
      description = ''
        The jail's network. `false`: a network namespace of its own with
        only loopback. `true`: the host's network. `{ allow = [ RULE ];
        credentials = { ... }; }`: its own namespace with only loopback,
        and the server's egress proxy as the only way out, which lets
        through only what a rule allows (default deny), resolves names
        itself and refuses the host's own networks (private, loopback and
        link-local addresses) unless a rule names the address. The jail's
        `HTTP_PROXY`, `HTTPS_PROXY` and the like point at it; a refused
        request is a note in the run's result.
      '';
      example = literalExpression ''
        {
          allow = [
            { host = "pypi.org"; }
            { host = "files.pythonhosted.org"; }
            { host = "api.github.com"; methods = [ "GET" ]; credentials = [ "GITHUB_TOKEN" ]; }
          ];
          credentials.GITHUB_TOKEN.fromFile = "/run/secrets/github-token";
        }
      '';
    };

    publish = mkOption {
      type = types.listOf (types.ints.between 1 65535);
      default = [ ];
      description = ''
        Ports inside the jail that a session's `run` call may publish to
        the host (`publish = PORT`): the server listens on an ephemeral
        port of 127.0.0.1 and carries each connection to 127.0.0.1:PORT in
        the session's jail, until the session ends. Any user of the host
        can connect to a loopback port (docs/security.md). Not with
        `network = true`, whose ports are the host's already; not the
        egress proxy's port (3128) with a network policy.
      '';
      example = [
        8000
        8080
      ];
    };

    seccomp = mkOption {
      type =
        types.either types.bool (
          types.submodule {
            options.allow = mkOption {
              type = types.listOf types.str;
              default = [ ];
              description = ''
                System calls the filter denies that this environment may make,
                and socket families (`AF_VSOCK`) or protocols
                (`NETLINK_GENERIC`, `IPPROTO_SCTP`) it may open beyond Unix,
                IP and netlink routes (lib/seccompRules.nix names them all).
              '';
              example = [
                "ptrace"
                "AF_VSOCK"
              ];
            };
          }
        )
        // {
          description = "true, false or { allow = [ CALL ]; }";
        };
      default = true;
      description = ''
        The jail's seccomp filter, which denies the system calls a code
        runner never needs (new namespaces, mount, ptrace, keyctl, bpf,
        io_uring...) and socket families other than Unix, IPv4, IPv6 and
        netlink routes: `true`, `false` for none, or `{ allow = [ NAME ]; }`
        to let those calls, families or protocols through.
      '';
      example = {
        allow = [ "ptrace" ];
      };
    };

    env = mkOption {
      type = types.attrsOf (types.coercedTo stringLike toString types.str);
      default = { };
      description = ''
        Environment variables set in the jail; not `PATH`, which comes from
        {option}`packages`.
      '';
      example = {
        MPLBACKEND = "Agg";
      };
    };

    extraCombinators = mkOption {
      type = types.functionTo (types.listOf types.raw) // {
        description = "function from jail.nix's combinators to a list of permissions";
      };
      default = _: [ ];
      defaultText = literalExpression "c: [ ]";
      description = ''
        More jail.nix permissions, added after the sandbox's own and before
        the root is made read-only. A writable mount they add should have a
        size (bubblewrap's `--size` before `--tmpfs`): `--check` names one
        without.
      '';
      example = literalExpression ''c: [ (c.ro-bind "/etc/ssl" "/etc/ssl") ]'';
    };
  };
}
