# Takes { pkgs, ... } and jail.nix's combinators; returns the permission
# that closes what jail.nix's base leaves open: bubblewrap started with an
# empty environment, no nested user namespaces, no capabilities (procfs.nix
# closes /proc).
{ pkgs, ... }:
c:
c.compose [
  # In a run's jail bwrap stays as its pid 1 (a session's jail has the
  # agent there), and a process there can read pid 1's environment
  # (/proc/1/environ): start bwrap with an empty one, so no variable of the
  # wrapper's (HOME, PROJECT_DIR, the cgroup path) is seen.
  (s: s // { cmd = "${pkgs.coreutils}/bin/env -i ${s.cmd}"; })
  # jail.nix always passes --unshare-user, which --disable-userns needs.
  (c.unsafe-add-raw-args "--disable-userns")
  # bwrap keeps every capability (inside the jail's user namespace) when its
  # caller is root; code must hold none whoever starts it: a capability like
  # CAP_SYS_PTRACE there would open the session agent's fds through /proc.
  (c.unsafe-add-raw-args "--cap-drop ALL")
]
