//! Shared by the launcher and the session agent.
//!
//! - [`cap`]: a byte sink that keeps a head and a tail and counts what it dropped.
//! - [`frame`]: the launcher <-> agent protocol (requests, replies, framing).
//! - [`files`]: files in and out of a session jail: path rules, caps, MIME types.
//! - [`kernel`]: whether the running kernel's release is at least a given one.
//! - [`log`]: the log to stderr, filtered as `RUST_LOG` asks.
//! - `fuzz` (tests and the `fuzz` feature only): the property tests' random source.
pub mod cap;
pub mod files;
pub mod frame;
#[cfg(test)]
mod frame_fuzz;
#[cfg(any(test, feature = "fuzz"))]
pub mod fuzz;
pub mod kernel;
pub mod log;
