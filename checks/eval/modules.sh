# shellcheck shell=bash disable=SC2154 # root, work, override: set by checks/run
# checks/eval/modules.sh: the offline harness's tests of the NixOS and
# home-manager modules and of the templates. Sourced by checks/run after its
# builds; uses its ok, fail, build, counted, log_tail, store_path, $root, $work and
# $override.
#
# 0. docs/modules.md shows each module snippet (checks/eval/snippets/) verbatim.
# 1. checks/flakes/modules-flake.nix, a user's flake over this checkout, evaluates
#    the module snippets (checks/eval/snippets/) and more configurations with
#    lib.evalModules (checks/eval/modules.nix): every `expectations` entry must
#    have got == want, every `failures` entry must fail with its message.
# 2. It builds the server each snippet configures, and home-manager's
#    ~/.config/mcp/mcp.json; checks/e2e/served.py starts the server the way that
#    file says and runs code in it.
# 3. A sandbox named like a bundled preset, in NIX_SANDBOX_DIR or built
#    from NIX_SANDBOX_ENVS, replaces the preset in the flake's server.
# 4. `nix flake init -t` of each template into a scratch directory, the way
#    README.md says: this checkout registered as `nix-sandbox-mcp` in a
#    user flake registry (a scratch HOME's), the template's input taken
#    from there; built with nixpkgs pointed at the host package set, then
#    checks/e2e/served.py runs code in its environments.

# served LABEL ARGS...: runs checks/e2e/served.py, shows and counts its lines
# (checks/run's `counted`).
served() {
  local label=$1
  shift
  counted served.py "$label" /usr/bin/python3 "$root/checks/e2e/served.py" --label "$label" "$@"
}

# docs/modules.md shows the snippets these tests evaluate, verbatim.
for snippet in home-manager nixos; do
  name="docs/modules.md shows checks/eval/snippets/$snippet.nix verbatim"
  if python3 -c 'import sys; sys.exit(open(sys.argv[2]).read() not in open(sys.argv[1]).read())' \
    "$root/docs/modules.md" "$root/checks/eval/snippets/$snippet.nix"; then
    ok "$name"
  else
    fail "$name" "paste it whole into a nix code block (the docs' module snippets are the ones tested)"
  fi
done

modules_flake=$work/modules-flake
mkdir -p "$modules_flake"
sed -e "s|@SOURCE@|git+file://$root|" -e "s|@NIXPKGS@|path:$root/checks/hostpkgs|" \
  -e "s|@HOME_MANAGER@|path:$(store_path "$root/checks/flake.lock" home-manager)|" \
  "$root/checks/flakes/modules-flake.nix" >"$modules_flake/flake.nix"

if expectations=$(nix eval --json "path:$modules_flake#expectations" 2>"$work/modules-expectations.log"); then
  while IFS=$'\t' read -r name same got want; do
    if [ "$same" = true ]; then
      ok "$name"
    else
      fail "$name" "got $got, wanted $want"
    fi
  done < <(jq -r 'to_entries[] | [.key, (.value.got == .value.want), (.value.got | tojson), (.value.want | tojson)] | @tsv' <<<"$expectations")
else
  fail "modules: checks/eval/modules.nix expectations evaluate" "see ${work#"$root"/}/modules-expectations.log"
  log_tail "$work/modules-expectations.log"
fi

if failures=$(nix eval --json "path:$modules_flake#failures" \
  --apply 'builtins.mapAttrs (id: case: { inherit (case) title error; })' 2>"$work/modules-failures.log"); then
  while IFS=$'\t' read -r id title want; do
    log=$work/modules-failure-$id.log
    if nix eval --json "path:$modules_flake#failures.$id.value" >/dev/null 2>"$log"; then
      fail "$title" "evaluated; wanted the error: $want"
    elif grep -qF -- "$want" "$log"; then
      ok "$title"
    else
      fail "$title" "wanted the error '$want', got: $(grep -v '^warning' "$log" | head -3 | tr '\n' ' ')"
    fi
  done < <(jq -r 'to_entries[] | [.key, .value.title, .value.error] | @tsv' <<<"$failures")
