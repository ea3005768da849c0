# Takes { pkgs, ... } and jail.nix's combinators; returns the permission
# that stands for jail.nix's base permissions, which it first drops
# (`reset`): a fresh /proc and /dev, /bin/sh (a symlink into the store, on
# the jail's read-only root: bubblewrap reads its whole mount table after
# each bind, never after a symlink), coreutils on PATH, an empty
# environment (--clearenv); the store's runtime closure only is
# storeView.nix's, through jail-budget. Its /tmp,
# an unbounded tmpfs, is left out too: filesystem.nix mounts a bounded one.
# What jail.nix's own base adds besides is left out: a tmpfs at the
# caller's HOME (its path, /home/LOGIN, would name the host's user in the
# jail), the caller's HOME and LANG, and its passwd, made from the caller's
# login and home and kept under HOME (identity.nix makes the jail's own).
# So the wrapper needs no HOME.
{ pkgs, ... }:
c:
c.compose [
  c.reset
  (c.unsafe-add-raw-args "--proc /proc --dev /dev")
  (c.unsafe-add-raw-args "--symlink ${pkgs.bash}/bin/sh /bin/sh")
  (c.add-path "/bin")
  (s: s // { additionalRuntimeClosures = s.additionalRuntimeClosures ++ [ pkgs.bash ]; })
  (c.add-pkg-deps [ pkgs.coreutils ])
  (c.unsafe-add-raw-args "--clearenv")
]
