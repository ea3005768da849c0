# Takes nixpkgs' lib and rustPlatform; returns the launcher package: the
# Cargo workspace built from Cargo.lock, with its three binaries:
# nix-sandbox-mcp (the MCP server), agent (the session jail's entry) and
# nix-sandbox-seccomp (writes the jails' seccomp filters at build time).
{ lib, rustPlatform }:
let
  workspace = (lib.importTOML ./Cargo.toml).workspace.package;
in
rustPlatform.buildRustPackage {
  pname = "nix-sandbox-mcp";
  inherit (workspace) version;
  # (lib.fileset needs Nix 2.14; this works with older Nix too.)
  src = lib.sourceByRegex ./. [
    "Cargo\\.(toml|lock)"
    "(launcher|agent|proto|seccomp)(/.*)?"
  ];
  cargoLock.lockFile = ./Cargo.lock;
  # The tests need bubblewrap, user namespaces and the host's interpreters,
  # which a build sandbox does not give: they run as `cargo test` (see
  # CONTRIBUTING.md) and the flake's checks test the built package.
  doCheck = false;
  meta = {
    description = "MCP server running code in Nix-built bubblewrap jails";
    homepage = workspace.repository;
    license = lib.licenses.mit;
    mainProgram = "nix-sandbox-mcp";
    platforms = lib.platforms.linux;
  };
}
