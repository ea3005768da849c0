# Takes lib, the system, the host facts (host.json), glibc and the shell
# (hostpkgs' own, or null while building those two); returns a function
# from one entry of tools.nix or pythonPackages.nix (plus its `pname`,
# `inputs`: packages by the name postInstall reads them, $NAME,
# `programs`: packages whose bin/ its #! lines may name, and `includes`:
# keep /usr/include, for a compiler) to a package
# named and versioned like nixpkgs' (version: the host's, from its first
# Debian package) that holds its Debian packages' files and every shared
# library they need but glibc's, patched to load from the store
# (closure.py): its runtime closure is what a jail of it needs.
{
  lib,
  system,
  host,
  glibc,
  shell,
}:
{
  pname,
  debs,
  mainProgram ? null,
  aliases ? { },
  postInstall ? "",
  inputs ? { },
  programs ? [ ],
  includes ? false,
  ...
}:
let
  deb = lib.head debs;
  debianVersion =
    host.debianVersions.${deb}
      or (throw "hostpkgs: host.json has no version of the Debian package ${deb}; checks/run writes it");
  # Debian's [epoch:]upstream[-revision], upstream without +dfsg-like suffixes.
  withoutEpoch = lib.elemAt (builtins.match "([0-9]+:)?(.*)" debianVersion) 1;
  withoutRevision =
    if lib.hasInfix "-" withoutEpoch then
      lib.head (builtins.match "(.*)-[^-]*" withoutEpoch)
    else
      withoutEpoch;
  version = lib.head (builtins.match "([^+~]*).*" withoutRevision);
  drv = derivation (
    {
      name = "${pname}-${version}";
      inherit system pname version;
      builder = "/bin/bash";
      args = [ ./host-tool.sh ];
      closure = ./closure.py;
      debs = lib.concatStringsSep " " debs;
      includes = if includes then "1" else "";
      aliases = lib.concatStringsSep " " (lib.mapAttrsToList (name: target: "${name}=${target}") aliases);
      inherit postInstall;
      glibc = if glibc == null then "" else glibc;
      shell = if shell == null then "" else shell;
      programs = lib.optional (shell != null) shell ++ programs;
      mainProgram = if mainProgram == null then "" else mainProgram;
    }
    // inputs
  );
in
drv
// {
  meta = {
    description = "The host's ${lib.concatStringsSep ", " debs} (Debian ${debianVersion}) as a store closure";
    platforms = [ system ];
  }
  // lib.optionalAttrs (mainProgram != null) { inherit mainProgram; };
}
