# Takes the merged manifest's store path and the launcher package; returns
# the text of bin/nix-sandbox-mcp: the launcher with that manifest, then,
# built at start-up, every flake ref of NIX_SANDBOX_ENVS (comma-separated),
# then every pre-built sandbox in NIX_SANDBOX_DIR (default
# ~/.config/nix-sandbox-mcp/sandboxes), each as one more --manifest; then
# the caller's arguments. Stdout stays the MCP channel: nothing else writes
# to it, and no build reads stdin.
#
# --help and --version go straight to the launcher: no build; so does the
# `sandbox` subcommand (docs/cli.md), which talks to running servers. Every
# problem (a ref that does not build, a NIX_SANDBOX_DIR that is not a
# directory or holds something that is not a sandbox) is one line on
# stderr naming it and the fix, and the others are served; --check prints
# each as a FAIL line after the launcher's and then fails.
{ manifest, launcher }:
''
  manifests=(--manifest ${manifest})
  sandbox_manifest=share/nix-sandbox-mcp/manifest.json
  check=
  if [ "''${1:-}" = sandbox ]; then
    exec ${launcher}/bin/nix-sandbox-mcp "$@"
  fi
  for arg in "$@"; do
    case $arg in
      -h | --help | -V | --version) exec ${launcher}/bin/nix-sandbox-mcp "$@" ;;
      --check) check=1 ;;
    esac
  done

  problems=()
  # problem SETTING TEXT: one configuration problem, said now on stderr.
  problem() {
    problems+=("$1"$'\t'"$2")
    echo "nix-sandbox-mcp: $1: $2" >&2
  }
  flakes=(--extra-experimental-features 'nix-command flakes')
  # How the fixes below spell a nix command: runnable with flakes off too.
  nix_cmd="nix --extra-experimental-features 'nix-command flakes'"

  if [ -n "''${NIX_SANDBOX_ENVS:-}" ]; then
    IFS=, read -r -a refs <<<"$NIX_SANDBOX_ENVS"
    for ref in "''${refs[@]}"; do
      ref=''${ref#"''${ref%%[![:space:]]*}"}
      ref=''${ref%"''${ref##*[![:space:]]}"}
      if [ -z "$ref" ]; then
        continue
      fi
      if ! command -v nix >/dev/null; then
        problem NIX_SANDBOX_ENVS "nix is not on PATH, so $ref cannot be built; put nix on the server's PATH, or build it into NIX_SANDBOX_DIR yourself ($nix_cmd build -o DIR/NAME '$ref'); serving the other environments"
        continue
      fi
      echo "nix-sandbox-mcp: NIX_SANDBOX_ENVS: building $ref (the server starts when it is built)" >&2
      log=$(mktemp)
      if ! built=$(nix "''${flakes[@]}" build --no-link --json "$ref" </dev/null 2>"$log"); then
        why=$(grep -m1 '^error:' "$log" || tail -n1 "$log")
        rm -f "$log"
        problem NIX_SANDBOX_ENVS "$ref did not build ($why); fix the ref (a flake output made by lib.mkSandbox, e.g. /home/me/my-sandbox#data-science) or remove it, and see why with: $nix_cmd build '$ref'; serving the other environments"
        continue
      fi
      rm -f "$log"
      found=
      while read -r out; do
        if [ -f "$out/$sandbox_manifest" ]; then
          manifests+=(--manifest "$out/$sandbox_manifest")
          found=1
        fi
      done < <(jq -r '.[].outputs[]' <<<"$built")
      if [ -z "$found" ]; then
        problem NIX_SANDBOX_ENVS "$ref built, but has no $sandbox_manifest, so it is not a sandbox made by lib.mkSandbox; point the ref at one, or remove it"
      fi
    done
  fi

  if [ -n "''${NIX_SANDBOX_DIR:-}" ]; then
    sandbox_dir=$NIX_SANDBOX_DIR
    if [[ $sandbox_dir != /* ]]; then
      problem NIX_SANDBOX_DIR "$sandbox_dir is not an absolute path; give the directory's full path, or unset it"
      sandbox_dir=
    elif [ ! -e "$sandbox_dir" ]; then
      problem NIX_SANDBOX_DIR "$sandbox_dir does not exist; make it (mkdir -p '$sandbox_dir') and build sandboxes into it ($nix_cmd build -o '$sandbox_dir/NAME' REF), or unset it"
      sandbox_dir=
    elif [ ! -d "$sandbox_dir" ]; then
      problem NIX_SANDBOX_DIR "$sandbox_dir is not a directory; set it to a directory of sandboxes ($nix_cmd build -o DIR/NAME REF), or unset it"
      sandbox_dir=
    fi
  else
    # The default is used when it exists; a missing one is no problem.
    sandbox_dir=''${HOME:+$HOME/.config/nix-sandbox-mcp/sandboxes}
  fi
  if [ -n "$sandbox_dir" ] && [ -d "$sandbox_dir" ]; then
    for entry in "$sandbox_dir"/*; do
      if [ -f "$entry/$sandbox_manifest" ]; then
        manifests+=(--manifest "$entry/$sandbox_manifest")
      elif [ -e "$entry" ] || [ -L "$entry" ]; then
        problem NIX_SANDBOX_DIR "$entry is not a sandbox (it has no $sandbox_manifest); remove it, or replace it with one ($nix_cmd build -o '$entry' REF of a lib.mkSandbox output)"
      fi
    done
  fi

  if [ -z "$check" ] || [ ''${#problems[@]} -eq 0 ]; then
    exec ${launcher}/bin/nix-sandbox-mcp "''${manifests[@]}" "$@"
  fi
  # --check: the launcher's report, then these problems, and a failure.
  ${launcher}/bin/nix-sandbox-mcp "''${manifests[@]}" "$@" || true
  for line in "''${problems[@]}"; do
    echo "''${line%%$'\t'*}: FAIL: ''${line#*$'\t'}"
  done
  exit 1
''
