# Takes { recipe, devenv }, the paths of two JSON files, as strings: the
# dev shell helper (devShellHelper.nix) passes them with --argstr.
# `recipe` is the server's `project` environment as mkServer wrote it
# (projectDevShell.nix: `sandbox`, mkSandbox's arguments but packages and
# env; the store paths of the server's nixpkgs, jail.nix and this flake's
# source); `devenv` is what `nix print-dev-env --json` printed for the
# project's dev shell, which this file reads as data only (no text of it
# is evaluated).
# Returns mkSandbox of the `project` environment: bash, and every store
# path the dev shell's PATH, its inputs (nativeBuildInputs, buildInputs,
# their propagated lists) and the variables it keeps name, in that order,
# as packages (so their closures are the jail's); the variables the dev
# shell exports, without those below; and its shellHook, run by the jail's
# bash at start (BASH_ENV, once per jail: the first bash, and not again in
# the bash programs it starts), its output on stderr, in the jail like the
# model's code.
#
# Variables left out: those not exported (bash's own, stdenv's phases and
# arrays); the derivation's own attributes and the build's variables
# (`builtinNames`, the inputs' lists, `outputs` and each output's name);
# any whose value names an absolute path outside /nix/store, alone or
# after a flag (a host path: /build, /homeless-shelter, /tmp/...,
# -L/usr/lib; a URL's //host/... is not one); any whose name
# reads like a secret (TOKEN, SECRET, PASSWORD, PASSWD, CREDENTIAL,
# API_KEY, PRIVATE_KEY, ACCESS_KEY, or ending in _KEY); names that are
# not shell names; PATH, which is made from the packages; and what the
# jail sets itself (HOME, TMPDIR, LANG, LC_ALL, TERM).
{ recipe, devenv }:
let
  environment = builtins.fromJSON (builtins.unsafeDiscardStringContext (builtins.readFile recipe));
  printed = builtins.fromJSON (builtins.readFile devenv);
  inherit (import (environment.source + "/lib/recipeContext.nix") environment) pkgs lib mkSandbox;

  variables = printed.variables or { };
  exported = lib.filterAttrs (
    _: v: (v.type or null) == "exported" && builtins.isString (v.value or null)
  ) variables;
  value = name: exported.${name}.value or "";
  outputs = lib.filter (name: name != "") (lib.splitString " " (value "outputs"));
  inputLists = [
    "nativeBuildInputs"
    "buildInputs"
    "propagatedNativeBuildInputs"
    "propagatedBuildInputs"
    "depsBuildBuild"
    "depsBuildBuildPropagated"
    "depsBuildTarget"
    "depsBuildTargetPropagated"
    "depsHostHost"
    "depsHostHostPropagated"
    "depsTargetTarget"
    "depsTargetTargetPropagated"
  ];
  builtinNames = inputLists ++ [
    "PATH"
    "HOME"
    "TMPDIR"
    "TMP"
    "TEMP"
    "TEMPDIR"
    "LANG"
    "LC_ALL"
    "TERM"
    "PWD"
    "OLDPWD"
    "SHLVL"
    "SHELL"
    "HOSTNAME"
    "USER"
    "LOGNAME"
    "BASH_ENV"
    "ENV"
    "IN_NIX_SHELL"
    "dontAddDisableDepTrack"
    "NIX_BUILD_TOP"
    "NIX_BUILD_CORES"
    "NIX_LOG_FD"
    "NIX_STORE"
    "NIX_ATTRS_JSON_FILE"
    "NIX_ATTRS_SH_FILE"
    "builder"
    "name"
    "system"
    "outputs"
    "stdenv"
    "shell"
    "shellHook"
    "phases"
    "buildPhase"
    "nobuildPhase"
    "buildCommand"
    "buildCommandPath"
    "passAsFile"
    "preferLocalBuild"
    "allowSubstitutes"
    "__structuredAttrs"
    "strictDeps"
    "doCheck"
    "doInstallCheck"
    "cmakeFlags"
    "configureFlags"
    "mesonFlags"
    "patches"
    "args"
  ];
  secret =
    name:
    builtins.match ".*(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_KEY|PRIVATE_KEY|ACCESS_KEY|_KEY$).*" (
      lib.toUpper name
    ) != null;
  # The absolute paths a value names: each word (split at whitespace, :,
  # =, ;, quotes, commas) that starts with /.
  words = text: lib.filter builtins.isString (builtins.split "[[:space:]:=;,\"']+" text);
  # A flag's path (`-L/usr/lib`) counts; a URL's `//host/...` (after the
  # split at `:`) is not a path.
  hostPath =
    text:
    lib.any (
      word:
      let
        flagged = builtins.match "-[A-Za-z]+(/.*)" word;
        path = if flagged == null then word else builtins.head flagged;
      in
      builtins.match "/[^/].*|/" path != null && !lib.hasPrefix "/nix/store/" path
    ) (words text);
  kept = lib.filterAttrs (
    name: v:
    !(builtins.elem name builtinNames)
    && !(builtins.elem name outputs)
    && lib.isValidPosixName name
    && !(secret name)
    && !(hostPath v.value)
  ) exported;
  env = lib.mapAttrs (_: v: v.value) kept;

  # The store paths a text names (/nix/store/HASH-NAME, nothing below).
  storePaths =
    text:
    map builtins.head (
      lib.filter builtins.isList (builtins.split "(/nix/store/[0-9a-z]{32}-[-._+?=0-9a-zA-Z]+)" text)
    );
  pathOrder = storePaths (value "PATH");
  inputOrder = lib.concatMap (list: storePaths (value list)) inputLists;
  envOrder = lib.concatMap storePaths (builtins.attrValues env);
  referenced = lib.unique (pathOrder ++ inputOrder ++ envOrder);
  hookText = value "shellHook";
  hook = pkgs.writeTextFile {
    name = "nix-sandbox-mcp-shell-hook";
    destination = "/share/nix-sandbox-mcp/shell-hook.sh";
    text = ''
      # The project's dev shell's shellHook, run once per jail (BASH_ENV).
      if [ -z "''${NIX_SANDBOX_SHELL_HOOK_RAN-}" ]; then
        export NIX_SANDBOX_SHELL_HOOK_RAN=1
        {
      ${hookText}
        } >&2 3<&- 4>&-
      fi
    '';
  };
  hookStorePaths = storePaths hookText;
in
mkSandbox pkgs (
  environment.sandbox
  // {
    packages = map lib.toDerivation (lib.unique (referenced ++ hookStorePaths)) ++ [
      pkgs.bash
      pkgs.coreutils
    ]
    ++ lib.optional (hookText != "") hook;
    env =
      env
      // {
        IN_NIX_SHELL = "pure";
      }
      // lib.optionalAttrs (hookText != "") { BASH_ENV = "${hook}/share/nix-sandbox-mcp/shell-hook.sh"; };
  }
)
