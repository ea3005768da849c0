# Takes { pkgs, environment, ... } and jail.nix's combinators; returns the
# permission that gives the jail an identity of its own, nothing of the
# host's: the hostname `sandbox` (bubblewrap's --hostname in the jail's
# UTS namespace; with `network = true`, hostNetwork.nix sets
# the same and writes /etc/hostname), the code running as uid and gid 1000
# inside (bubblewrap maps them to the caller's), and /etc/passwd and
# /etc/group of its own, store files naming root, sandbox (1000, home
# /home/sandbox) and nobody: not the login or home of whoever runs the
# wrapper, which jail.nix's passwd copies. Each is a symlink on the jail's
# read-only root to its store file, which joins the jail's closure: a
# bind would cost bubblewrap a reading of its whole mount table.
{ pkgs, environment, ... }:
c:
let
  passwd = pkgs.writeText "jail-etc-passwd" ''
    root:x:0:0:root:/root:/bin/sh
    sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh
    nobody:x:65534:65534:nobody:/nonexistent:/bin/sh
  '';
  group = pkgs.writeText "jail-etc-group" ''
    root:x:0:
    sandbox:x:1000:
    nogroup:x:65534:
  '';
in
c.compose (
  [
    (c.set-hostname "sandbox")
    (c.unsafe-add-raw-args "--uid 1000 --gid 1000")
    (c.unsafe-add-raw-args "--symlink ${passwd} /etc/passwd --symlink ${group} /etc/group")
    (s: s // { additionalRuntimeClosures = s.additionalRuntimeClosures ++ [ passwd group ]; })
  ]
  # hostNetwork.nix passes --hostname itself.
  ++ (if environment.network == true then [ ] else [ (c.unsafe-add-raw-args "--hostname sandbox") ])
)
