# Takes pkgs, lib.mkSandbox and the flake's packages for one system; returns
# the flake's checks for it: every package, and `e2e`, the offline harness's
# end-to-end scripts (e2e.py, sessions.py, artifacts.py) run in a build
# against those packages and the environments of environments.nix, with the
# real nixpkgs.
{
  pkgs,
  mkSandbox,
  packages,
}:
let
  inherit (pkgs) lib;
  environments = import ../flakes/environments.nix { inherit pkgs mkSandbox; };
  presets = [
    "python"
    "shell"
    "node"
  ];
in
packages
// {
  e2e =
    pkgs.runCommand "nix-sandbox-mcp-e2e"
      {
        nativeBuildInputs = [ pkgs.python3 ];
        # Each preset's store closure, for e2e.py's mount table test.
        exportReferencesGraph = lib.concatMap (preset: [
          "closure-${preset}"
          packages."sandbox-${preset}"
        ]) presets;
      }
      ''
        export HOME=$TMPDIR/home
        mkdir -p "$HOME"
        # sessions.py and artifacts.py import e2e.py's client: one directory.
        cp ${./e2e.py} e2e.py
        cp ${./sessions.py} sessions.py
        cp ${./artifacts.py} artifacts.py
        python3 e2e.py --label nix-build \
          --server ${packages.default} \
          --sandbox python=${packages.sandbox-python} \
          --sandbox shell=${packages.sandbox-shell} \
          --sandbox node=${packages.sandbox-node} \
          --custom ${environments.custom} \
          --online ${environments.online} \
          ${lib.concatMapStrings (preset: "--closure ${preset}=closure-${preset} ") presets} | tee "$out"
        python3 sessions.py --label nix-build \
          --server ${packages.default} \
          --sandbox python=${packages.sandbox-python} \
          --sandbox shell=${packages.sandbox-shell} \
          --sandbox node=${packages.sandbox-node} \
          --custom ${environments.custom} \
          --online ${environments.online} \
          --science ${environments.science} | tee -a "$out"
        python3 artifacts.py --label nix-build \
          --server ${packages.default} \
          --sandbox python=${packages.sandbox-python} \
          --sandbox shell=${packages.sandbox-shell} \
          --plots ${environments.plots} | tee -a "$out"
      '';
}
