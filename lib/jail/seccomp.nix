# Takes { pkgs, environment, ... } and jail.nix's combinators; returns the
# permission that adds the jail's seccomp filter (add-seccomp), unless the
# environment sets `seccomp = false`: a store file holding the cBPF
# program, written at build time by nix-sandbox-seccomp (seccomp/, built
# with the rest of the workspace by package.nix, which every sandbox needs
# for its session agent anyway) from lib/seccompRules.nix minus the calls
# of `seccomp.allow`.
{ pkgs, environment, ... }:
c:
let
  inherit (pkgs) lib;
  inherit (environment) seccomp;
  rules = import ../seccompRules.nix;
  allowed = if builtins.isAttrs seccomp then seccomp.allow else [ ];
  keep = name: !lib.elem name allowed;
  generator = "${pkgs.callPackage ../../package.nix { }}/bin/nix-sandbox-seccomp";
  flags =
    lib.mapAttrsToList (name: errno: "--deny=${name}=${errno}") (lib.filterAttrs (name: _: keep name) rules.deny)
    ++ map (name: "--deny-namespaces=${name}") (lib.filter keep rules.denyNamespaces)
    ++ lib.mapAttrsToList (name: values: "--allow-only=${name}=${lib.concatMapStringsSep "," toString values}") (
      lib.filterAttrs (name: _: keep name) rules.allowOnly
    );
  filter = pkgs.runCommand "nix-sandbox-seccomp.bpf" { } ''
    ${generator} ${lib.escapeShellArgs flags} --output "$out"
  '';
in
if seccomp == false then c.compose [ ] else c.add-seccomp filter
