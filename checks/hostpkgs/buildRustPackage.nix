# Takes lib, runCommand, jq, glibc and the host facts; returns nixpkgs'
# rustPlatform.buildRustPackage ({ pname, version, src, cargoLock, doCheck,
# meta, passthru, ... } -> derivation with every binary of the workspace in
# bin/). It builds with the host's Rust toolchain, offline and --locked,
# crates from the host's cargo registry cache (`cargo fetch` fills it), and
# keeps its target directory outside the store (host.json's rust.targetDir)
# so a rebuild compiles only what changed. It needs to read the host's
# CARGO_HOME: build as root (`--option build-users-group ''`). The binaries,
# linked against the host's C library, are patched to load glibc's and
# their other libraries from the store (closure.py), as hostpkgs' tools are.
{
  lib,
  runCommand,
  jq,
  glibc,
  host,
}:
{
  pname,
  version,
  src,
  cargoLock,
  doCheck ? true,
  cargoBuildFlags ? [ ],
  meta ? { },
  passthru ? { },
  ...
}:
let
  rust =
    host.rust or (throw "hostpkgs: host.json has no Rust toolchain (rust.toolchain); checks/run writes it");
in
runCommand "${pname}-${version}"
  {
    inherit
      pname
      version
      src
      doCheck
      meta
      passthru
      ;
    nativeBuildInputs = [ jq ];
    inherit glibc;
    closure = ./closure.py;
    lockFile = cargoLock.lockFile;
    buildFlags = cargoBuildFlags;
    toolchain = rust.toolchain;
    cargoHome = rust.cargoHome;
    targetDir = rust.targetDir;
  }
  ''
    if [ ! -r "$cargoHome/registry" ]; then
      echo "buildRustPackage: cannot read $cargoHome/registry as $(id -un): build with --option build-users-group '''" >&2
      exit 1
    fi
    export CARGO_HOME=$cargoHome CARGO_TARGET_DIR=$targetDir PATH=$toolchain/bin:$PATH
    cmp "$lockFile" "$src/Cargo.lock"
    # A copy, not the store path itself: store files all have mtime 1, and
    # cargo's fingerprints compare mtimes, so building in $src against the
    # shared target dir could reuse binaries of an older source. The copy's
    # files are new, so the workspace's crates always rebuild (dependencies,
    # keyed by version, stay cached).
    cp -r --no-preserve=mode,ownership,timestamps "$src" "$NIX_BUILD_TOP/source"
    cd "$NIX_BUILD_TOP/source"
    # shellcheck disable=SC2086 # the flags are words
    cargo build --release --offline --locked $buildFlags --message-format=json-render-diagnostics \
      | jq -r 'select(.reason == "compiler-artifact" and .executable != null) | .executable' >"$NIX_BUILD_TOP/bins"
    if [ -n "$doCheck" ]; then
      cargo test --release --offline --locked
    fi
    mkdir -p "$out/bin"
    while read -r bin; do
      cp "$bin" "$out/bin/"
    done <"$NIX_BUILD_TOP/bins"
    if [ ! -s "$NIX_BUILD_TOP/bins" ]; then
      echo "buildRustPackage: $pname built no binary" >&2
      exit 1
    fi
    /usr/bin/python3 "$closure" fixup "$out" "$glibc" --libdir "lib/$pname"
  ''
