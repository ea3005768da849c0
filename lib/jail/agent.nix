# Takes { environment, ... } and jail.nix's combinators; returns the
# permission of a person's agent jail (mkAgentSandbox.nix, docs/agents.md),
# added after the jail's own policy. Its run-time code binds the agent's
# home kept per project ($NIX_SANDBOX_AGENT_HOME, a directory the launcher
# made, mode 0700) at /home/sandbox in place of the tmpfs, and, when
# PROJECT_DIR is set, has the agent start in the project ($PROJECT_MOUNT,
# default /project: NIX_SANDBOX_AGENT_CWD, which the entry of
# mkAgentSandbox.nix reads and unsets, since bubblewrap takes one --chdir,
# workspace.nix's); with NIX_SANDBOX_AGENT_PROJECT_RW=1 (the person's
# `--writable`) the project is bound read-write over the copy-on-write
# layer or read-only view projectMount.nix made (its read-only overlay,
# which would hide the host's tree, is then not mounted). Without
# NIX_SANDBOX_AGENT_HOME the wrapper stops with status 2: it runs through
# `nix-sandbox-mcp agent` only.
{ environment, ... }:
c:
c.add-runtime ''
  if [ -z "''${NIX_SANDBOX_AGENT_HOME:-}" ] || [ ! -d "$NIX_SANDBOX_AGENT_HOME" ]; then
    echo "${environment.name}: no agent home (NIX_SANDBOX_AGENT_HOME): start it with its agent-NAME command" >&2
    exit 2
  fi
  RUNTIME_ARGS+=(--bind "$NIX_SANDBOX_AGENT_HOME" /home/sandbox)
  if [ -n "''${PROJECT_DIR:-}" ]; then
    if [ "''${NIX_SANDBOX_AGENT_PROJECT_RW:-}" = 1 ]; then
      if [ "''${sandbox_project_layer[0]:-}" = --project-read-only ]; then
        sandbox_project_layer=()
      fi
      RUNTIME_ARGS+=(--bind "$PROJECT_DIR" "''${PROJECT_MOUNT:-/project}")
    fi
    RUNTIME_ARGS+=(--setenv NIX_SANDBOX_AGENT_CWD "''${PROJECT_MOUNT:-/project}")
  fi
''
