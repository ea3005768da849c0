# Takes nixpkgs' lib and rustPlatform; returns nix-sandbox-seccomp, the
# generator of the jails' seccomp filters (bin/nix-sandbox-seccomp), built
# alone from the Cargo workspace (it has no dependency but lexopt).
{ lib, rustPlatform }:
let
  workspace = (lib.importTOML ../Cargo.toml).workspace.package;
in
rustPlatform.buildRustPackage {
  pname = "nix-sandbox-seccomp";
  inherit (workspace) version;
  # Cargo needs every member of the workspace to read it.
  src = lib.sourceByRegex ../. [
    "Cargo\\.(toml|lock)"
    "(launcher|agent|proto|seccomp)(/.*)?"
  ];
  cargoLock.lockFile = ../Cargo.lock;
  cargoBuildFlags = [
    "-p"
    "seccomp"
  ];
  # The tests load filters into the kernel in front of the host's Python:
  # they run as `cargo test`.
  doCheck = false;
  meta = {
    description = "Writes the seccomp cBPF filters of nix-sandbox-mcp's jails";
    homepage = workspace.repository;
    license = lib.licenses.mit;
    mainProgram = "nix-sandbox-seccomp";
    platforms = [
      "x86_64-linux"
      "aarch64-linux"
    ];
  };
}
