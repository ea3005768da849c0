# Takes pkgs and an evaluated environment's `seccomp` (true, false, or
# { allow = [ CALL ]; }); returns the jail's seccomp filter, a store file
# holding the cBPF program for jail.nix's add-seccomp, written at build time
# by nix-sandbox-seccomp (seccomp/, built with the rest of the workspace by
# package.nix, which every sandbox needs for its session agent anyway) from
# seccompRules.nix minus the allowed calls; or null when `seccomp` is false.
{ pkgs, seccomp }:
let
  inherit (pkgs) lib;
  policy = import ./seccompRules.nix;
  allowed = if builtins.isAttrs seccomp then seccomp.allow else [ ];
  keep = name: !lib.elem name allowed;
  generator = "${pkgs.callPackage ../package.nix { }}/bin/nix-sandbox-seccomp";
  flags =
    lib.mapAttrsToList (name: errno: "--deny=${name}=${errno}") (lib.filterAttrs (name: _: keep name) policy.deny)
    ++ map (name: "--deny-namespaces=${name}") (lib.filter keep policy.denyNamespaces)
    ++ lib.mapAttrsToList (name: values: "--allow-only=${name}=${lib.concatMapStringsSep "," toString values}") (
      lib.filterAttrs (name: _: keep name) policy.allowOnly
    );
in
if seccomp == false then
  null
else
  pkgs.runCommand "nix-sandbox-seccomp.bpf" { } ''
    ${generator} ${lib.escapeShellArgs flags} --output "$out"
  ''
