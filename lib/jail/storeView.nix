# Takes { pkgs, ... } and jail.nix's combinators; returns the permission
# that shows the jail the store paths of its runtime closure and nothing
# else of the store, as jail.nix's bind-nix-store-runtime-closure does
# (the same closure: the jail's extra closures, PATH, argv and entry), but
# through one bind of bubblewrap's. Deferred, so the closure is the final
# state's. Its run-time code hands kernelBudgets.nix's jail-budget the
# array sandbox_store_view (--store-view: an empty directory of the
# store, the wrapper's own; --store-paths: the closure, one path a line),
# so that jail-budget mounts a read-only view of those paths over that
# directory in its own mount namespace, and binds that directory at
# /nix/store. Bubblewrap reads the whole mount table after each bind it
# makes, so one bind per path cost it a reading per path of a table that
# grows with the closure; the view costs one.
{ pkgs, ... }:
c:
c.defer (
  state:
  let
    inherit (pkgs) lib;
    runtimeClosure = pkgs.writeText "${state.name}-runtime-closure" ''
      ${lib.concatStringsSep "\n" state.additionalRuntimeClosures}
      ${lib.concatStringsSep "\n" state.path}
      ${state.argv}
      ${state.entry}
    '';
    storePaths =
      pkgs.runCommand "${state.name}-store-paths"
        {
          __structuredAttrs = true;
          exportReferencesGraph.runtime = runtimeClosure;
          nativeBuildInputs = [ pkgs.jq ];
        }
        ''
          jq -r '.runtime | map(.path) | sort | .[]' "$NIX_ATTRS_JSON_FILE" >"$out"
        '';
    # One empty directory for every jail: each jail-budget mounts its own
    # view over it, in a mount namespace of its own.
    mountpoint = pkgs.runCommand "nix-sandbox-store-view" { } ''mkdir "$out"'';
  in
  c.add-runtime ''
    sandbox_store_view=(--store-view ${mountpoint} --store-paths ${storePaths})
    RUNTIME_ARGS+=(--ro-bind ${mountpoint} /nix/store)
  '' state
)
