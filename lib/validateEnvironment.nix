# Takes nixpkgs' lib and the arguments given to mkSandbox; returns them
# complete (defaults filled in, limits over defaultLimits.nix), or throws a
# message naming the environment and the argument that is wrong.
lib: args:
let
  defaultLimits = import ./defaultLimits.nix;
  interpreters = builtins.attrNames (import ./interpreters.nix);
  known = [
    "name"
    "interpreter"
    "packages"
    "description"
    "limits"
    "network"
    "extraCombinators"
    "env"
    "seccomp"
  ];
  namePattern = "[A-Za-z0-9][A-Za-z0-9_.-]{0,63}";
  show = value: if builtins.isString value then ''"${value}"'' else "a ${builtins.typeOf value}";

  name = args.name or null;
  label =
    if builtins.isString name then "mkSandbox: environment '${name}'" else "mkSandbox: an environment";
  limits = args.limits or { };
  env = args.env or { };
  packages = args.packages or null;

  # What `seccomp.allow` may name: the calls the filter denies or inspects.
  seccompCalls =
    let
      policy = import ./seccompPolicy.nix;
    in
    builtins.attrNames policy.deny ++ policy.denyNamespaces ++ builtins.attrNames policy.allowOnly;
  seccomp = args.seccomp or true;
  seccompAllow = if builtins.isAttrs seccomp then seccomp.allow or null else [ ];
  unknownCalls = lib.filter (call: !lib.elem call seccompCalls) (
    lib.filter builtins.isString seccompAllow
  );

  stringLike = v: builtins.isString v || builtins.isInt v || builtins.isPath v || lib.isDerivation v;
  isPositiveInt = v: builtins.isInt v && v > 0;

  # [ failed message ]; the first failure is thrown, in this order.
  checks = [
    [
      (!builtins.isAttrs args)
      "takes an attribute set (got ${show args})"
    ]
    [
      (removeAttrs args known != { })
      "has unknown arguments ${lib.concatStringsSep ", " (builtins.attrNames (removeAttrs args known))} (known: ${lib.concatStringsSep ", " known})"
    ]
    [
      (!builtins.isString name || builtins.match namePattern name == null)
      "argument `name` must be a string matching ${namePattern} (got ${if name == null then "nothing" else show name})"
    ]
    [
      (!lib.elem (args.interpreter or null) interpreters)
      "argument `interpreter` must be one of ${lib.concatStringsSep ", " interpreters} (got ${
        if args ? interpreter then show args.interpreter else "nothing"
      })"
    ]
    [
      (!builtins.isList packages || packages == [ ])
      "argument `packages` must be a non-empty list of packages (got ${
        if packages == null then "nothing" else show packages
      })"
    ]
    [
      (!lib.all lib.isDerivation packages)
      "argument `packages` must hold only packages (derivations)"
    ]
    [
      (args ? description && !builtins.isString args.description)
      "argument `description` must be a string (got ${show args.description})"
    ]
    [
      (!builtins.isAttrs limits)
      "argument `limits` must be an attribute set (got ${show limits})"
    ]
    [
      (removeAttrs limits (builtins.attrNames defaultLimits) != { })
      "argument `limits` has unknown limits ${
        lib.concatStringsSep ", " (builtins.attrNames (removeAttrs limits (builtins.attrNames defaultLimits)))
      } (known: ${lib.concatStringsSep ", " (builtins.attrNames defaultLimits)})"
    ]
  ]
  ++ lib.mapAttrsToList (limit: value: [
    (!isPositiveInt value)
    "argument `limits.${limit}` must be a positive integer (got ${
      if builtins.isInt value then toString value else show value
    })"
  ]) limits
  ++ [
    [
      (args ? network && !builtins.isBool args.network)
      "argument `network` must be true or false (got ${show args.network})"
    ]
    [
      (args ? extraCombinators && !builtins.isFunction args.extraCombinators)
      "argument `extraCombinators` must be a function from jail.nix's combinators to a list of permissions (got ${show args.extraCombinators})"
    ]
    [
      (!builtins.isAttrs env)
      "argument `env` must be an attribute set of variables (got ${show env})"
    ]
  ]
  ++ [
    [
      (
        !builtins.isBool seccomp
        && !(
          builtins.isAttrs seccomp
          && builtins.attrNames seccomp == [ "allow" ]
          && builtins.isList seccompAllow
          && lib.all builtins.isString seccompAllow
        )
      )
      "argument `seccomp` must be true, false or { allow = [ \"ptrace\" ]; } (system calls to let through; got ${show seccomp})"
    ]
    [
      (unknownCalls != [ ])
      "argument `seccomp.allow` names calls the filter does not deny: ${lib.concatStringsSep ", " unknownCalls} (it denies: ${lib.concatStringsSep ", " seccompCalls})"
    ]
  ]
  ++ lib.mapAttrsToList (var: value: [
    (!lib.isValidPosixName var || var == "PATH" || !stringLike value)
    (
      if var == "PATH" then
        "argument `env.PATH` cannot be set: PATH is made from `packages`"
      else if !lib.isValidPosixName var then
        "argument `env` has a variable name that is not a valid shell name: \"${var}\""
      else
        "argument `env.${var}` must be a string (got ${show value})"
    )
  ]) env;

  failure = lib.findFirst (check: lib.head check) null checks;
in
if failure != null then
  throw "${label}: ${lib.last failure}"
else
  {
    inherit name packages env;
    inherit (args) interpreter;
    description = args.description or (lib.concatMapStringsSep ", " (p: p.name) packages);
    limits = defaultLimits // limits;
    network = args.network or false;
    extraCombinators = args.extraCombinators or (_: [ ]);
    inherit seccomp;
  }
