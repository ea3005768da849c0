# Takes { environment, ... } and jail.nix's combinators; returns the
# permission that makes the jail's entry set RLIMIT_NPROC to limits.pids
# inside the jail. There, after bubblewrap made the user namespace, the
# kernel counts only the jail's own processes and threads (per user
# namespace and uid); set before bubblewrap it would count every process of
# the caller on the host. It binds because the jail's uid is never host
# root (a root launcher starts its wrappers as another user).
{ environment, ... }:
c:
let
  inherit (environment) limits;
in
c.wrap-entry (entry: ''
  # Raising the hard limit is refused (the jail has no capability): a
  # lower one stays, and the soft limit is set to it. No subshell to read it.
  ulimit -H -S -u ${toString limits.pids} 2>/dev/null || ulimit -S -u hard
  exec ${entry}
'')
