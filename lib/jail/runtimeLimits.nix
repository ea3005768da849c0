# Takes the jail's arguments (unused) and jail.nix's combinators; returns the
# permission that tells the runtimes that size their heap from the host's
# memory the jail's memory limit instead, so that a program allocating past
# it fails with the runtime's own out-of-memory error (which the launcher's
# note names) rather than at RLIMIT_DATA inside the runtime or, with a
# cgroup, by the kernel's SIGKILL (the jail sees neither its cgroup nor its
# rlimits the way a container runtime shows them):
# - the JVM (every JVM the jail starts, through JAVA_TOOL_OPTIONS): its
#   memory is `memory_mb` (-XX:MaxRAM), the heap three quarters of it; the
#   serial collector and two JIT compiler threads, so that the threads it
#   starts do not grow with the host's CPUs past the `pids` limit;
# - Node.js: the old space, three quarters of `memory_mb` (NODE_OPTIONS);
# - Go: the soft limit its collector works to (GOMEMLIMIT), the same.
# The environment's own `env` (variables.nix, after this) replaces them.
# `memory_mb` is sessionLimits.nix's: the environment's, or lower for a
# profiled session.
_: c:
let
  # Expanded by the wrapper as bubblewrap starts (shell arithmetic, no process).
  mb = "\${sandbox_limit_memory_mb}";
  heap = "$((sandbox_limit_memory_mb * 3 / 4))";
in
c.compose [
  (c.set-env "JAVA_TOOL_OPTIONS" (
    c.noescape ''"-XX:MaxRAM=${mb}m -XX:MaxRAMPercentage=75 -XX:+UseSerialGC -XX:CICompilerCount=2"''
  ))
  (c.set-env "NODE_OPTIONS" (c.noescape ''"--max-old-space-size=${heap}"''))
  (c.set-env "GOMEMLIMIT" (c.noescape ''"${heap}MiB"''))
]
