# Takes { pkgs, environment, ... } and jail.nix's combinators; returns the
# permission that sets the jail's environment variables besides HOME,
# TMPDIR and PATH: a UTF-8 locale, the caller's TERM (dumb when unset), and
# the environment's own `env`, which may replace them.
{ pkgs, environment, ... }:
c:
c.compose (
  [
    (c.set-env "LANG" "C.UTF-8")
    (c.set-env "LC_ALL" "C.UTF-8")
    (c.set-env "TERM" (c.noescape "\"\${TERM:-dumb}\""))
  ]
  ++ pkgs.lib.mapAttrsToList c.set-env environment.env
)
