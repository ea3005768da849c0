# Takes pkgs; returns nixpkgs' `formats.json` (a function of { } to
# { type, generate }) for the package set of the offline harness: `type`
# any JSON value, `generate NAME VALUE` a file of the value as JSON.
pkgs:
{ }:
let
  inherit (pkgs.lib) types;
  valueType =
    types.nullOr (
      types.oneOf [
        types.bool
        types.int
        types.float
        types.str
        types.path
        (types.attrsOf valueType)
        (types.listOf valueType)
      ]
    )
    // {
      description = "JSON value";
    };
in
{
  type = valueType;
  generate = name: value: pkgs.writeText name (builtins.toJSON value);
}
