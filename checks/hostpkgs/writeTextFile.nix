# Takes lib and runCommand; returns nixpkgs' writeTextFile ({ name, text,
# executable, destination, checkPhase, meta, passthru, derivationArgs, ... }
# -> derivation): the text at $out + destination, then the check phase.
{ lib, runCommand }:
{
  name,
  text,
  executable ? false,
  destination ? "",
  checkPhase ? "",
  meta ? { },
  passthru ? { },
  allowSubstitutes ? false,
  preferLocalBuild ? true,
  derivationArgs ? { },
}:
let
  binName = builtins.match "/bin/([^/]+)" destination;
in
runCommand name
  (
    {
      inherit
        text
        executable
        checkPhase
        allowSubstitutes
        preferLocalBuild
        passthru
        ;
      passAsFile = [ "text" ];
      meta = lib.optionalAttrs (executable && binName != null) { mainProgram = lib.head binName; } // meta;
    }
    // derivationArgs
  )
  ''
    target=$out${lib.escapeShellArg destination}
    mkdir -p "$(dirname "$target")"
    cp "$textPath" "$target"
    if [ -n "$executable" ]; then
      chmod +x "$target"
    fi
    eval "$checkPhase"
  ''
