# A module: the home-manager options that home-manager's programs/mcp.nix
# sets besides its own, declared as small as they can be (the real ones live
# in home-manager's misc/ modules and nixpkgs, which the offline harness does
# not evaluate): assertions, meta.maintainers and xdg.configFile; and
# home.packages, which programs.nix-sandbox-mcp.agents sets.
{ lib, ... }:
let
  inherit (lib) mkOption types;
in
{
  options = {
    assertions = mkOption {
      type = types.listOf types.unspecified;
      default = [ ];
      description = "{ assertion, message } pairs; checkAssertions.nix throws the failed ones.";
    };
    meta.maintainers = mkOption {
      type = types.listOf types.raw;
      default = [ ];
      description = "Module maintainers (never evaluated here).";
    };
    home.packages = mkOption {
      type = types.listOf types.package;
      default = [ ];
      description = "Packages in the user's profile.";
    };
    xdg.configFile = mkOption {
      type = types.attrsOf (
        types.submodule {
          options.source = mkOption {
            type = types.path;
            description = "The file linked at ~/.config/NAME.";
          };
        }
      );
      default = { };
      description = "Files linked into ~/.config.";
    };
  };
}
