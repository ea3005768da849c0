# Takes the environment's limits; returns the workspace permission of its
# jails (a function of jail.nix's combinators): /workspace, an empty tmpfs
# of limits.workspace_mb, as the working directory. It lives as long as the
# jail: one ephemeral run, or one session (CONTRIBUTING.md, contract 3).
limits: c:
c.compose [
  (c.unsafe-add-raw-args "--size ${toString (limits.workspace_mb * 1024 * 1024)} --tmpfs /workspace")
  (c.unsafe-add-raw-args "--chdir /workspace")
]
