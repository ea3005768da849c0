//! Shared by the launcher and the session agent.
//!
//! - [`cap`]: a byte sink that keeps a head and a tail and counts what it dropped.
//! - [`frame`]: the launcher <-> agent protocol (requests, replies, framing).
pub mod cap;
pub mod frame;
