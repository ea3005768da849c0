# Takes { environment, ... } and jail.nix's combinators; returns the
# permission that makes /workspace, an empty tmpfs of limits.workspace_mb,
# the working directory. It lives as long as the jail: one ephemeral run,
# or one session (docs/contracts.md, contract 3).
#
# With NIX_SANDBOX_LAYER set (by the server, for a session jail: the
# session's layer directory, made outside the jail's view), /workspace is
# that layer's `ws` instead, on the tmpfs of limits.workspace_mb that
# kernelBudgets.nix's jail-budget mounts in the jail's own mount namespace
# (the run-time array sandbox_layer, which this file always sets), where
# the server keeps the session's checkpoints too, out of the jail's sight.
# NIX_SANDBOX_RESTORE=1: the server fills the layer from a checkpoint
# before the jail starts (jail-budget's --restore).
# NIX_SANDBOX_LAYER_ON_DISK=1 (a person's agent jail, docs/agents.md): the
# layer directory is kept on disk as it is, no tmpfs over it
# (jail-budget's --layer-on-disk), so its changes outlive the jail.
{ environment, ... }:
c:
let
  bytes = toString (environment.limits.workspace_mb * 1024 * 1024);
in
c.compose [
  (c.unsafe-add-raw-args "--size ${bytes} --tmpfs /workspace")
  (c.add-runtime ''
    sandbox_layer=()
    if [ -n "''${NIX_SANDBOX_LAYER:-}" ]; then
      if [ "''${NIX_SANDBOX_LAYER_ON_DISK:-}" = 1 ]; then
        sandbox_layer=(--layer "$NIX_SANDBOX_LAYER" --layer-on-disk)
      else
        sandbox_layer=(--layer "$NIX_SANDBOX_LAYER" --layer-size ${bytes})
      fi
      if [ "''${NIX_SANDBOX_RESTORE:-}" = 1 ]; then
        sandbox_layer+=(--restore)
      fi
      RUNTIME_ARGS+=(--bind "$NIX_SANDBOX_LAYER/ws" /workspace)
    fi
  '')
  (c.unsafe-add-raw-args "--chdir /workspace")
]