else
  fail "modules: checks/eval/modules.nix failures evaluate" "see ${work#"$root"/}/modules-failures.log"
  log_tail "$work/modules-failures.log"
fi

for package in home-server home-mcp-json nixos-server python-replacement; do
  build "$package" "path:$modules_flake#$package" --option build-users-group ''
done
if [ -n "${built[home-server]:-}" ] && [ -n "${built[home-mcp-json]:-}" ]; then
  served home-manager home --mcp-json "${built[home-mcp-json]}"
fi
if [ -n "${built[nixos-server]:-}" ]; then
  if nix eval --json "path:$modules_flake#service" >"$work/nixos-service.json" 2>"$work/nixos-service.log"; then
    served nixos nixos --server "${built[nixos-server]}" --service "$work/nixos-service.json"
  else
    fail "nixos: the service's ExecStart evaluates" "see ${work#"$root"/}/nixos-service.log"
  fi
fi

# The NixOS VM test (nixosService.nix) needs nixpkgs and KVM; here its
# test script must at least compile.
vm_test="(import $root/checks/eval/nixosService.nix { pkgs = { testers.runNixOSTest = test: test; curl = null; }; module = { }; }).testScript"
if nix eval --raw --impure --expr "$vm_test" >"$work/nixos-vm-test.py" 2>"$work/nixos-vm-test.log" &&
  /usr/bin/python3 -m py_compile "$work/nixos-vm-test.py" 2>>"$work/nixos-vm-test.log"; then
  ok "nixos: the VM test's script (checks/eval/nixosService.nix) compiles"
else
  fail "nixos: the VM test's script (checks/eval/nixosService.nix) compiles" "see ${work#"$root"/}/nixos-vm-test.log"
fi

# Runtime environments named like presets replace them (the server package
# built by checks/run from this flake).
if [ -n "${built[python-replacement]:-}" ] && [ -n "${built[default]:-}" ]; then
  served "runtime environments" replace --server "${built[default]}" \
    --python-replacement "${built[python-replacement]}" --node-ref "path:$modules_flake#node-replacement"
fi

# A newcomer's HOME: the user registry README.md's "Get it" writes; no
# global registry (there is no network here).
newcomer=$work/newcomer-home
mkdir -p "$newcomer"
echo '{"flakes": [], "version": 2}' >"$work/no-global-registry.json"
as_newcomer() {
  HOME=$newcomer NIX_CONFIG="$NIX_CONFIG
flake-registry = $work/no-global-registry.json" "$@"
}
if (cd "$root" && as_newcomer nix --extra-experimental-features 'nix-command flakes' \
  registry add nix-sandbox-mcp "git+file://$PWD") >"$work/registry-add.log" 2>&1; then
  ok "README's registry add names this checkout nix-sandbox-mcp"
else
  fail "README's registry add names this checkout nix-sandbox-mcp" "see ${work#"$root"/}/registry-add.log"
fi
for template in default custom-env; do
  dir=$work/template-$template
  mkdir -p "$dir"
  if (cd "$dir" && as_newcomer nix flake init -t "nix-sandbox-mcp#$template") >"$work/template-$template-init.log" 2>&1 &&
    [ -f "$dir/flake.nix" ] && [ -f "$dir/README.md" ]; then
    ok "nix flake init -t nix-sandbox-mcp#$template (the registry's) writes flake.nix and README.md"
  else
    fail "nix flake init -t nix-sandbox-mcp#$template (the registry's) writes flake.nix and README.md" \
      "see ${work#"$root"/}/template-$template-init.log"
    continue
  fi
  # Its nix-sandbox-mcp input comes from the registry, unedited.
  as_newcomer build "template-$template" "path:$dir#default" "${override[@]}" --option build-users-group ''
  if [ -n "${built[template-$template]:-}" ]; then
    served "template $template" template --server "${built[template-$template]}"
  fi
done
