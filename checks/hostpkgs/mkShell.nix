# Takes lib, the system and the stand-in stdenv; returns nixpkgs' mkShell
# ({ name ? "nix-shell", packages, inputsFrom, buildInputs,
# nativeBuildInputs, propagatedBuildInputs, propagatedNativeBuildInputs,
# shellHook, ... } -> derivation), as pkgs/build-support/mkshell does it:
# `packages` go first into nativeBuildInputs, the inputs of `inputsFrom`
# are merged in, their shellHooks run before the shell's own, and every
# other attribute is the derivation's (an environment variable of the
# shell). A derivation with bash as its builder and `stdenv` set, as
# `nix print-dev-env` needs; the stand-in's stdenv has no setup hooks, so
# (unlike nixpkgs') its dev shell's PATH is not made from the inputs: what
# reads it takes the inputs' lists too.
{
  lib,
  system,
  stdenv,
}:
{
  name ? "nix-shell",
  packages ? [ ],
  inputsFrom ? [ ],
  buildInputs ? [ ],
  nativeBuildInputs ? [ ],
  propagatedBuildInputs ? [ ],
  propagatedNativeBuildInputs ? [ ],
  ...
}@attrs:
let
  mergeInputs =
    name:
    (attrs.${name} or [ ])
    ++ (lib.subtractLists inputsFrom (lib.flatten (lib.catAttrs name inputsFrom)));
  rest = removeAttrs attrs [
    "name"
    "packages"
    "inputsFrom"
    "buildInputs"
    "nativeBuildInputs"
    "propagatedBuildInputs"
    "propagatedNativeBuildInputs"
    "shellHook"
  ];
in
derivation (
  {
    inherit name system stdenv;
    outputs = [ "out" ];
    builder = "/bin/bash";
    args = [
      "-c"
      "echo 'This derivation is not meant to be built, aborting' >&2; exit 1"
    ];
    buildInputs = mergeInputs "buildInputs";
    nativeBuildInputs = packages ++ (mergeInputs "nativeBuildInputs");
    propagatedBuildInputs = mergeInputs "propagatedBuildInputs";
    propagatedNativeBuildInputs = mergeInputs "propagatedNativeBuildInputs";
    shellHook = lib.concatStringsSep "\n" (
      lib.catAttrs "shellHook" (lib.reverseList inputsFrom ++ [ attrs ])
    );
  }
  // rest
)
