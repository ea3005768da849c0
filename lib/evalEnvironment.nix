# Takes nixpkgs' lib and the arguments given to mkSandbox; returns the
# environment: environment.nix's options evaluated with lib.evalModules
# from those arguments (every default filled in). A wrong argument throws
# one line naming the environment, the argument and what it must be, found
# from the options themselves (their names, their types, which have a
# default), so the check cannot disagree with the schema; then the rules no
# option type says (`env` names, `seccomp.allow` calls) are checked on the
# evaluated environment.
lib: arguments:
let
  options = removeAttrs (lib.evalModules { modules = [ ./environment.nix ]; }).options [ "_module" ];
  known = builtins.attrNames options;
  seccompRules = import ./seccompRules.nix;
  # What `seccomp.allow` may name: the calls the filter denies or holds,
  # and the socket families and protocols it does not open.
  seccompCalls =
    builtins.attrNames seccompRules.deny
    ++ seccompRules.denyNamespaces
    ++ builtins.attrNames seccompRules.allowOnly
    ++ seccompRules.sockets.calls
    ++ lib.subtractLists (
      seccompRules.sockets.families ++ lib.concatLists (builtins.attrValues seccompRules.sockets.protocols)
    ) (builtins.attrNames seccompRules.sockets.numbers);

  show =
    value:
    if builtins.isString value then
      ''"${value}"''
    else if builtins.isInt value then
      toString value
    else
      "a ${builtins.typeOf value}";
  article = noun: if builtins.match "[aeiou].*" noun != null then "an ${noun}" else "a ${noun}";
  # What a value of `type` is, as the end of "must be ...".
  phrase =
    type:
    if type.name == "bool" then
      "true or false"
    else if type.name == "enum" then
      "one of ${lib.concatMapStringsSep ", " toString (type.functor.payload.values or type.functor.payload)}"
    else if type.name == "positiveInt" then
      "a positive integer"
    else if type.name == "str" then
      "a string"
    else if type.name == "package" then
      "a package"
    else if type.name == "submodule" then
      "an attribute set"
    else if type.name == "either" then
      type.description
    else if type.name == "coercedTo" then
      phrase type.nestedTypes.finalType
    else if type.name == "attrsOf" then
      "an attribute set of ${plural type.nestedTypes.elemType}"
    else if type.name == "listOf" then
      # nonEmptyListOf is a listOf that refuses [ ].
      "${if type.check [ ] then "a" else "a non-empty"} list of ${plural type.nestedTypes.elemType}"
    else
      article type.description;
  plural =
    type:
    if type.name == "coercedTo" then
      plural type.nestedTypes.finalType
    else
      {
        package = "packages";
        str = "strings";
      }
      .${type.name} or "${type.description} values";

  # What is wrong with `value` as a value of `type` at `path` (the argument's
  # attribute path), one sentence a problem; [ ] when nothing is.
  problems =
    path: type: value:
    let
      argument = "argument `${lib.concatStringsSep "." path}`";
      wrong = [ "${argument} must be ${phrase type} (got ${show value})" ];
    in
    if type.name == "either" then
      let
        right = problems path type.nestedTypes.right value;
      in
      if problems path type.nestedTypes.left value == [ ] || right == [ ] then
        [ ]
      # An attribute set for an option that may be a submodule: what is
      # wrong inside it says more than the option's type.
      else if builtins.isAttrs value && type.nestedTypes.right.name == "submodule" then
        right
      else
        wrong
    else if type.name == "nullOr" then
      if value == null then [ ] else problems path type.nestedTypes.elemType value
    else if type.name == "submodule" then
      let
        subOptions = removeAttrs (type.getSubOptions [ ]) [ "_module" ];
        unknown = builtins.attrNames (removeAttrs value (builtins.attrNames subOptions));
      in
      if !builtins.isAttrs value then
        wrong
      else if unknown != [ ] then
        [
          "${argument} has unknown ${lib.last path} ${lib.concatStringsSep ", " unknown} (known: ${lib.concatStringsSep ", " (builtins.attrNames subOptions)})"
        ]
      else
        lib.concatLists (lib.mapAttrsToList (name: problems (path ++ [ name ]) subOptions.${name}.type) value)
    else if !type.check value then
      wrong
    else if type.name == "listOf" then
      lib.concatMap (
        element:
        let
          inside = problems path type.nestedTypes.elemType element;
        in
        if inside == [ ] then
          [ ]
        else if type.nestedTypes.elemType.name == "submodule" && builtins.isAttrs element then
          inside
        else
          [ "${argument} must hold only ${plural type.nestedTypes.elemType} (got ${show element})" ]
      ) value
    else if type.name == "attrsOf" then
      lib.concatLists (
        lib.mapAttrsToList (name: problems (path ++ [ name ]) type.nestedTypes.elemType) value
      )
    else
      [ ];

  # The arguments' problems, `name` first: it names the environment.
  typeProblems = lib.concatMap (
    name:
    if arguments ? ${name} then
      problems [ name ] options.${name}.type arguments.${name}
    else if options.${name} ? default then
      [ ]
    else
      [ "argument `${name}` must be ${phrase options.${name}.type} (got nothing)" ]
  ) ([ "name" ] ++ lib.remove "name" known);

  environment =
    (lib.evalModules {
      modules = [
        ./environment.nix
        {
          _file = "mkSandbox's arguments";
          config = arguments;
        }
      ];
    }).config;

  unknownCalls = lib.filter (call: !lib.elem call seccompCalls) (environment.seccomp.allow or [ ]);
  policy = if builtins.isAttrs environment.network then environment.network else null;
  credentials = if policy == null then { } else policy.credentials;
  networkProblems =
    if policy == null then
      [ ]
    else
      map (var: "argument `network.credentials` has a name that is not a valid shell variable name: \"${var}\"") (
        lib.filter (var: !lib.isValidPosixName var) (builtins.attrNames credentials)
      )
      ++ lib.concatLists (
        lib.mapAttrsToList (
          var: credential:
          lib.optional ((credential.fromFile == null) == (credential.fromEnv == null))
            "argument `network.credentials.${var}` needs exactly one of fromFile and fromEnv"
          ++ lib.optional (
            credential.fromFile != null && lib.hasPrefix builtins.storeDir credential.fromFile
          ) "argument `network.credentials.${var}.fromFile` is in the Nix store, readable by every user: keep the secret outside it"
        ) credentials
      )
      ++ lib.concatMap (
        rule:
        map (
          var: "argument `network.allow` names credential \"${var}\", which `network.credentials` does not define"
        ) (lib.filter (var: !(credentials ? ${var})) rule.credentials)
      ) policy.allow;
  ruleProblems =
    lib.optional (environment.env ? PATH) "argument `env.PATH` cannot be set: PATH is made from `packages`"
    ++ lib.optional (
      environment.interpreter == "program" && environment.program == null
    ) "argument `program` must be set when `interpreter` is \"program\" (the language's file, build and run, e.g. lib.languages.go)"
    ++ lib.optional (
      environment.interpreter != "program" && environment.program != null
    ) "argument `program` is only for `interpreter = \"program\"` (got interpreter \"${environment.interpreter}\")"
    ++ map (var: "argument `env` has a variable name that is not a valid shell name: \"${var}\"") (
      lib.filter (var: !lib.isValidPosixName var) (builtins.attrNames environment.env)
    )
    ++ lib.optional (unknownCalls != [ ])
      "argument `seccomp.allow` names calls, socket families or protocols the filter does not refuse: ${lib.concatStringsSep ", " unknownCalls} (it refuses: ${lib.concatStringsSep ", " seccompCalls})"
    ++ networkProblems
    ++ lib.optional (
      environment.network == true && environment.publish != [ ]
    ) "argument `publish` is not for `network = true`: the jail's ports are the host's already (use network = false or a policy)"
    ++ lib.optional (
      policy != null && lib.elem (import ./egress.nix).port environment.publish
    ) "argument `publish` names ${toString (import ./egress.nix).port}, the jail's egress proxy: publish another port";

  failures =
    if !builtins.isAttrs arguments then
      [ "takes an attribute set (got ${show arguments})" ]
    else if removeAttrs arguments known != { } then
      [
        "has unknown arguments ${lib.concatStringsSep ", " (builtins.attrNames (removeAttrs arguments known))} (known: ${lib.concatStringsSep ", " known})"
      ]
    else if typeProblems != [ ] then
      typeProblems
    else
      ruleProblems;
  label =
    if builtins.isString (arguments.name or null) then
      "mkSandbox: environment '${arguments.name}'"
    else
      "mkSandbox: an environment";
in
if failures != [ ] then throw "${label}: ${lib.head failures}" else environment
