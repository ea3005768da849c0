# Takes nixpkgs' lib; returns the option type of one environment of
# programs.nix-sandbox-mcp.environments: lib.mkSandbox's arguments as
# options (the attribute name is the default `name`), plus `enable`, so a
# bundled preset can be switched off.
lib:
let
  inherit (lib) mkOption types literalExpression;
  limitNames = builtins.attrNames (import ../lib/defaultLimits.nix);
in
types.submodule (
  { name, ... }:
  {
    options = {
      enable = mkOption {
        type = types.bool;
        default = true;
        description = "Whether to serve this environment. Set it to `false` to drop a bundled preset.";
        example = false;
      };
      name = mkOption {
        type = types.strMatching "[A-Za-z0-9][A-Za-z0-9_.-]{0,63}";
        default = name;
        defaultText = literalExpression "<the attribute name>";
        description = "The environment's name, as the model passes it to `run` (`env`).";
        example = "data-science";
      };
      interpreter = mkOption {
        type = types.enum [
          "python"
          "bash"
          "node"
        ];
        description = "What runs the code: `python` (python3), `bash` or `node`, found in `packages`.";
        example = "python";
      };
      packages = mkOption {
        type = types.nonEmptyListOf types.package;
        description = "The packages visible in the jail; one of them provides the interpreter.";
        example = literalExpression "[ (pkgs.python3.withPackages (ps: [ ps.numpy ps.pandas ])) ]";
      };
      description = mkOption {
        type = types.nullOr types.str;
        default = null;
        description = "One line the model reads about this environment; the package names when null.";
        example = "Python with numpy and pandas";
      };
      limits = mkOption {
        type = types.submodule {
          options = lib.genAttrs limitNames (
            limit:
            mkOption {
              type = types.nullOr types.ints.positive;
              default = null;
              description = "The `${limit}` limit; the built-in default when null.";
            }
          );
        };
        default = { };
        description = ''
          Limits of one run (`timeout_s`, `cpu_s` in seconds; `memory_mb`,
          `workspace_mb`, `tmp_mb`, `file_mb` in MiB; `pids`, `nofile`,
          `output_bytes`); unset ones keep the built-in defaults.
        '';
        example = {
          timeout_s = 120;
          memory_mb = 4096;
        };
      };
      network = mkOption {
        type = types.bool;
        default = false;
        description = "Whether code in this environment can reach the network.";
        example = true;
      };
      env = mkOption {
        type = types.attrsOf types.str;
        default = { };
        description = "Environment variables set in the jail.";
        example = {
          MPLBACKEND = "Agg";
        };
      };
      extraCombinators = mkOption {
        type = types.functionTo (types.listOf types.raw);
        default = _: [ ];
        defaultText = literalExpression "c: [ ]";
        description = "More jail.nix permissions: a function from jail.nix's combinators to a list of them.";
        example = literalExpression ''c: [ (c.ro-bind "/etc/ssl" "/etc/ssl") ]'';
      };
    };
  }
)
