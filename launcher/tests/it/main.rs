//! Integration tests: the built `nix-sandbox-mcp` against real bubblewrap and
//! the host's interpreters (launcher/tests/fixtures), through a real MCP client.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::too_many_lines,
    reason = "a test: a failed unwrap is a failed test, and a scenario reads best whole"
)]

mod bounds;
mod cgroup_v1;
mod cli;
mod common;
mod deadline;
mod devshell;
mod errors;
mod files_in;
mod fork;
mod hostile;
mod http;
mod http_bounds;
mod http_listener;
mod http_shares;
mod jail;
mod lifetime;
mod outputs;
mod packages;
mod progress;
mod project;
mod project_hostile;
mod protocol;
mod publish;
mod run;
mod sandbox_cli;
mod session;
mod session_table;
mod stdio;
mod takeover;
mod timeout;
mod warm;
