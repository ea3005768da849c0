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
  hard=$(ulimit -H -u)
  if [ "$hard" = unlimited ] || [ "$hard" -gt ${toString limits.pids} ]; then
    ulimit -H -S -u ${toString limits.pids}
  else
    ulimit -S -u "$hard"
  fi
  exec ${entry}
'')
