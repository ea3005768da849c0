# Takes nixpkgs' lib, the host facts (host.json, written by checks/run) and
# the system; returns the package set standing in for nixpkgs' legacyPackages:
# the host's tools (tools.nix) under nixpkgs' names and its Python modules
# (pythonPackages.nix, with python3.withPackages), each a store closure of
# the host's files patched to load from the store (hostTool.nix), and the
# few builders the flake and jail.nix call, as plain derivations built by
# the host's /bin/bash.
{
  lib,
  host,
  system ? "x86_64-linux",
}:
lib.fix (
  self:
  let
    tools = import ./tools.nix;
    # A hostTool.nix of the given glibc and shell; entries name their inputs.
    hostToolWith =
      closure: entry:
      import ./hostTool.nix ({ inherit lib system host; } // closure) (
        entry // { inputs = lib.genAttrs (entry.inputs or [ ]) (name: self.${name}); }
      );
    hostTool = hostToolWith { inherit (self) glibc; shell = self.bash; };
    pythonVersion = lib.versions.majorMinor self.python3.version;
  in
  lib.mapAttrs (pname: tool: hostTool (tool // { inherit pname; })) (
    removeAttrs tools [
      "glibc"
      "bash"
    ]
  )
  // {
    inherit lib system;
    # glibc is its own loader; bash is the others' #! shell.
    glibc = hostToolWith {
      glibc = null;
      shell = null;
    } (tools.glibc // { pname = "glibc"; });
    bash = hostToolWith {
      inherit (self) glibc;
      shell = null;
    } (tools.bash // { pname = "bash"; });
    # The host's Python modules, named like nixpkgs' (python3.11-numpy-1.24.2),
    # compiled as python3's standard library is, each with nixpkgs'
    # `pythonModule` (the Python it is for), in a scope made as nixpkgs
    # makes its Python package sets (makeScopeWithSplicing' over
    # python-packages-base.nix): besides the modules it carries lib, pkgs
    # (the whole package set), stdenv, python (the interpreter as a
    # module), pythonPackages (the scope itself), hasPythonModule,
    # makePythonPath, a setup hook, and the scope's callPackage, newScope,
    # overrideScope and packages; packages on demand must not reach out of
    # it through them.
    python3Packages = lib.makeScope self.newScope (
      ps:
      lib.mapAttrs (
        name: module:
        hostTool (
          module
          // {
            pname = "python${pythonVersion}-${name}";
            inputs = [ "python3" ] ++ module.inputs or [ ];
            programs = [ self.python3 ];
            postInstall = (module.postInstall or "") + ''
              "$python3/bin/python3" -m compileall -q -j 0 --invalidation-mode unchecked-hash \
                "$out/lib/python3/dist-packages"
            '';
          }
        )
        // {
          pythonModule = self.python3;
          propagatedPythonPackages = map (name: ps.${name}) (module.propagated or [ ]);
        }
      ) (import ./pythonPackages.nix)
      // {
        inherit lib;
        inherit (self) pkgs stdenv;
        python = self.python3 // {
          pythonModule = self.python3;
        };
        pythonPackages = ps;
        hasPythonModule = drv: drv ? pythonModule && drv.pythonModule == self.python3;
        # A setup hook, as nixpkgs' Python package sets carry them
        # (pythonImportsCheckHook and others): a derivation in the set that
        # is not a Python module.
        pythonImportsCheckHook = self.runCommand "python-imports-check-hook.sh" { } ''
          echo "# hostpkgs stands in for nixpkgs' hook: nothing here runs it" >"$out"
        '';
        # nixpkgs' makePythonPath: the module path of modules and what they
        # propagate.
        makePythonPath =
          modules:
          let
            entry = module: {
              key = module.name;
              inherit module;
            };
          in
          lib.concatMapStringsSep ":" (item: "${item.module}/lib/python3/dist-packages") (
            builtins.genericClosure {
              startSet = map entry modules;
              operator = item: map entry (item.module.propagatedPythonPackages or [ ]);
            }
          );
      }
    );
    python3 = hostTool (tools.python3 // { pname = "python3"; }) // {
      # As nixpkgs' python3.pkgs: its package set.
      pkgs = self.python3Packages;
      withPackages =
        select:
        import ./pythonEnv.nix {
          inherit lib;
          inherit (self) buildEnv;
          python3 = removeAttrs self.python3 [ "withPackages" ];
        } (select self.python3Packages);
    };
    # Packages whose derivation is new in each test run that asks: their
    # `hostpkgsTestRun` is $HOSTPKGS_TEST_RUN of the evaluation (the
    # compose helper's, which the server passes on; empty in a flake's
    # pure evaluation), so that what the store already holds decides
    # nothing (checks/e2e/packages.py). `hello`: what a package missing from
    # the binary cache gets. `slowBuild`: a build that outlasts any test,
    # which a timeout must stop with every process it started.
    hello =
      self.runCommand "hello-2.12.1"
        {
          meta.mainProgram = "hello";
          hostpkgsTestRun = builtins.getEnv "HOSTPKGS_TEST_RUN";
        }
        ''
          mkdir -p "$out/bin"
          printf '#!${self.bash}/bin/sh\necho "Hello, world!"\n' >"$out/bin/hello"
          chmod +x "$out/bin/hello"
        '';
    slowBuild = self.runCommand "slow-build" { hostpkgsTestRun = builtins.getEnv "HOSTPKGS_TEST_RUN"; } ''
      sleep 3600
      mkdir "$out"
    '';
    # What nixpkgs' stage.nix and splice.nix put at the top of every
    # package set: the adjacent stages (all this set, as in a native
    # build), `pkgs` itself, the cross package sets (each of them this
    # set, here), the spliced set, newScope, and the standard build
    # environment (stdenv: a derivation).
    pkgsBuildBuild = self.pkgs;
    pkgsBuildHost = self.pkgs;
    pkgsBuildTarget = self.pkgs;
    pkgsHostHost = self.pkgs;
    pkgsHostTarget = self.pkgs;
    pkgsTargetTarget = self.pkgs;
    buildPackages = self.pkgsBuildHost;
    targetPackages = self.pkgsTargetTarget;
    pkgs = self // {
      recurseForDerivations = false;
    };
    pkgsCross = lib.mapAttrs (_: _: self.pkgs) lib.systems.examples;
    __splicedPackages = self.pkgs;
    newScope = extra: lib.callPackageWith (self // extra);
    stdenv = self.runCommand "stdenv-linux" { } ''
      mkdir -p "$out"
      echo "# hostpkgs stands in for nixpkgs' stdenv: nothing here builds with it" >"$out/setup"
    '';
    stdenvNoCC = self.stdenv;
    mkShell = import ./mkShell.nix {
      inherit lib system;
      inherit (self) stdenv;
    };
    callPackage = lib.callPackageWith self;
    runtimeShell = "${self.bash}/bin/bash";
    runCommand = import ./runCommand.nix { inherit lib system; };
    writeTextFile = import ./writeTextFile.nix { inherit lib; inherit (self) runCommand; };
    writeText = name: text: self.writeTextFile { inherit name text; };
    writeShellApplication = import ./writeShellApplication.nix {
      inherit lib;
      inherit (self) writeTextFile bash shellcheck;
    };
    buildEnv = import ./buildEnv.nix { inherit lib; inherit (self) runCommand; };
    rustPlatform.buildRustPackage = import ./buildRustPackage.nix {
      inherit lib host;
      inherit (self) runCommand jq glibc;
    };
  }
)
