# Takes the merged manifest's store path and the launcher package; returns
# the text of bin/nix-sandbox-mcp: the launcher with that manifest, then,
# built at start-up, every flake ref of NIX_SANDBOX_ENVS (comma-separated;
# a failure is reported on stderr and the rest served), then every pre-built
# sandbox in NIX_SANDBOX_DIR (default ~/.config/nix-sandbox-mcp/sandboxes),
# each as one more --manifest; then the caller's arguments. Stdout stays the
# MCP channel: nothing else writes to it, and no build reads stdin.
{ manifest, launcher }:
''
  manifests=(--manifest ${manifest})
  sandbox_manifest=share/nix-sandbox-mcp/manifest.json

  if [ -n "''${NIX_SANDBOX_ENVS:-}" ]; then
    IFS=, read -r -a refs <<<"$NIX_SANDBOX_ENVS"
    for ref in "''${refs[@]}"; do
      ref=''${ref#"''${ref%%[![:space:]]*}"}
      ref=''${ref%"''${ref##*[![:space:]]}"}
      if [ -z "$ref" ]; then
        continue
      fi
      if ! command -v nix >/dev/null; then
        echo "nix-sandbox-mcp: NIX_SANDBOX_ENVS: nix is not on PATH, cannot build $ref; serving the other environments" >&2
        continue
      fi
      if ! built=$(nix --extra-experimental-features 'nix-command flakes' build --no-link --json "$ref" </dev/null); then
        echo "nix-sandbox-mcp: NIX_SANDBOX_ENVS: building $ref failed; serving the other environments" >&2
        continue
      fi
      found=
      while read -r out; do
        if [ -f "$out/$sandbox_manifest" ]; then
          manifests+=(--manifest "$out/$sandbox_manifest")
          found=1
        fi
      done < <(jq -r '.[].outputs[]' <<<"$built")
      if [ -z "$found" ]; then
        echo "nix-sandbox-mcp: NIX_SANDBOX_ENVS: $ref has no $sandbox_manifest (not made by lib.mkSandbox?); skipped" >&2
      fi
    done
  fi

  sandbox_dir=''${NIX_SANDBOX_DIR:-''${HOME:+$HOME/.config/nix-sandbox-mcp/sandboxes}}
  if [ -n "$sandbox_dir" ] && [ -d "$sandbox_dir" ]; then
    for entry in "$sandbox_dir"/*; do
      if [ -f "$entry/$sandbox_manifest" ]; then
        manifests+=(--manifest "$entry/$sandbox_manifest")
      fi
    done
  fi

  exec ${launcher}/bin/nix-sandbox-mcp "''${manifests[@]}" "$@"
''
