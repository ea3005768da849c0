//! The agent driven over its stdin/stdout, as the launcher drives it, with
//! the host's python3, bash and node and the repository's drivers (program.sh
//! with a bash runner), each test both directly and inside a fixture
//! bubblewrap jail.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::too_many_lines,
    reason = "a test: a failed unwrap is a failed test, and a scenario reads best whole"
)]

mod harness;

mod bash;
mod bridge;
mod budget;
mod files;
mod fuzz;
mod init;
mod live;
mod node;
mod once;
mod program;
mod protocol;
mod python;
mod spawn;
