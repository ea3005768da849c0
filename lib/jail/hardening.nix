# Takes jail.nix's combinators; returns the permission that closes what
# jail.nix's base leaves open: no nested user namespaces, no capabilities
# (procfs.nix closes /proc; kernelBudgets.nix starts bubblewrap with an
# empty environment).
_: c:
c.compose [
  # jail.nix always passes --unshare-user, which --disable-userns needs.
  (c.unsafe-add-raw-args "--disable-userns")
  # bwrap keeps every capability (inside the jail's user namespace) when its
  # caller is root; code must hold none whoever starts it: a capability like
  # CAP_SYS_PTRACE there would open the session agent's fds through /proc.
  (c.unsafe-add-raw-args "--cap-drop ALL")
]
