# Takes the flake's library (mkSandbox, mkServer, presets); returns the
# module shared by the NixOS and home-manager modules: the options
# programs.nix-sandbox-mcp.{enable, package, environments, finalPackage}.
# The bundled presets are definitions of `environments` at mkDefault
# priority: a user's definition of a field replaces the preset's, and
# `environments.NAME.enable = false` drops one. `presets` names the
# optional presets (presets/optional.nix) to define the same way, so that
# their fields can be set too. packagesOnDemand is
# mkServer's argument of that name. `profiles` is mkServer's too: the
# built-in profiles (presets/profiles.nix) are its definitions at mkDefault
# priority, field by field and limit by limit, as the presets are of
# `environments`.
# finalPackage is the server (lib.mkServer) of every enabled environment,
# built with the module's pkgs.
sandboxLib:
{
  config,
  lib,
  pkgs,
  ...
}:
let
  inherit (lib) mkOption types literalExpression;
  cfg = config.programs.nix-sandbox-mcp;
  enabled = lib.filterAttrs (_: environment: environment.enable) cfg.environments;
  # One environment's options are lib.mkSandbox's arguments, and `enable`.
  toArguments = environment: removeAttrs environment [ "enable" ];
in
{
  _file = ./program.nix;

  options.programs.nix-sandbox-mcp = {
    enable = lib.mkEnableOption "nix-sandbox-mcp, sandboxed code execution for LLM agents over MCP";

    package = mkOption {
      type = types.package;
      default = pkgs.callPackage ../package.nix { };
      defaultText = literalExpression "nix-sandbox-mcp's launcher, built with pkgs";
      description = "The launcher (the MCP server binary) the server package runs.";
    };

    environments = mkOption {
      type = types.attrsOf (import ./environmentType.nix lib);
      default = { };
      description = ''
        The environments the server offers, by name, each with
        `lib.mkSandbox`'s arguments as its options. The bundled presets
        `python`, `shell` and `node` are defined already; setting a field of
        one replaces the preset's value, and `enable = false` drops it.
      '';
      example = literalExpression ''
        {
          data-science = {
            interpreter = "python";
            description = "Python with numpy, pandas and matplotlib";
            packages = [ (pkgs.python3.withPackages (ps: [ ps.numpy ps.pandas ps.matplotlib ])) ];
            limits.memory_mb = 4096;
          };
          node.enable = false;
        }
      '';
    };

    presets = mkOption {
      type = types.listOf (types.enum (builtins.attrNames sandboxLib.optionalPresets));
      default = [ ];
      description = ''
        Environments served only when named here, besides the bundled
        `python`, `shell` and `node`: `go`, `rust`, `java`, `c`, `cpp` (the
        code is one source file, built and run; a session keeps the build
        cache) and `network-tools` (curl, dig, nc, openssl, ip; its network
        a policy that allows no host until
        `environments.network-tools.network.allow` names some). Each is
        defined in {option}`environments` like a bundled preset: its
        fields can be set there.
      '';
      example = [
        "go"
        "rust"
      ];
    };

    packagesOnDemand = {
      allow = mkOption {
        type = types.nullOr (
          types.either (types.enum [ "any" ]) (
            types.listOf (types.strMatching "[A-Za-z0-9_+-]+([.][A-Za-z0-9_+-]+)*[.]?")
          )
        );
        default = null;
        description = ''
          Which nixpkgs packages a `run` call may add to its environment
          (its `packages` argument): null (off), `"any"`, or a list of
          attribute names and of prefixes ending in `.`. The packages come
          from the server's own nixpkgs; names are checked by the server
          before anything is evaluated and reach Nix only as data.
        '';
        example = [
          "jq"
          "ffmpeg"
          "python3Packages."
        ];
      };
      build = mkOption {
        type = types.bool;
        default = false;
        description = ''
          Whether Nix may build a package from source when the binary
          cache does not have it; off, such a call is refused and the
          server only substitutes (`--max-jobs 0`).
        '';
        example = true;
      };
      timeoutSeconds = mkOption {
        type = types.ints.positive;
        default = 300;
        description = "How long getting a call's packages may take before it is stopped and refused.";
        example = 900;
      };
    };

    profiles = mkOption {
      type = types.attrsOf (types.attrsOf types.anything);
      defaultText = literalExpression "the built-in profiles strict, offline-review and build-install (nix-sandbox-mcp.lib.profiles)";
      description = ''
        Named settings a person applies to a session they make with
        `nix-sandbox-mcp sandbox create --profile NAME ENV`, each of which
        only tightens the environment: `description` (one line, required),
        `network` (null: the environment's own; false: loopback only),
        `packages` (false: no packages added on demand), `project` (null:
        as the server mounts it; `"read-only"`; `"none"`) and `limits`
        (`timeout_s`, `max_timeout_s`, `output_bytes`, `memory_mb`,
        `cpu_s`, `file_mb`, `nofile`, `workspace_mb`; the session gets the
        smaller of the environment's value and the profile's). The built-in
        `strict`, `offline-review` and `build-install` are defined already:
        setting a field of one, or one of its limits, replaces that value,
        and `profiles = lib.mkForce { }` serves none.
      '';
      example = literalExpression ''
        {
          review-small = {
            description = "Reads the project, no network, half a GiB";
            network = false;
            project = "read-only";
            limits.memory_mb = 512;
          };
          strict.limits.cpu_s = 30;
        }
      '';
    };

    finalPackage = mkOption {
      type = types.package;
      readOnly = true;
      description = "The server package: bin/nix-sandbox-mcp serving every enabled environment.";
    };
  };

  config.programs.nix-sandbox-mcp = {
    environments = lib.mapAttrs (_: preset: lib.mapAttrs (_: lib.mkDefault) (preset pkgs)) (
      sandboxLib.presets // lib.getAttrs cfg.presets sandboxLib.optionalPresets
    );
    # Field by field, and limit by limit: setting one keeps the rest.
    profiles = lib.mapAttrs (
      _:
      lib.mapAttrs (
        field: value: if field == "limits" then lib.mapAttrs (_: lib.mkDefault) value else lib.mkDefault value
      )
    ) sandboxLib.profiles;
    finalPackage = sandboxLib.mkServer pkgs {
      environments = lib.mapAttrs (_: toArguments) enabled;
      launcher = cfg.package;
      inherit (cfg) packagesOnDemand profiles;
    };
  };
}
