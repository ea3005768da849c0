# Takes { environment, ... } and jail.nix's combinators; returns the
# permission whose run-time code (add-runtime, before rlimits.nix's) checks
# the cgroups the launcher gave this run: NIX_SANDBOX_CGROUP, a
# colon-separated list of cgroup directories (one of cgroup v2, or one per
# cgroup v1 hierarchy) that the launcher made, wrote the environment's
# limits into and moved the wrapper into before it started (they stay the
# launcher's: the jail's uid cannot write them). The wrapper must be in
# each, and each limit there at most the environment's own: pids.max,
# memory.max (v2, with memory.swap.max 0) or memory.limit_in_bytes (v1,
# with the memory+swap limit when the kernel accounts swap). Anything else
# stops the wrapper with status 2 and a message: it never runs under weaker
# limits than the environment states. Unset: nothing happens (rlimits.nix
# and kernelBudgets.nix's process limit apply). The memory limit is
# sessionLimits.nix's: the environment's, or lower for a profiled session,
# whose launcher wrote that lower limit.
{ environment, ... }:
c:
let
  inherit (environment) name limits;
  bytes = ''"$((sandbox_limit_memory_mb * 1048576))"'';
in
c.add-runtime ''
  sandbox_cgroup_fail() {
    echo "sandbox-${name}: NIX_SANDBOX_CGROUP: $1" >&2
    exit 2
  }
  # sandbox_cgroup_limit FILE MOST: FILE holds a number of at most MOST.
  sandbox_cgroup_limit() {
    local value=
    { read -r value <"$1"; } 2>/dev/null || true
    if [[ ! $value =~ ^[0-9]+$ ]] || [ "$value" -gt "$2" ]; then
      sandbox_cgroup_fail "$1 is '$value', not at most $2"
    fi
  }
  if [ -n "''${NIX_SANDBOX_CGROUP:-}" ]; then
    IFS=: read -r -a sandbox_cgroups <<<"$NIX_SANDBOX_CGROUP"
    for sandbox_cgroup in "''${sandbox_cgroups[@]}"; do
      if [[ $sandbox_cgroup != /* ]] || [ ! -f "$sandbox_cgroup/cgroup.procs" ]; then
        sandbox_cgroup_fail "$sandbox_cgroup is not a cgroup directory"
      fi
      sandbox_cgroup_in=
      while read -r sandbox_pid; do
        if [ "$sandbox_pid" = $$ ]; then
          sandbox_cgroup_in=1
        fi
      done <"$sandbox_cgroup/cgroup.procs"
      if [ -z "$sandbox_cgroup_in" ]; then
        sandbox_cgroup_fail "the wrapper is not in $sandbox_cgroup"
      fi
      if [ -f "$sandbox_cgroup/pids.max" ]; then
        sandbox_cgroup_limit "$sandbox_cgroup/pids.max" ${toString limits.pids}
      fi
      if [ -f "$sandbox_cgroup/memory.max" ]; then
        sandbox_cgroup_limit "$sandbox_cgroup/memory.max" ${bytes}
        if [ -f "$sandbox_cgroup/memory.swap.max" ]; then
          sandbox_cgroup_limit "$sandbox_cgroup/memory.swap.max" 0
        fi
      elif [ -f "$sandbox_cgroup/memory.limit_in_bytes" ]; then
        sandbox_cgroup_limit "$sandbox_cgroup/memory.limit_in_bytes" ${bytes}
        if [ -f "$sandbox_cgroup/memory.memsw.limit_in_bytes" ]; then
          sandbox_cgroup_limit "$sandbox_cgroup/memory.memsw.limit_in_bytes" ${bytes}
        fi
      fi
    done
  fi
''
