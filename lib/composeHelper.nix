# Takes { recipes, build }: a directory of one recipe per environment
# (NAME.json, see composeSandbox.nix) and whether Nix may build what the
# binary cache does not have; returns the text of the compose helper,
# bin/nix-sandbox-mcp-compose ENV REQUEST OUT, which the launcher runs to
# add packages to a call's environment. REQUEST is a JSON file of
# attribute names (checked by the launcher); OUT is where the result's GC
# root goes (a symlink, so that the store keeps it). It instantiates
# composeSandbox.nix of the environment's recipe (the names passed as
# data: a file path given with --argstr), realises the packages asked
# for (with --max-jobs 0 when building is off: from the binary cache
# only), then the composed sandbox (the small derivations that compose
# it are always built here, as nixpkgs' trivial builders are), and prints
# its store path on stdout.
#
# A failure is one line on stderr and an exit status the launcher maps to
# what the model is told: 65 an unknown attribute (the line names it and
# close names), 66 not in the binary cache and building is off (the line
# names the derivation), 67 a name its allowlist prefix lets in that is not
# a package of that scope (the line names it and why), 69 the Nix store or
# daemon unreachable, 70 anything else (nix's first error line).
{ recipes, build }:
''
  if [ $# -ne 3 ]; then
    echo "usage: nix-sandbox-mcp-compose ENV REQUEST.json OUT" >&2
    exit 64
  fi
  env=$1 request=$2 out=$3
  recipe=${recipes}/$env.json
  if [ ! -f "$recipe" ]; then
    echo "environment $env takes no packages on demand (it has no recipe in this server)" >&2
    exit 70
  fi
  if ! command -v nix-instantiate >/dev/null; then
    echo "nix-instantiate is not on the server's PATH" >&2
    exit 69
  fi
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  # At a timeout the launcher stops this script, ends every process under
  # it, then sends SIGTERM: it exits there, its log removed.
  trap 'exit 143' TERM INT

  # fail: says why the last nix command failed, and exits.
  fail() {
    local line why
    if line=$(grep -m1 -o 'nix-sandbox-mcp-compose: unknown .*' "$log"); then
      echo "''${line#nix-sandbox-mcp-compose: unknown }" >&2
      exit 65
    fi
    if line=$(grep -m1 -o 'nix-sandbox-mcp-compose: outside .*' "$log"); then
      echo "''${line#nix-sandbox-mcp-compose: outside }" >&2
      exit 67
    fi
    if grep -q 'unable to start any build' "$log"; then
      line=$(grep -m1 -o '/nix/store/[a-z0-9]*-[^ ]*\.drv' "$log" || true)
      line=''${line#/nix/store/*-}
      echo "''${line%.drv}" >&2
      exit 66
    fi
    why=$(grep -m1 '^error:' "$log" || tail -n 1 "$log")
    why=''${why#error: }
    echo "$why" >&2
    if grep -Eq 'daemon-socket|cannot connect to socket|Connection refused|/nix/var/nix/(db|temproots|gcroots).*Permission denied' "$log"; then
      exit 69
    fi
    exit 70
  }

  if ! drvs=$(nix-instantiate ${./composeSandbox.nix} \
    --argstr recipe "$recipe" --argstr request "$request" </dev/null 2>"$log"); then
    fail
  fi
  mapfile -t drvs <<<"$drvs"
  if [ ''${#drvs[@]} -gt 1 ]; then
    if ! nix-store --realise ${if build then "" else "--max-jobs 0 "}"''${drvs[@]:1}" \
      </dev/null >/dev/null 2>"$log"; then
      fail
    fi
  fi
  if ! nix-store --realise --add-root "$out" --indirect "''${drvs[0]}" </dev/null >/dev/null 2>"$log"; then
    fail
  fi
  readlink "$out"
''
