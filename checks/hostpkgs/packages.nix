# Takes nixpkgs' lib, the host facts (host.json, written by checks/run) and
# the system; returns the package set standing in for nixpkgs' legacyPackages:
# the host's tools (tools.nix) under nixpkgs' names, its Python modules
# (pythonPackages.nix, with python3.withPackages), and the few builders the
# flake and jail.nix call, as plain derivations built by the host's /bin/bash.
{
  lib,
  host,
  system ? "x86_64-linux",
}:
lib.fix (
  self:
  let
    hostTool = import ./hostTool.nix { inherit lib system host; };
  in
  lib.mapAttrs (pname: tool: hostTool (tool // { inherit pname; })) (import ./tools.nix)
  // {
    inherit lib system;
    # The host's Python modules, named like nixpkgs' (python3.11-numpy-1.24.2),
    # each with nixpkgs' `pythonModule` (the Python it is for).
    python3Packages = lib.mapAttrs (
      name: module:
      hostTool (module // { pname = "python${lib.versions.majorMinor self.python3.version}-${name}"; })
      // {
        pythonModule = self.python3;
      }
    ) (import ./pythonPackages.nix);
    # withPackages: one tree of the host's python3 and the chosen modules,
    # with nixpkgs' passthru `python` (and buildEnv's `paths`).
    python3 =
      hostTool ((import ./tools.nix).python3 // { pname = "python3"; })
      // {
        withPackages =
          select:
          self.buildEnv {
            name = "python3-${self.python3.version}-env";
            paths = [ self.python3 ] ++ select self.python3Packages;
            meta.mainProgram = "python3";
            passthru.python = self.python3;
          };
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
      inherit (self) runCommand jq;
    };
  }
)
