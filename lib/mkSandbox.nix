# Takes jail.nix; returns mkSandbox, which takes pkgs and an environment,
# the options of environment.nix as arguments:
#   { name, interpreter (python | bash | node | program), program ? null,
#     packages, description ? ...,
#     limits ? { }, network ? false, seccomp ? true, env ? { },
#     extraCombinators ? (c: [ ]) }
# (`lib.functionArgs (mkSandbox pkgs)` lists them, true for those with a
# default), and returns the sandbox package: bin/sandbox-NAME, the
# interpreter in its jail (arguments passed through: a REPL on a terminal,
# -c, or a script on stdin; meta.mainProgram; for `interpreter = "program"`
# the program runner: a source on stdin built and run, or --shell, see
# programRunner.nix), bin/sandbox-NAME-session,
# the session agent in the same jail (sessionWrapper.nix), and
# share/nix-sandbox-mcp/manifest.json, its manifest (this one environment).
# A bad argument fails evaluation with one line naming the environment and
# the argument (evalEnvironment.nix).
{ jail-nix }:
pkgs:
let
  inherit (pkgs) lib;
  options = removeAttrs (lib.evalModules { modules = [ ./environment.nix ]; }).options [ "_module" ];
in
lib.setFunctionArgs (
  arguments:
  let
    environment = import ./evalEnvironment.nix lib arguments;
    inherit (environment) name;
    program = (import ./interpreters.nix).${environment.interpreter}.program;
    jail = jail-nix.lib.init pkgs;
    # A compiled language's builder and runner, else the interpreter.
    runner =
      if environment.interpreter == "program" then
        import ./programRunner.nix { inherit pkgs environment; }
      else
        null;
    entry =
      if runner != null then "${runner}/bin/sandbox-${name}-program" else "${profile}/bin/${program}";

    profile = pkgs.buildEnv {
      name = "sandbox-${name}-profile";
      paths = environment.packages;
    };
    policy = import ./jail { inherit pkgs environment profile; };
    run = jail "sandbox-${name}" entry (c: [ (policy c) ]);
    session = import ./sessionWrapper.nix {
      inherit
        pkgs
        jail
        environment
        profile
        policy
        runner
        ;
    };
    manifest = import ./manifestEntry.nix {
      inherit environment;
      storePath = placeholder "out";
      nixpkgsRev = lib.trivial.revisionWithDefault null;
    };
  in
  pkgs.runCommand "sandbox-${name}"
    {
      manifest = builtins.toJSON manifest;
      passAsFile = [ "manifest" ];
      passthru.sandbox = {
        inherit
          name
          environment
          profile
          policy
          run
          session
          ;
      };
      meta = {
        inherit (environment) description;
        mainProgram = "sandbox-${name}";
        platforms = lib.platforms.linux;
      };
    }
    ''
      ${pkgs.lib.optionalString (program != null) ''
        if [ ! -x ${profile}/bin/${program} ]; then
          echo "mkSandbox: environment '${name}': the ${environment.interpreter} interpreter needs ${program} in bin/ of one of its packages" >&2
          exit 1
        fi
      ''}
      mkdir -p "$out/bin" "$out/share/nix-sandbox-mcp"
      ln -s ${run}/bin/sandbox-${name} "$out/bin/sandbox-${name}"
      ln -s ${session}/bin/sandbox-${name}-session "$out/bin/sandbox-${name}-session"
      cp "$manifestPath" "$out/share/nix-sandbox-mcp/manifest.json"
    ''
) (lib.mapAttrs (_: option: option ? default) options)
