# Takes { pkgs, environment, profile, ... } and jail.nix's combinators;
# returns the permission that lays out what the code finds: an empty home,
# /tmp as a tmpfs of limits.tmp_mb, /usr/bin/env, and the environment's
# packages (the profile) on PATH, their runtime closure mounted.
{
  pkgs,
  environment,
  profile,
  ...
}:
c:
c.compose [
  (c.tmpfs "/home/sandbox")
  (c.set-env "HOME" "/home/sandbox")
  # Mounted over the base's unlimited /tmp.
  (c.unsafe-add-raw-args "--size ${toString (environment.limits.tmp_mb * 1024 * 1024)} --tmpfs /tmp")
  (c.set-env "TMPDIR" "/tmp")
  (c.ro-bind "${pkgs.coreutils}/bin/env" "/usr/bin/env")
  (c.add-pkg-deps [ profile ])
]
