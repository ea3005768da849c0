# Takes { recipe, request }, the paths of two JSON files, as strings: the
# compose helper (composeHelper.nix) passes them with --argstr. `recipe`
# is one environment of a server as mkServer wrote it at build time
# (`sandbox`: mkSandbox's arguments, its packages as store paths; the store
# paths of the server's nixpkgs, jail.nix and this flake's source);
# `request` is the list of nixpkgs attribute names a call asks for, which
# the launcher has checked already (attribute paths, the allowlist: a
# name under a prefix is one attribute past it).
# Returns a list: mkSandbox of that environment with those packages added
# (on its PATH, and for a Python environment python3Packages.* on the
# interpreter's module path, PYTHONPATH, so the jail's closure gains
# them), then the packages asked for, which the helper realises first,
# from the binary cache only when building is off.
# The names are data, looked up with lib.attrByPath: no text of theirs is
# ever evaluated. A name that is not a package throws
# `nix-sandbox-mcp-compose: unknown NAME`, with close names when there
# are any; a name an allowlist prefix (the recipe's `allow`) lets in that
# is not a package of that scope throws `nix-sandbox-mcp-compose: outside
# NAME WHY`: the helper turns either into one line for the model.
#
# What a prefix allows (README.md, "Packages on demand"): an attribute
# directly in its scope that is a package of it. Not a package set, a
# scope or a function (`python3Packages.pkgs`, the whole package set, as
# python-packages-base.nix inherits it; `pythonPackages`, `lib`,
# `callPackage`), not the build environment scopes carry (`stdenv`,
# `stdenvNoCC`: derivations, but the compiler toolchain, not a package of
# the scope), and under a Python package set (one with `pythonPackages`
# and `hasPythonModule`, as nixpkgs makes them) only what nixpkgs itself
# counts as its member, a Python module of it (`hasPythonModule`, which
# nixpkgs' ensurePythonModules demands of every derivation in the set but
# stdenv and setup hooks).
{ recipe, request }:
let
  # The recipe is a store path: its text carries that path as context,
  # which fromJSON refuses. The paths in it are taken up again below.
  environment = builtins.fromJSON (builtins.unsafeDiscardStringContext (builtins.readFile recipe));
  names = builtins.fromJSON (builtins.readFile request);
  inherit (import (environment.source + "/lib/recipeContext.nix") environment) pkgs lib mkSandbox;

  # Again here, so that this file is safe to call on its own.
  attributePath = name: builtins.match "[A-Za-z0-9_+-]+([.][A-Za-z0-9_+-]+)*" name != null;
  # Up to three names next to the last part of `path` that are at most two
  # edits away from it.
  closeNames =
    path:
    let
      parent = builtins.tryEval (lib.attrByPath (lib.init path) { } pkgs);
      candidates = if parent.success && builtins.isAttrs parent.value then builtins.attrNames parent.value else [ ];
      prefix = lib.concatMapStrings (part: "${part}.") (lib.init path);
      close = lib.filter (lib.strings.levenshteinAtMost 2 (lib.last path)) candidates;
    in
    map (name: prefix + name) (lib.take 3 close);
  unknown =
    name: path:
    let
      close = closeNames path;
    in
    throw "nix-sandbox-mcp-compose: unknown ${name}${
      lib.optionalString (close != [ ]) " (close: ${lib.concatStringsSep ", " close})"
    }";
  outside = name: why: throw "nix-sandbox-mcp-compose: outside ${name} ${why}";
  # The allowlist prefix `name` is directly under, or null.
  prefixOf =
    name:
    if environment.allow == "any" then
      null
    else
      lib.findFirst (
        entry:
        lib.hasSuffix "." entry
        && lib.hasPrefix entry name
        && !lib.hasInfix "." (lib.removePrefix entry name)
      ) null environment.allow;
  allowed = name: environment.allow == "any" || builtins.elem name environment.allow;
  # Why `value`, found at `path` under an allowlist prefix, is not a
  # package of that scope; null when it is.
  notInScope =
    path: value:
    let
      scope = lib.attrByPath (lib.init path) { } pkgs;
      python = scope ? pythonPackages && scope ? hasPythonModule;
      member = builtins.tryEval (scope.hasPythonModule value);
    in
    if !lib.isDerivation value then
      "is not a package (a set of packages, a scope or a function)"
    else if builtins.elem (lib.last path) [
      "stdenv"
      "stdenvNoCC"
    ] then
      "is the build environment its scope carries, not a package of it"
    else if python && !(member.success && member.value == true) then
      "is not a Python module of ${lib.concatStringsSep "." (lib.init path)}"
    else
      null;
  lookup =
    name:
    let
      path = lib.splitString "." name;
      found = builtins.tryEval (lib.attrByPath path null pkgs);
      prefix = prefixOf name;
      why = notInScope path found.value;
    in
    if !builtins.isString name || !attributePath name then
      throw "nix-sandbox-mcp-compose: unknown ${builtins.toJSON name}"
    else if !allowed name && prefix == null then
      outside name "is not in this server's allowlist"
    else if !found.success || found.value == null then
      unknown name path
    else if !allowed name && why != null then
      outside name why
    else if !lib.isDerivation found.value then
      throw "nix-sandbox-mcp-compose: unknown ${name} (a set of packages, not a package: name one in it)"
    else
      found.value;
  requested = map lookup names;

  # Python modules go on the module path too; every package goes into the
  # profile, whose runtime closure is what the jail mounts.
  inherit (environment) sandbox;
  python = sandbox.interpreter == "python";
  modules = lib.filter (package: python && package ? pythonModule) requested;
  pythonPath = lib.concatStringsSep ":" (
    lib.optional (modules != [ ]) (pkgs.python3Packages.makePythonPath modules)
    ++ lib.optional (sandbox.env ? PYTHONPATH) sandbox.env.PYTHONPATH
  );
in
[
  (mkSandbox pkgs (
    sandbox
    // {
      packages = map lib.toDerivation sandbox.packages ++ requested;
      env = sandbox.env // lib.optionalAttrs (modules != [ ]) { PYTHONPATH = pythonPath; };
    }
  ))
]
++ requested
