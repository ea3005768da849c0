# Takes jail.nix; returns mkServer, which takes pkgs and
#   { environments ? { }, presets ? [ ], launcher ? the workspace's launcher
#     built with pkgs, packagesOnDemand ? { }, projectEnvironment ? { },
#     profiles ? the built-in profiles }
# and returns the server package: bin/nix-sandbox-mcp (the launcher serving
# the merged manifest, plus NIX_SANDBOX_ENVS and NIX_SANDBOX_DIR at
# start-up; see serverScript.nix) and share/nix-sandbox-mcp/manifest.json.
# `environments` is a list, or an attribute set by name, of sandboxes
# (mkSandbox results) or mkSandbox arguments (in an attribute set, `name`
# defaults to the attribute's name). `presets` names environments of
# presets/optional.nix to serve besides (go, rust, java, c, cpp,
# network-tools). Names must be unique.
# `packagesOnDemand` ({ allow ? null, build ? false, timeoutSeconds ? 300 },
# packagesOnDemand.nix) lets a call add nixpkgs packages to its
# environment; off while `allow` is null. `projectEnvironment` ({ limits ? { },
# network ? false, timeoutSeconds ? 600 }, projectDevShell.nix) is the
# policy of the `project` environment the server builds from the project's
# dev shell when its owner turns it on (NIX_SANDBOX_PROJECT_DEVSHELL=1).
# `profiles` (by name; presets/profiles.nix by default, `{ }` for none)
# are the named settings a person applies to a session they make with
# `sandbox create --profile NAME`, each checked by profile.nix: the
# manifest's `profiles`.
{ jail-nix }:
pkgs:
{
  environments ? { },
  presets ? [ ],
  launcher ? pkgs.callPackage ../package.nix { },
  packagesOnDemand ? { },
  projectEnvironment ? { },
  profiles ? import ../presets/profiles.nix,
}:
let
  inherit (pkgs) lib;
  mkSandbox = import ./mkSandbox.nix { inherit jail-nix; };
  optionalPresets = import ../presets/optional.nix;
  unknownPresets = lib.filter (name: !(optionalPresets ? ${name})) presets;
  named =
    if !builtins.isList presets then
      throw "mkServer: `presets` must be a list of names (got a ${builtins.typeOf presets})"
    else if unknownPresets != [ ] then
      throw "mkServer: `presets` names ${lib.concatStringsSep ", " unknownPresets}, which is not a preset (known: ${lib.concatStringsSep ", " (builtins.attrNames optionalPresets)})"
    else
      map (name: mkSandbox pkgs (optionalPresets.${name} pkgs)) presets;
  toSandbox =
    name: environment:
    if lib.isDerivation environment then
      if environment ? sandbox then
        environment
      else
        throw "mkServer: environment ${name} is a package but not a sandbox made by mkSandbox"
    else
      mkSandbox pkgs environment;
  sandboxes =
    if builtins.isList environments then
      lib.imap1 (index: toSandbox "number ${toString index}") environments
    else if builtins.isAttrs environments then
      lib.mapAttrsToList (
        name: environment:
        toSandbox "'${name}'" (
          if builtins.isAttrs environment && !lib.isDerivation environment then
            { inherit name; } // environment
          else
            environment
        )
      ) environments
    else
      throw "mkServer: `environments` must be a list or an attribute set (got a ${builtins.typeOf environments})";
  names = map (sandbox: sandbox.sandbox.name) allSandboxes;
  duplicates = lib.unique (lib.filter (name: lib.count (other: other == name) names > 1) names);
  allSandboxes = sandboxes ++ named;
  checkedSandboxes =
    if allSandboxes == [ ] then
      throw "mkServer: `environments` and `presets` are empty"
    else if duplicates != [ ] then
      throw "mkServer: more than one environment is named ${lib.concatStringsSep ", " duplicates}"
    else
      allSandboxes;

  onDemand = import ./packagesOnDemand.nix {
    inherit pkgs jail-nix packagesOnDemand;
    sandboxes = checkedSandboxes;
  };
  devShell = import ./projectDevShell.nix { inherit pkgs jail-nix projectEnvironment; };
  checkedProfiles =
    if builtins.isAttrs profiles && !lib.isDerivation profiles then
      builtins.mapAttrs (import ./profile.nix lib) profiles
    else
      throw "mkServer: `profiles` must be an attribute set of profiles by name (got a ${builtins.typeOf profiles})";
  manifest =
    pkgs.runCommand "nix-sandbox-mcp-manifest.json"
      {
        nativeBuildInputs = [ pkgs.jq ];
        fragments = map (sandbox: "${sandbox}/share/nix-sandbox-mcp/manifest.json") checkedSandboxes;
        onDemand = builtins.toJSON onDemand.manifest;
        devShell = builtins.toJSON devShell.manifest;
        profiles = builtins.toJSON checkedProfiles;
        passAsFile = [
          "onDemand"
          "devShell"
          "profiles"
        ];
      }
      ''
        # shellcheck disable=SC2086 # store paths
        jq -s --slurpfile onDemand "$onDemandPath" --slurpfile devShell "$devShellPath" \
          --slurpfile profiles "$profilesPath" \
          '{version: 1, environments: (map(.environments) | add
            | with_entries(.value += ($onDemand[0][.key] // {}))),
            project_dev_shell: $devShell[0], profiles: $profiles[0]}' $fragments >"$out"
      '';
  script = pkgs.writeShellApplication {
    name = "nix-sandbox-mcp";
    runtimeInputs = [
      pkgs.coreutils
      pkgs.gnugrep
      pkgs.jq
    ];
    text = import ./serverScript.nix { inherit manifest launcher; };
  };
in
pkgs.runCommand "nix-sandbox-mcp-${launcher.version}"
  {
    passthru = {
      inherit manifest launcher;
      sandboxes = checkedSandboxes;
      # What packagesOnDemand adds to each environment's manifest entry.
      packagesOnDemand = onDemand.manifest;
      # The helper that builds the project's dev shell's environment.
      projectDevShell = devShell.helper;
      # The manifest's `profiles`: each profile's manifest form, by name.
      profiles = checkedProfiles;
    };
    meta = {
      description = "MCP server running code in Nix-built bubblewrap jails: ${lib.concatStringsSep ", " names}";
      mainProgram = "nix-sandbox-mcp";
      platforms = lib.platforms.linux;
    };
  }
  ''
    mkdir -p "$out/bin" "$out/share/nix-sandbox-mcp"
    ln -s ${script}/bin/nix-sandbox-mcp "$out/bin/nix-sandbox-mcp"
    ln -s ${manifest} "$out/share/nix-sandbox-mcp/manifest.json"
  ''
