# Takes pkgs, jail.nix, mkServer's `packagesOnDemand` argument
#   { allow ? null, build ? false, timeoutSeconds ? 300 }
# and the server's sandboxes; returns { manifest }: for each environment
# that takes packages on demand, the manifest fields to add to it
# ({ packages_on_demand = { compose, allow, build, timeout_s }; }), by
# name; { } when `allow` is null (the default: off).
#
# `allow` is "any" or a list of nixpkgs attribute names and prefixes
# ending in `.` ("python3Packages."). An environment with
# extraCombinators takes none: its recipe (composeSandbox.nix) can only
# carry data, and the composed jail must not lose a permission.
{
  pkgs,
  jail-nix,
  packagesOnDemand,
  sandboxes,
}:
let
  inherit (pkgs) lib;
  known = [
    "allow"
    "build"
    "timeoutSeconds"
  ];
  settings = {
    allow = null;
    build = false;
    timeoutSeconds = 300;
  }
  // packagesOnDemand;
  unknown = builtins.attrNames (removeAttrs packagesOnDemand known);
  entry = builtins.match "[A-Za-z0-9_+-]+([.][A-Za-z0-9_+-]+)*[.]?";
  badEntries = lib.filter (e: !builtins.isString e || entry e == null) settings.allow;
  checked =
    if !builtins.isAttrs packagesOnDemand then
      throw "mkServer: `packagesOnDemand` must be an attribute set (got a ${builtins.typeOf packagesOnDemand})"
    else if unknown != [ ] then
      throw "mkServer: `packagesOnDemand` has unknown ${lib.concatStringsSep ", " unknown} (known: ${lib.concatStringsSep ", " known})"
    else if !(settings.allow == null || settings.allow == "any" || builtins.isList settings.allow) then
      throw "mkServer: `packagesOnDemand.allow` must be null, \"any\" or a list of attribute names and prefixes ending in `.`"
    else if builtins.isList settings.allow && badEntries != [ ] then
      throw "mkServer: `packagesOnDemand.allow` has ${builtins.toJSON (builtins.head badEntries)}, which is not an attribute name or a prefix ending in `.`"
    else if !builtins.isBool settings.build then
      throw "mkServer: `packagesOnDemand.build` must be true or false"
    else if !(builtins.isInt settings.timeoutSeconds && settings.timeoutSeconds > 0) then
      throw "mkServer: `packagesOnDemand.timeoutSeconds` must be a positive integer"
    else
      settings;

  combinators = (jail-nix.lib.init pkgs).combinators;
  composable =
    sandbox: (sandbox.sandbox.environment.extraCombinators combinators) == [ ];
  chosen = lib.filter composable sandboxes;

  inherit (import ./helperSources.nix pkgs "packagesOnDemand") source nixpkgs system;
  recipe =
    sandbox:
    let
      environment = sandbox.sandbox.environment;
    in
    pkgs.writeText "nix-sandbox-mcp-recipe-${environment.name}.json" (
      builtins.toJSON {
        # mkSandbox's arguments for this environment, its packages as
        # store paths: what composeSandbox.nix passes back, packages added.
        sandbox = {
          inherit (environment)
            name
            interpreter
            description
            limits
            network
            seccomp
            env
            ;
          packages = map (package: "${package}") environment.packages;
        };
        # What composeSandbox.nix holds a name under a prefix to.
        inherit (checked) allow;
        inherit source nixpkgs;
        jailNix = "${jail-nix}";
        inherit system;
      }
    );
  recipes = pkgs.runCommand "nix-sandbox-mcp-recipes" { } (
    "mkdir -p \"$out\"\n"
    + lib.concatMapStrings (
      sandbox: "ln -s ${recipe sandbox} \"$out/${sandbox.sandbox.name}.json\"\n"
    ) chosen
  );
  helper = pkgs.writeShellApplication {
    name = "nix-sandbox-mcp-compose";
    runtimeInputs = [
      pkgs.coreutils
      pkgs.gnugrep
      pkgs.gnused
    ];
    text = import ./composeHelper.nix {
      inherit recipes;
      inherit (checked) build;
    };
  };
in
{
  manifest = lib.optionalAttrs (checked.allow != null) (
    lib.listToAttrs (
      map (sandbox: {
        name = sandbox.sandbox.name;
        value.packages_on_demand = {
          compose = [ "${helper}/bin/nix-sandbox-mcp-compose" ];
          inherit (checked) allow build;
          timeout_s = checked.timeoutSeconds;
        };
      }) chosen
    )
  );
}
