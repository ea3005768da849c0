# Takes { ... } (nothing of it) and jail.nix's combinators; returns the
# permission that makes the jail's root, bubblewrap's own tmpfs with no
# size, read-only once every mount point is made in it: the last argument
# of the wrapper, after the run-time mounts (the project, the egress
# socket). The mounts on it keep their own flags: /tmp, /workspace, the
# home and /dev/shm stay writable, each of a bounded size. An environment's
# own combinators mount before it; one deferred past it fails to start
# (bubblewrap cannot make its mount point), never runs unbounded.
{ ... }:
c: c.defer (c.add-runtime "RUNTIME_ARGS+=(--remount-ro /)")
