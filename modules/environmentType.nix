# Takes nixpkgs' lib; returns the option type of one environment of
# programs.nix-sandbox-mcp.environments: a submodule of lib.mkSandbox's own
# options (lib/environment.nix, the one environment schema), in which
# `name` defaults to the attribute name, plus `enable`, so that a bundled
# preset can be switched off.
lib:
let
  inherit (lib) mkOption types literalExpression;
in
types.submodule (
  { name, ... }:
  {
    _file = ./environmentType.nix;
    imports = [ ../lib/environment.nix ];
    options = {
      enable = mkOption {
        type = types.bool;
        default = true;
        description = "Whether to serve this environment. Set it to `false` to drop a bundled preset.";
        example = false;
      };
      # lib/environment.nix declares `name`; this adds its default.
      name = mkOption {
        default = name;
        defaultText = literalExpression "<the attribute name>";
      };
    };
  }
)
