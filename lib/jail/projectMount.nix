# Takes { environment, ... } and jail.nix's combinators; returns the
# permission whose run-time code (add-runtime, before bubblewrap starts)
# shows $PROJECT_DIR read-only at $PROJECT_MOUNT (default /project) when
# PROJECT_DIR is set and not empty: kernelBudgets.nix's jail-budget mounts
# a read-only overlay of it over $PROJECT_DIR in the jail's mount namespace
# (--project-read-only, in sandbox_project_layer), which the wrapper binds,
# so a host program's Unix socket or fifo in the project is the overlay's
# inode there, and a connect or an open for writing reaches no one. A PROJECT_DIR that is not an existing
# directory the wrapper's user may enter (a root server's jails run as uids
# of their own), or a PROJECT_MOUNT that is not an absolute path, stops the
# wrapper with status 2 and says why on stderr.
#
# With NIX_SANDBOX_PROJECT_LAYER=1 (set by a server whose project is
# writable, with NIX_SANDBOX_LAYER, the session's layer directory: see
# workspace.nix), the project is an overlay instead: kernelBudgets.nix's
# jail-budget mounts it at $NIX_SANDBOX_LAYER/merged (the flags in
# sandbox_project_layer), and the jail sees that read-write. Writes land
# in the layer's upper directory, on the session layer's tmpfs of
# limits.workspace_mb (ENOSPC past it); the host's tree is the read-only
# lower. With NIX_SANDBOX_PROJECT_LOWER_FD too (a root server, whose jails
# run as uids of their own: an inherited descriptor of its read-only
# idmapped mount of the project, the owner's files shown as the jail's
# uid's), jail-budget overlays that mount instead (--project-lower-fd).
{ environment, ... }:
c:
c.add-runtime ''
  sandbox_project_layer=()
  if [ -n "''${PROJECT_DIR:-}" ]; then
    if [ ! -d "$PROJECT_DIR" ]; then
      echo "sandbox-${environment.name}: PROJECT_DIR=$PROJECT_DIR is not an existing directory that uid $EUID may enter" >&2
      exit 2
    fi
    sandbox_project_mount=''${PROJECT_MOUNT:-/project}
    if [[ $sandbox_project_mount != /* ]]; then
      echo "sandbox-${environment.name}: PROJECT_MOUNT=$sandbox_project_mount is not an absolute path" >&2
      exit 2
    fi
    if [ -n "''${NIX_SANDBOX_PROJECT_LAYER:-}" ] && [ -n "''${NIX_SANDBOX_LAYER:-}" ]; then
      sandbox_project_layer=(--project-lower "$PROJECT_DIR")
      if [ -n "''${NIX_SANDBOX_PROJECT_LOWER_FD:-}" ]; then
        sandbox_project_layer+=(--project-lower-fd "$NIX_SANDBOX_PROJECT_LOWER_FD")
      fi
      RUNTIME_ARGS+=(--bind "$NIX_SANDBOX_LAYER/merged" "$sandbox_project_mount")
    else
      sandbox_project_layer=(--project-read-only "$PROJECT_DIR")
      RUNTIME_ARGS+=(--ro-bind "$PROJECT_DIR" "$sandbox_project_mount")
    fi
  fi
''
