//! Packages on demand: a call's `packages` added to its environment by the
//! server's compose helper (a script Nix generated, named in the manifest),
//! which realises mkSandbox of the environment with those packages added.
//! Names are checked here first (names.rs).

pub mod names;
