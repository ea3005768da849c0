# Takes lib, the system and the host facts (host.json); returns a function
# from one entry of tools.nix (plus its `pname`) to a package named and
# versioned like nixpkgs' (version: the host's, from its first Debian
# package) whose bin/ links to the host's programs.
{
  lib,
  system,
  host,
}:
{
  pname,
  debs,
  mainProgram ? null,
  aliases ? { },
  shims ? { },
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
      debs = lib.concatStringsSep " " debs;
      aliases = lib.concatStringsSep " " (lib.mapAttrsToList (name: target: "${name}=${target}") aliases);
      shims = lib.concatStringsSep " " (lib.attrNames shims);
      mainProgram = if mainProgram == null then "" else mainProgram;
    }
    // lib.mapAttrs' (name: text: lib.nameValuePair "shim_${name}" text) shims
  );
in
drv
// {
  meta = {
    description = "The host's ${lib.concatStringsSep ", " debs} (Debian ${debianVersion})";
    platforms = [ system ];
  }
  // lib.optionalAttrs (mainProgram != null) { inherit mainProgram; };
}
