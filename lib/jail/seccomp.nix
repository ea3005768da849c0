# Takes { pkgs, environment, ... } and jail.nix's combinators; returns the
# permission that adds the jail's seccomp filter (add-seccomp), unless the
# environment sets `seccomp = false`: a store file holding the cBPF
# program, written at build time by nix-sandbox-seccomp (seccomp/, built
# with the rest of the workspace by package.nix, which every sandbox needs
# for its session agent anyway) from lib/seccompRules.nix minus the calls,
# socket families and protocols of `seccomp.allow`.
{ pkgs, environment, ... }:
c:
let
  inherit (pkgs) lib;
  inherit (environment) seccomp;
  rules = import ../seccompRules.nix;
  inherit (rules) sockets;
  allowed = if builtins.isAttrs seccomp then seccomp.allow else [ ];
  keep = name: !lib.elem name allowed;
  numbers = names: lib.concatMapStringsSep "," (name: toString sockets.numbers.${name}) (lib.unique names);
  opened = prefix: lib.filter (lib.hasPrefix prefix) allowed;
  families = sockets.families ++ opened "AF_";
  protocols = {
    AF_NETLINK = sockets.protocols.AF_NETLINK ++ opened "NETLINK_";
    AF_INET = sockets.protocols.AF_INET ++ opened "IPPROTO_";
    AF_INET6 = sockets.protocols.AF_INET6 ++ opened "IPPROTO_";
  };
  socketFlags =
    call:
    [ "--allow-only=${call}=${numbers families}:EAFNOSUPPORT" ]
    ++ lib.mapAttrsToList (
      family: names:
      "--allow-only-arg=${call}=${toString sockets.numbers.${family}}:2=${numbers names}:EPROTONOSUPPORT"
    ) protocols;
  generator = "${pkgs.callPackage ../../package.nix { }}/bin/nix-sandbox-seccomp";
  flags =
    lib.mapAttrsToList (name: errno: "--deny=${name}=${errno}") (lib.filterAttrs (name: _: keep name) rules.deny)
    ++ map (name: "--deny-namespaces=${name}") (lib.filter keep rules.denyNamespaces)
    ++ lib.mapAttrsToList (name: values: "--allow-only=${name}=${lib.concatMapStringsSep "," toString values}") (
      lib.filterAttrs (name: _: keep name) rules.allowOnly
    )
    ++ lib.concatMap socketFlags (lib.filter keep sockets.calls);
  filter = pkgs.runCommand "nix-sandbox-seccomp.bpf" { } ''
    ${generator} ${lib.escapeShellArgs flags} --output "$out"
  '';
in
if seccomp == false then c.compose [ ] else c.add-seccomp filter
