# Takes pkgs and an evaluated environment (evalEnvironment.nix) whose
# interpreter is `program`; returns its program runner, a package with
# bin/sandbox-NAME-program, the entry of its run wrapper and what its
# session driver (agent/drivers/program.sh) calls. In the jail:
#
#   sandbox-NAME-program             the source on stdin: build it, run it
#   sandbox-NAME-program --shell ARG...   bash ARG... (the launcher's probe,
#                                    and a person's shell in the same jail)
#
# The source is written to $TMPDIR/build-cache/work/FILE (FILE is
# `program.file`; a path of its own, so the compiler's messages name
# ./FILE) and `program.build` runs there with `src` (FILE), `out` (an empty
# directory for what it builds), `cache` ($TMPDIR/build-cache, for the
# language's own cache) and the compiler's exit status ends the call when it
# fails, with its messages on stderr. Then `program.run` runs in the
# caller's directory (/workspace) with `out` set, its stdin at end of file.
# Outputs are kept by the source's SHA-256 in build-cache/out/: an unchanged
# source is not built again in a session (whose /tmp lives as long as it),
# and the newest 16 are kept.
{ pkgs, environment }:
let
  inherit (environment) name program;
in
pkgs.writeShellApplication {
  name = "sandbox-${name}-program";
  runtimeInputs = [
    pkgs.coreutils
    pkgs.gnused
  ];
  text = ''
    if [ "''${1-}" = --shell ]; then
      shift
      exec ${pkgs.bash}/bin/bash "$@"
    fi
    if [ $# -gt 0 ]; then
      echo "usage: sandbox-${name}-program [--shell [BASH ARGUMENTS]] (the ${program.language} source on stdin)" >&2
      exit 2
    fi
    cache=''${TMPDIR:-/tmp}/build-cache
    work=$cache/work
    mkdir -p "$cache/out"
    rm -rf "$work"
    mkdir -p "$work"
    src=${pkgs.lib.escapeShellArg program.file}
    cat >"$work/$src"
    sum=$(sha256sum <"$work/$src")
    out=$cache/out/''${sum%% *}
    if [ -e "$out/.built" ]; then
      touch "$out/.built"
    else
      rm -rf "$out"
      mkdir -p "$out"
      set +e
      (
        set -e
        cd "$work"
        ${program.build}
      ) </dev/null
      status=$?
      set -e
      if [ "$status" -ne 0 ]; then
        rm -rf "$out"
        exit "$status"
      fi
      touch "$out/.built"
      # The newest 16 outputs stay.
      # shellcheck disable=SC2012 # the names are hexadecimal digests
      mapfile -t old < <(ls -1t "$cache/out" | tail -n +17)
      for dir in "''${old[@]}"; do
        rm -rf "''${cache:?}/out/$dir"
      done
    fi
    ${program.run}
  '';
}
