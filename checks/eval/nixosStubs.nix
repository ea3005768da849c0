# A module: the NixOS options that modules/nixos.nix sets or reads,
# declared as small as they can be (the real ones live in nixpkgs, which the
# offline harness cannot fetch): assertions, environment.systemPackages,
# nix.package, security.allowUserNamespaces and systemd.services.
{ lib, pkgs, ... }:
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
    environment.systemPackages = mkOption {
      type = types.listOf types.package;
      default = [ ];
      description = "Packages in the system profile.";
    };
    nix.package = mkOption {
      type = types.package;
      default = pkgs.writeText "nix-stub" "";
      description = "The Nix package of the system (a stand-in here).";
    };
    security.allowUserNamespaces = mkOption {
      type = types.bool;
      default = true;
      description = "Whether unprivileged processes may create user namespaces.";
    };
    systemd.services = mkOption {
      type = types.attrsOf (
        types.submodule {
          options = {
            description = mkOption { type = types.str; };
            wantedBy = mkOption {
              type = types.listOf types.str;
              default = [ ];
            };
            after = mkOption {
              type = types.listOf types.str;
              default = [ ];
            };
            environment = mkOption {
              type = types.attrsOf types.str;
              default = { };
            };
            path = mkOption {
              type = types.listOf types.package;
              default = [ ];
            };
            serviceConfig = mkOption {
              type = types.attrsOf (
                types.oneOf [
                  types.bool
                  types.int
                  types.str
                  (types.listOf types.str)
                ]
              );
              default = { };
            };
          };
        }
      );
      default = { };
      description = "systemd services.";
    };
  };
}
