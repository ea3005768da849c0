# Takes { environment, ... } and jail.nix's combinators; returns the
# permission whose run-time code (add-runtime, before rlimits.nix's) applies
# the memory and process limits through the cgroups the launcher made for
# this run: NIX_SANDBOX_CGROUP, a colon-separated list of cgroup
# directories (one of cgroup v2, or one per cgroup v1 hierarchy, pids and
# memory), each empty and writable by the caller. In each it writes pids.max, memory.max (v2,
# with memory.swap.max 0) or memory.limit_in_bytes (v1, with the
# memory+swap limit when the kernel accounts swap), then moves the wrapper,
# and so the whole jail, into it. It sets sandbox_memory_cgroup=1 when a
# cgroup holds the memory limit (rlimits.nix then skips RLIMIT_AS). A
# directory it cannot use stops the wrapper with status 2 and a message.
# Unset: nothing happens (rlimits.nix and processLimit.nix apply).
{ environment, ... }:
c:
let
  inherit (environment) name limits;
  bytes = toString (limits.memory_mb * 1024 * 1024);
in
c.add-runtime ''
  sandbox_memory_cgroup=
  sandbox_cgroup_write() {
    if ! { printf '%s\n' "$2" >"$1"; } 2>/dev/null; then
      echo "sandbox-${name}: NIX_SANDBOX_CGROUP: cannot write $2 to $1" >&2
      exit 2
    fi
  }
  if [ -n "''${NIX_SANDBOX_CGROUP:-}" ]; then
    IFS=: read -r -a sandbox_cgroups <<<"$NIX_SANDBOX_CGROUP"
    for sandbox_cgroup in "''${sandbox_cgroups[@]}"; do
      if [[ $sandbox_cgroup != /* ]] || [ ! -f "$sandbox_cgroup/cgroup.procs" ]; then
        echo "sandbox-${name}: NIX_SANDBOX_CGROUP: $sandbox_cgroup is not a cgroup directory" >&2
        exit 2
      fi
      if [ -f "$sandbox_cgroup/pids.max" ]; then
        sandbox_cgroup_write "$sandbox_cgroup/pids.max" ${toString limits.pids}
      fi
      if [ -f "$sandbox_cgroup/memory.max" ]; then
        sandbox_cgroup_write "$sandbox_cgroup/memory.max" ${bytes}
        if [ -f "$sandbox_cgroup/memory.swap.max" ]; then
          sandbox_cgroup_write "$sandbox_cgroup/memory.swap.max" 0
        fi
        sandbox_memory_cgroup=1
      elif [ -f "$sandbox_cgroup/memory.limit_in_bytes" ]; then
        sandbox_cgroup_write "$sandbox_cgroup/memory.limit_in_bytes" ${bytes}
        if [ -f "$sandbox_cgroup/memory.memsw.limit_in_bytes" ]; then
          sandbox_cgroup_write "$sandbox_cgroup/memory.memsw.limit_in_bytes" ${bytes}
        fi
        sandbox_memory_cgroup=1
      fi
      sandbox_cgroup_write "$sandbox_cgroup/cgroup.procs" $$
    done
  fi
''
