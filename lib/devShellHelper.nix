# Takes { recipe, system }: the server's `project` recipe (a store path,
# projectDevShell.nix) and the system whose dev shell is taken; returns
# the text of the dev shell helper, bin/nix-sandbox-mcp-devshell FLAKE OUT,
# which the launcher runs for the `project` environment. FLAKE is the
# project's directory (PROJECT_DIR); OUT is where the result's GC root
# goes. It runs `nix print-dev-env --json FLAKE#devShells.SYSTEM.default`,
# a pure evaluation of the project's flake as `nix develop` reads it
# (--no-update-lock-file --no-write-lock-file: the project is never
# written; accept-flake-config off: the flake's nixConfig is ignored),
# then instantiates devShellSandbox.nix with that JSON as data, realises
# the sandbox with a GC root at OUT, and prints its store path on stdout.
#
# A failure is one line on stderr naming the flake and nix's first error
# line, and exit status 69 when the Nix store or daemon is unreachable,
# 70 otherwise.
{ recipe, system }:
''
  if [ $# -ne 2 ]; then
    echo "usage: nix-sandbox-mcp-devshell FLAKE OUT" >&2
    exit 64
  fi
  flake=$1 out=$2
  if ! command -v nix >/dev/null || ! command -v nix-instantiate >/dev/null; then
    echo "$flake: nix is not on the server's PATH" >&2
    exit 69
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # At a timeout the launcher stops this script, ends every process under
  # it, then sends SIGTERM: it exits there, its files removed.
  trap 'exit 143' TERM INT
  log=$work/log

  # fail WHAT: says why the last nix command failed, and exits.
  fail() {
    local why
    why=$(grep -m1 '^error:' "$log" || grep -m1 -v '^warning:' "$log" || tail -n 1 "$log")
    why=''${why#error: }
    why=$(printf '%s' "$why" | tr -s '[:space:]' ' ')
    echo "$flake: $1: ''${why:-nix failed without a message}" >&2
    if grep -Eq 'daemon-socket|cannot connect to socket|Connection refused|/nix/var/nix/(db|temproots|gcroots|profiles).*Permission denied' "$log"; then
      exit 69
    fi
    exit 70
  }

  if ! nix --extra-experimental-features 'nix-command flakes' \
    --option accept-flake-config false \
    print-dev-env --json --no-update-lock-file --no-write-lock-file \
    "$flake#devShells.${system}.default" </dev/null >"$work/devenv.json" 2>"$log"; then
    fail "its dev shell devShells.${system}.default"
  fi
  if ! drv=$(nix-instantiate ${./devShellSandbox.nix} \
    --argstr recipe ${recipe} --argstr devenv "$work/devenv.json" </dev/null 2>"$log"); then
    fail "the environment from its dev shell"
  fi
  if ! nix-store --realise --add-root "$out" --indirect "$drv" </dev/null >/dev/null 2>"$log"; then
    fail "the environment from its dev shell"
  fi
  readlink "$out"
''
