# Takes the environment's limits; returns the workspace permission of an
# ephemeral run (a function of jail.nix's combinators): /workspace, an empty
# tmpfs of limits.workspace_mb, as the working directory. A session's
# workspace (a host directory given at run time) takes its place there.
limits: c:
c.compose [
  (c.unsafe-add-raw-args "--size ${toString (limits.workspace_mb * 1024 * 1024)} --tmpfs /workspace")
  (c.unsafe-add-raw-args "--chdir /workspace")
]
