# Takes { pkgs, environment, ... } and jail.nix's combinators; returns the
# permission that starts the jail's entry through the package's
# jail-entry, which sets RLIMIT_NPROC to limits.pids inside the jail and
# execs the entry in its place. There, after bubblewrap made the user
# namespace, the kernel counts only the jail's own processes and threads
# (per user namespace and uid); set before bubblewrap it would count every
# process of the caller on the host. It binds because the jail's uid is
# never host root (a root launcher starts its wrappers as another user).
# A lower hard limit stays, and the soft limit is set to it. jail-entry is
# a program, not a shell: no shell starts in the jail on each run, and the
# package joins the jail's runtime closure (the entry is part of it).
{ pkgs, environment, ... }:
_c:
let
  jailEntry = "${pkgs.callPackage ../../package.nix { }}/bin/jail-entry";
in
s: s // { entry = "${jailEntry} --nproc ${toString environment.limits.pids} -- ${s.entry}"; }
