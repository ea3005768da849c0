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
    # `pythonModule` (the Python it is for).
    python3Packages = lib.mapAttrs (
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
        propagatedPythonPackages = map (name: self.python3Packages.${name}) (module.propagated or [ ]);
      }
    ) (import ./pythonPackages.nix)
    // {
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
    };
    python3 = hostTool (tools.python3 // { pname = "python3"; }) // {
      withPackages =
        select:
        import ./pythonEnv.nix {
          inherit lib;
          inherit (self) buildEnv;
          python3 = removeAttrs self.python3 [ "withPackages" ];
        } (select self.python3Packages);
    };
    # A package no test builds: a call asking for it from a server that
    # does not build shows what a package missing from the binary cache
    # gets (checks/packages.py).
    hello = self.runCommand "hello-2.12.1" { meta.mainProgram = "hello"; } ''
      mkdir -p "$out/bin"
      printf '#!${self.bash}/bin/sh\necho "Hello, world!"\n' >"$out/bin/hello"
      chmod +x "$out/bin/hello"
    '';
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
