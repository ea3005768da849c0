# Takes { environment, ... } and jail.nix's combinators; returns the
# permission that makes /workspace, an empty tmpfs of limits.workspace_mb,
# the working directory. It lives as long as the jail: one ephemeral run,
# or one session (docs/contracts.md, contract 3).
{ environment, ... }:
c:
c.compose [
  (c.unsafe-add-raw-args "--size ${toString (environment.limits.workspace_mb * 1024 * 1024)} --tmpfs /workspace")
  (c.unsafe-add-raw-args "--chdir /workspace")
]
