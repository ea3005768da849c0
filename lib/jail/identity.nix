# Takes { environment, ... } and jail.nix's combinators; returns the
# permission that gives the jail an identity of its own, nothing of the
# host's: the hostname `sandbox` (bubblewrap's --hostname in the jail's
# UTS namespace; with `network = true`, hostNetwork.nix sets
# the same and writes /etc/hostname), the code running as uid and gid 1000
# inside (bubblewrap maps them to the caller's), and /etc/passwd and
# /etc/group of its own, store files naming root, sandbox (1000, home
# /home/sandbox) and nobody: not the login or home of whoever runs the
# wrapper, which jail.nix's passwd copies.
{ environment, ... }:
c:
c.compose (
  [
    (c.set-hostname "sandbox")
    (c.unsafe-add-raw-args "--uid 1000 --gid 1000")
    (c.write-text "/etc/passwd" ''
      root:x:0:0:root:/root:/bin/sh
      sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh
      nobody:x:65534:65534:nobody:/nonexistent:/bin/sh
    '')
    (c.write-text "/etc/group" ''
      root:x:0:
      sandbox:x:1000:
      nogroup:x:65534:
    '')
  ]
  # hostNetwork.nix passes --hostname itself.
  ++ (if environment.network == true then [ ] else [ (c.unsafe-add-raw-args "--hostname sandbox") ])
)
