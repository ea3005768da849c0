# Takes nixpkgs' lib, a package set, this checkout's library and
# home-manager's source; returns
# the offline harness's proof that lib.mkSandbox and the NixOS and
# home-manager modules take one environment schema: name -> { got, want },
# where got must equal want (as JSON). mkSandbox's arguments are
# `lib.functionArgs (mkSandbox pkgs)` (true: has a default), which its
# argument check holds it to (checks/eval/validation.nix); the modules' are the
# options of one programs.nix-sandbox-mcp.environments entry.
{
  lib,
  pkgs,
  sandboxLib,
  home-manager,
}:
let
  arguments = lib.functionArgs (sandboxLib.mkSandbox pkgs);
  # The modules evaluated as checks/eval/modules.nix does: home-manager's real
  # programs/mcp.nix and the stubs of the options they set.
  nixos =
    modules:
    lib.evalModules {
      modules = [
        ./nixosStubs.nix
        (import ../../modules/nixos.nix sandboxLib)
        { _module.args.pkgs = pkgs; }
      ]
      ++ modules;
    };
  home = (import "${home-manager}/modules/lib/stdlib-extended.nix" lib).evalModules {
    modules = [
      "${home-manager}/modules/programs/mcp.nix"
      ./homeManagerStubs.nix
      (import ../../modules/home-manager.nix sandboxLib)
      {
        _module.args.pkgs = pkgs // {
          formats.json = import ./jsonFormat.nix pkgs;
        };
      }
    ];
  };
  environmentOptions =
    evaluated:
    removeAttrs (evaluated.options.programs.nix-sandbox-mcp.environments.type.getSubOptions [ ]) [
      "_module"
    ];
  modules = {
    nixos = environmentOptions (nixos [ ]);
    home-manager = environmentOptions home;
  };

  # An environment setting every option, through the NixOS module, and what
  # mkSandbox gets of it in the server the module builds.
  every = {
    # `program` is set only with this interpreter.
    interpreter = "program";
    program = sandboxLib.languages.c;
    packages = [ pkgs.bash ];
    description = "every option set";
    limits.tmp_mb = 64;
    network = {
      allow = [
        {
          host = "pypi.org";
          port = 443;
          paths = [ "/simple/" ];
          methods = [ "GET" ];
          credentials = [ "TOKEN" ];
        }
      ];
      credentials.TOKEN = {
        fromFile = null;
        fromEnv = "TOKEN";
        headers = [ "Authorization" ];
      };
      caBundle = null;
    };
    seccomp.allow = [ "ptrace" ];
    publish = [ 8000 ];
    env.FOO = "bar";
    extraCombinators = c: [ (c.set-hostname "every") ];
  };
  configured =
    (nixos [
      {
        programs.nix-sandbox-mcp = {
          enable = true;
          environments = { inherit every; };
        };
      }
    ]).config.programs.nix-sandbox-mcp.finalPackage;
  received =
    (lib.findFirst (sandbox: sandbox.sandbox.name == "every") (throw "no sandbox named every")
      configured.sandboxes
    ).sandbox.environment;
in
{
  "schema: the NixOS module's environment options are mkSandbox's arguments and `enable`" = {
    got = builtins.attrNames modules.nixos;
    want = lib.sort lib.lessThan (builtins.attrNames arguments ++ [ "enable" ]);
  };
  "schema: the home-manager module's environment options are mkSandbox's arguments and `enable`" = {
    got = builtins.attrNames modules.home-manager;
    want = lib.sort lib.lessThan (builtins.attrNames arguments ++ [ "enable" ]);
  };
  "schema: the options with a default are mkSandbox's optional arguments, and `name` (the attribute name)" =
    {
      got = lib.mapAttrs (_: option: option ? default) (removeAttrs modules.nixos [ "enable" ]);
      want = arguments // {
        name = true;
      };
    };
  "schema: an environment setting every option through the module reaches mkSandbox whole" = {
    got = {
      set = builtins.attrNames ({ name = "every"; } // every);
      received = removeAttrs received [
        "packages"
        "extraCombinators"
        "limits"
      ];
      packages = map (package: package.name) received.packages;
      inherit (received.limits) tmp_mb timeout_s;
      extraCombinators = received.extraCombinators { set-hostname = name: "set-hostname ${name}"; };
    };
    want = {
      set = builtins.attrNames arguments;
      received = {
        name = "every";
        inherit (every)
          interpreter
          program
          description
          network
          publish
          ;
        seccomp.allow = [ "ptrace" ];
        env.FOO = "bar";
      };
      packages = [ pkgs.bash.name ];
      tmp_mb = 64;
      timeout_s = 30;
      extraCombinators = [ "set-hostname every" ];
    };
  };
}
