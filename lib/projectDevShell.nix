# Takes pkgs, jail.nix and mkServer's `projectEnvironment` argument
#   { limits ? { }, network ? false, timeoutSeconds ? 600 }
# (limits and network as an environment's, environment.nix); returns
# { manifest, helper }: the manifest's top-level `project_dev_shell` field,
# { helper, timeout_s, environment }, which a server started with
# NIX_SANDBOX_PROJECT_DEVSHELL=1 and a PROJECT_DIR holding flake.nix
# offers as the environment `project` (`environment`: its manifest entry
# but wrappers, which the helper's build has), built by `helper`
# (devShellHelper.nix) from the project's dev shell.
{
  pkgs,
  jail-nix,
  projectEnvironment,
}:
let
  inherit (pkgs) lib;
  known = [
    "limits"
    "network"
    "timeoutSeconds"
  ];
  unknown = builtins.attrNames (removeAttrs projectEnvironment known);
  settings = {
    timeoutSeconds = 600;
  }
  // projectEnvironment;
  checked =
    if !builtins.isAttrs projectEnvironment then
      throw "mkServer: `projectEnvironment` must be an attribute set (got a ${builtins.typeOf projectEnvironment})"
    else if unknown != [ ] then
      throw "mkServer: `projectEnvironment` has unknown ${lib.concatStringsSep ", " unknown} (known: ${lib.concatStringsSep ", " known})"
    else if !(builtins.isInt settings.timeoutSeconds && settings.timeoutSeconds > 0) then
      throw "mkServer: `projectEnvironment.timeoutSeconds` must be a positive integer"
    else
      settings;
  description = "The project's own dev shell (its flake's devShells.default): its tools and variables, built on first use.";
  environment = import ./evalEnvironment.nix lib (
    {
      name = "project";
      interpreter = "bash";
      # Checked only: the packages are the dev shell's.
      packages = [ pkgs.bash ];
      inherit description;
    }
    // removeAttrs checked [ "timeoutSeconds" ]
  );
  entry = import ./manifestEntry.nix {
    inherit environment;
    storePath = "";
    nixpkgsRev = null;
  };
  inherit (import ./helperSources.nix pkgs "projectEnvironment") source nixpkgs system;
  recipe = pkgs.writeText "nix-sandbox-mcp-recipe-project.json" (
    builtins.toJSON {
      sandbox = {
        inherit (environment)
          name
          interpreter
          description
          limits
          network
          seccomp
          ;
      };
      inherit source nixpkgs system;
      jailNix = "${jail-nix}";
    }
  );
  helper = pkgs.writeShellApplication {
    name = "nix-sandbox-mcp-devshell";
    runtimeInputs = [
      pkgs.coreutils
      pkgs.gnugrep
    ];
    text = import ./devShellHelper.nix { inherit recipe system; };
  };
in
{
  inherit helper;
  manifest = {
    helper = [ "${helper}/bin/nix-sandbox-mcp-devshell" ];
    timeout_s = checked.timeoutSeconds;
    environment = {
      inherit (entry.environments.project) description limits network;
    };
  };
}
