# Takes the jail's arguments (unused) and jail.nix's combinators; returns the
# permission whose run-time code (add-runtime, after cgroupLimits.nix's)
# lowers the jail's resource limits before bubblewrap starts: CPU time
# (cpu_s: SIGXCPU then, a second later, SIGKILL), file size (file_mb:
# SIGXFSZ or EFBIG), open files (nofile), no core dumps, each process's
# data (memory_mb: RLIMIT_DATA, its private writable memory; with a cgroup
# too, so that a process that alone allocates past the limit gets ENOMEM,
# which runtimes report as their own out-of-memory error, before the cgroup
# kills it), and the main thread's stack (8 MiB, soft and hard: RLIMIT_DATA
# does not count it). Not RLIMIT_AS: it counts the address space a JIT or
# allocator only reserves (the JVM's, Node's, Go's), which is not memory
# used. A hard limit that is already lower stays. The values are
# sessionLimits.nix's: the environment's, or lower for a profiled session.
# RLIMIT_NPROC is set in the jail's budget namespace instead
# (kernelBudgets.nix), where the kernel counts the jail's processes only.
_: c:
c.add-runtime ''
  # sandbox_rlimit FLAG SOFT [HARD]: sets one limit; a lower hard limit stays.
  sandbox_rlimit() {
    local hard soft=$2 want_hard=''${3:-$2}
    if [ "$EUID" -ne 0 ]; then
      # No subshell to read the hard limit (a fork each, on every start):
      # a soft limit above the hard one is refused, and so is raising the
      # hard limit without root, so a lower hard limit stays.
      ulimit -S "$1" "$soft" 2>/dev/null || ulimit -S "$1" hard
      ulimit -H "$1" "$want_hard" 2>/dev/null || :
      return
    fi
    hard=$(ulimit -H "$1")
    if [ "$hard" != unlimited ] && [ "$hard" -lt "$soft" ]; then
      soft=$hard
    fi
    ulimit -S "$1" "$soft"
    if [ "$hard" = unlimited ] || [ "$hard" -gt "$want_hard" ]; then
      ulimit -H "$1" "$want_hard"
    fi
  }
  sandbox_rlimit -t "$sandbox_limit_cpu_s" "$((sandbox_limit_cpu_s + 1))"
  sandbox_rlimit -f "$((sandbox_limit_file_mb * 1024))"
  sandbox_rlimit -n "$sandbox_limit_nofile"
  sandbox_rlimit -c 0
  sandbox_rlimit -d "$((sandbox_limit_memory_mb * 1024))"
  sandbox_rlimit -s 8192
''
