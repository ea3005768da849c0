# Takes { pkgs, environment, ... } and jail.nix's combinators; returns the
# permission that starts bubblewrap through the agent package's
# jail-budget: a user namespace of the jail's own, mapping the caller's uid
# and gid to themselves, whose per-user kernel limits and rlimits are
# ../kernelBudgets.nix, and an IPC namespace of the jail's own with its
# System V limits (bubblewrap shares it instead of making one with the
# kernel's defaults). The jail, nested below it, holds no capability
# there: it cannot raise them, and its use is charged to this namespace's
# count, so the host user keeps the rest. A budget that cannot be set stops
# the wrapper with status 2 and one line on stderr, except the System V
# limits where the kernel refuses them to every user namespace (before
# Linux 6.1): there jail-budget loads the filter of ipcRefused instead
# (--ipc-refused-filter), written at build time by nix-sandbox-seccomp.
#
# jail-budget also starts bubblewrap with an empty environment
# (--clear-env): in a run's jail bwrap stays as its pid 1 (a session's
# jail has the agent there), and a process there can read pid 1's
# environment (/proc/1/environ), so no variable of the wrapper's (HOME,
# PROJECT_DIR, the cgroup path) is seen. It is done in the program already
# there, so no process of its own (env -i) starts each time.
# RLIMIT_NPROC is set there too (`--rlimit nproc`): in that namespace the
# kernel counts the jail's processes and threads alone (per user namespace
# and uid), where set before it would count every process of the
# caller's uid on the host. That count includes bubblewrap's own process
# outside the jail's pid namespace, so the limit is limits.pids + 1: the
# jail's processes are at most limits.pids. A run's cgroup (pids.max =
# limits.pids, which counts that process too) is then reached first, and
# the launcher can say for certain that the process limit stopped a run.
# Bubblewrap's namespace below takes the limit as its ceiling, and the
# jail inherits it and cannot raise it. Before Linux 5.14, which counts it
# per uid on the whole host, jail-budget leaves it as it is: the run's
# cgroup bounds the processes, or the launcher's --check says nothing
# does.
#
# It also mounts the jail's view of the store (storeView.nix's run-time
# array sandbox_store_view, always set), and the session's layer when
# workspace.nix asks for one (the
# run-time array sandbox_layer) and its project overlay when
# projectMount.nix does (sandbox_project_layer); those files always set
# them.
#
# An environment that publishes ports (`publish`, never with
# `network = true`) gets its network namespace from jail-budget too
# (`--net`: loopback up, bubblewrap shares it), and, when the launcher
# hands a session wrapper the forwarder's socket
# ($NIX_SANDBOX_PUBLISH_FD, an inherited descriptor), `--publish-fd`:
# jail-budget keeps a forwarder in that namespace, outside the jail's
# view, through which the launcher connects to the jail's ports.
#
# A `network = true` jail started with NIX_SANDBOX_NETWORK_OFF=1 (the
# launcher's, for a session whose profile takes the network away) gets
# `--net` as well, from the run-time array sandbox_net (always set, empty
# otherwise): a network namespace of its own with only loopback, which
# bubblewrap, told to share the host's (hostNetwork.nix), shares instead.
{ pkgs, environment, ... }:
c:
let
  inherit (pkgs) lib;
  budgets = import ../kernelBudgets.nix;
  package = pkgs.callPackage ../../package.nix { };
  jailBudget = "${package}/bin/jail-budget";
  ipcRefusedFilter = pkgs.runCommand "nix-sandbox-ipc-refused.bpf" { } ''
    ${package}/bin/nix-sandbox-seccomp ${
      lib.escapeShellArgs (lib.mapAttrsToList (name: errno: "--deny=${name}=${errno}") budgets.ipcRefused)
    } --output "$out"
  '';
  publishes = environment.publish != [ ];
  hostNetwork = environment.network == true;
  flags =
    lib.mapAttrsToList (name: value: "--sysctl ${name}=${toString value}") budgets.sysctls
    ++ lib.mapAttrsToList (name: value: "--rlimit ${name}=${toString value}") budgets.rlimits
    ++ [ "--rlimit nproc=${toString (environment.limits.pids + 1)}" ]
    ++ [ "--clear-env" ]
    ++ lib.mapAttrsToList (name: value: "--ipc ${name}=${toString value}") budgets.ipc
    ++ [ "--ipc-refused-filter ${ipcRefusedFilter}" ]
    ++ lib.optionals publishes [
      "--net"
      "\"\${sandbox_publish[@]}\""
    ]
    ++ [ "\"\${sandbox_net[@]}\"" ];
in
c.compose (
  [
    (c.share-ns "ipc")
    (c.add-runtime (
      if hostNetwork then
        ''
          sandbox_net=()
          if [ "''${NIX_SANDBOX_NETWORK_OFF:-}" = 1 ]; then
            sandbox_net=(--net)
          fi
        ''
      else
        "sandbox_net=()"
    ))
  ]
  ++ lib.optionals publishes [
    (c.share-ns "net")
    (c.add-runtime ''
      sandbox_publish=()
      if [ -n "''${NIX_SANDBOX_PUBLISH_FD:-}" ]; then
        sandbox_publish=(--publish-fd "$NIX_SANDBOX_PUBLISH_FD")
      fi
    '')
  ]
  ++ [
    (
      s:
      s
      // {
        cmd = "${jailBudget} ${lib.concatStringsSep " " flags} \"\${sandbox_layer[@]}\" \"\${sandbox_project_layer[@]}\" \"\${sandbox_store_view[@]}\" -- ${s.cmd}";
      }
    )
  ]
)
