# Takes nixpkgs' lib, then a profile's name and its attribute set
# ({ description, network ? null, packages ? true, project ? null,
# limits ? { } }); returns its manifest form (docs/contracts.md, contract 1,
# `profiles`): the same fields, every one present. A profile only tightens
# the environment of a session made with it (`sandbox create --profile`):
# `network` is null (the environment's own) or false (loopback only);
# `packages` false takes no added packages; `project` is null (as the server
# mounts it), "read-only" or "none"; `limits` lowers the environment's
# limits that a session can lower (the launcher takes the smaller of the
# two). The name is like an environment's. Anything else throws one
# `mkServer: profile NAME: ...` line.
lib: name: profile:
let
  fail = message: throw "mkServer: profile ${name}: ${message}";
  known = [
    "description"
    "network"
    "packages"
    "project"
    "limits"
  ];
  # The limits a session can lower: those the launcher holds, and those the
  # wrapper lowers at start (jail/sessionLimits.nix).
  lowerable = [
    "timeout_s"
    "max_timeout_s"
    "output_bytes"
    "memory_mb"
    "cpu_s"
    "file_mb"
    "nofile"
    "workspace_mb"
  ];
  # Built into the wrapper: the same for every session of the environment.
  fixed = [
    "pids"
    "tmp_mb"
  ];
  # A value as a message shows it.
  show =
    value:
    if builtins.isString value then
      builtins.toJSON value
    else if builtins.isBool value then
      lib.boolToString value
    else if builtins.isInt value then
      toString value
    else
      "a ${builtins.typeOf value}";
  unknown = lib.filter (field: !(builtins.elem field known)) (builtins.attrNames profile);
  description = profile.description or (fail "`description` is required (one line)");
  network = profile.network or null;
  packages = profile.packages or true;
  project = profile.project or null;
  limits = profile.limits or { };
  limit =
    key: value:
    if builtins.elem key fixed then
      fail "`limits.${key}` is built into the environment's wrapper and cannot be lowered per session: set it on the environment instead"
    else if !(builtins.elem key lowerable) then
      fail "`limits` has unknown limit ${key} (allowed: ${lib.concatStringsSep ", " lowerable})"
    else if !(builtins.isInt value) || value < 1 then
      fail "`limits.${key}` must be a positive integer (got ${show value})"
    else
      value;
in
# Named on the command line, as an environment is.
if builtins.match "[A-Za-z0-9][A-Za-z0-9_.-]{0,63}" name == null then
  fail "the name must match [A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
else if !(builtins.isAttrs profile) || lib.isDerivation profile then
  fail "must be an attribute set (got a ${builtins.typeOf profile})"
else if unknown != [ ] then
  fail "has unknown ${lib.concatStringsSep ", " unknown} (known: ${lib.concatStringsSep ", " known})"
else if !(builtins.isString description) || description == "" || lib.hasInfix "\n" description then
  fail "`description` must be one line of text"
else if network != null && network != false then
  fail "`network` must be null (the environment's own) or false (no network): a profile cannot open the network (got ${show network})"
else if !(builtins.isBool packages) then
  fail "`packages` must be true or false (got ${show packages})"
else if
  !(builtins.elem project [
    null
    "read-only"
    "none"
  ])
then
  fail "`project` must be null, \"read-only\" or \"none\" (got ${show project})"
else if !(builtins.isAttrs limits) then
  fail "`limits` must be an attribute set of limits (got a ${builtins.typeOf limits})"
else
  {
    inherit
      description
      network
      packages
      project
      ;
    limits = builtins.mapAttrs limit limits;
  }
