# Takes lib, writeTextFile, bash and shellcheck; returns nixpkgs'
# writeShellApplication ({ name, text, runtimeInputs, runtimeEnv, ... } ->
# derivation with bin/NAME): a bash script with errexit, nounset and
# pipefail, its inputs on PATH, checked by `bash -n` and shellcheck as
# nixpkgs checks it.
{
  lib,
  writeTextFile,
  bash,
  shellcheck,
}:
{
  name,
  text,
  runtimeInputs ? [ ],
  runtimeEnv ? null,
  meta ? { },
  passthru ? { },
  checkPhase ? null,
  excludeShellChecks ? [ ],
  extraShellCheckFlags ? [ ],
  bashOptions ? [
    "errexit"
    "nounset"
    "pipefail"
  ],
  inheritPath ? true,
  derivationArgs ? { },
}:
let
  shell = "${bash}/bin/bash";
  excludeFlags = lib.optionalString (
    excludeShellChecks != [ ]
  ) "--exclude=${lib.concatStringsSep "," excludeShellChecks}";
in
writeTextFile {
  inherit
    name
    meta
    passthru
    derivationArgs
    ;
  executable = true;
  destination = "/bin/${name}";
  allowSubstitutes = true;
  preferLocalBuild = false;
  text =
    ''
      #!${shell}
      ${lib.concatMapStringsSep "\n" (option: "set -o ${option}") bashOptions}
    ''
    + lib.optionalString (runtimeEnv != null) (
      lib.concatStrings (
        lib.mapAttrsToList (name: value: ''
          ${lib.toShellVar name value}
          export ${name}
        '') runtimeEnv
      )
    )
    + lib.optionalString (runtimeInputs != [ ]) ''

      export PATH="${lib.makeBinPath runtimeInputs}${lib.optionalString inheritPath ":$PATH"}"
    ''
    + ''

      ${text}
    '';
  checkPhase =
    if checkPhase != null then
      checkPhase
    else
      ''
        ${shell} -n -O extglob "$target"
        ${shellcheck}/bin/shellcheck ${excludeFlags} ${lib.escapeShellArgs extraShellCheckFlags} "$target"
      '';
}
