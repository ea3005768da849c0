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
        `bin/` of one of {option}`packages`.
      '';
      example = "python";
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
          memory_mb = limit 1024 4096 ''
            Memory in MiB: the run's cgroup (`memory.max`, no swap) when the
            server has a cgroup to delegate, else `RLIMIT_AS`, which counts
            address space.
          '';
          pids = limit 256 64 ''
            Processes and threads at once: the run's cgroup (`pids.max`), else
            `RLIMIT_NPROC` inside the jail's user namespace.
          '';
          cpu_s = limit 60 300 ''
            CPU seconds (`RLIMIT_CPU`): `SIGXCPU`, then `SIGKILL` a second
            later.
          '';
          file_mb = limit 256 1024 "Largest file the code can write, in MiB (`RLIMIT_FSIZE`).";
          nofile = limit 1024 4096 "Files open at once (`RLIMIT_NOFILE`).";
          workspace_mb = limit 512 2048 "Size of `/workspace`, a tmpfs, in MiB.";
          tmp_mb = limit 256 1024 "Size of `/tmp`, a tmpfs, in MiB.";
          output_bytes = limit 65536 262144 ''
            Bytes of stdout, and as many of stderr, a result keeps; the middle
            of a longer output is dropped with a marker.
          '';
        };
      };
      default = { };
      description = ''
        Limits of one run or session; every limit is enforced (see the
        README's security model). Those not set keep their defaults.
      '';
      example = {
        timeout_s = 120;
        memory_mb = 4096;
      };
    };

    network = mkOption {
      type = types.bool;
      default = false;
      description = "Whether code in this environment shares the host's network.";
      example = true;
    };

    seccomp = mkOption {
      type =
        types.either types.bool (
          types.submodule {
            options.allow = mkOption {
              type = types.listOf types.str;
              default = [ ];
              description = ''
                System calls the filter denies that this environment may make
                (lib/seccompRules.nix names them).
              '';
              example = [ "ptrace" ];
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
        io_uring...): `true`, `false` for none, or `{ allow = [ CALL ]; }`
        to let those calls through.
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
      description = "More jail.nix permissions, added after the sandbox's own.";
      example = literalExpression ''c: [ (c.ro-bind "/etc/ssl" "/etc/ssl") ]'';
    };
  };
}
