# Takes { ... } (nothing of it) and jail.nix's combinators; returns the
# permission that closes what the jail's /proc (jail.nix's --proc, a fresh
# procfs of the jail's pid namespace) leaves open. Bubblewrap makes
# /proc/sys, /proc/sysrq-trigger, /proc/irq and /proc/bus read-only only
# when its caller can write them (as host root, not as a user), and procfs
# lets a uid write a global sysctl whatever its capabilities: here they are
# read-only whoever starts the jail. /proc/sys is bound from the caller's
# /proc; its sysctls still read as the jail's own namespaces (hostname,
# network). The caller's key descriptions are hidden (keyctl itself is
# denied by seccomp).
{ ... }:
c:
c.unsafe-add-raw-args (
  "--ro-bind /proc/sys /proc/sys"
  + " --ro-bind-try /proc/sysrq-trigger /proc/sysrq-trigger"
  + " --ro-bind-try /proc/irq /proc/irq"
  + " --ro-bind-try /proc/bus /proc/bus"
  + " --ro-bind /dev/null /proc/keys --ro-bind /dev/null /proc/key-users"
)
