# Takes { pkgs, environment, profile, ... } and jail.nix's combinators;
# returns the permission that lays out what the code finds: /tmp, the home
# (/home/sandbox) and /dev/shm, each a tmpfs of limits.tmp_mb, the rest of
# /dev read-only, /usr/bin/env (a symlink into the store, as base.nix's
# /bin/sh), and the environment's packages (the
# profile) on PATH, their runtime closure mounted. A tmpfs is memory that no
# rlimit counts, so every writable mount of the jail has a size
# (readOnlyRoot.nix makes the root read-only; docs/limits.md sums them).
{
  pkgs,
  environment,
  profile,
  ...
}:
c:
let
  sized = path: "--size ${toString (environment.limits.tmp_mb * 1024 * 1024)} --tmpfs ${path}";
in
c.compose [
  (c.unsafe-add-raw-args (sized "/home/sandbox"))
  (c.set-env "HOME" "/home/sandbox")
  (c.unsafe-add-raw-args (sized "/tmp"))
  (c.set-env "TMPDIR" "/tmp")
  # POSIX shared memory and semaphores (shm_open, sem_open) live in
  # /dev/shm; the rest of bubblewrap's /dev (its own tmpfs) is device
  # nodes, which a read-only mount still lets the code read and write.
  (c.unsafe-add-raw-args "${sized "/dev/shm"} --remount-ro /dev")
  (c.unsafe-add-raw-args "--symlink ${pkgs.coreutils}/bin/env /usr/bin/env")
  (c.add-pkg-deps [ profile ])
]
