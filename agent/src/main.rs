//! `agent`: the entry of a session jail. It keeps one interpreter (python,
//! bash or node) alive and runs the launcher's requests in it; see
//! `proto::frame` for the protocol and `driver` for the private channel to
//! the interpreter's driver.

mod cli;
mod driver;
mod files;
mod inbox;
mod init;
mod interpreter;
mod live;
mod pipe;
mod session;
mod spawn;
mod watch;

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let command = match cli::parse(std::env::args_os().skip(1)) {
        Ok(command) => command,
        Err(e) => {
            eprintln!("agent: {e}\n\n{}", cli::USAGE);
            return ExitCode::from(2);
        }
    };
    let config = match command {
        cli::Command::Run(config) => config,
        cli::Command::Help => return print(cli::USAGE),
        cli::Command::Version => return print(&format!("agent {}\n", env!("CARGO_PKG_VERSION"))),
    };
    proto::log::init("RUST_LOG", "info", false);
    // User code runs as the agent's own user in the agent's own jail: were
    // the agent dumpable, it could open /proc/AGENT/fd/0 and fd/1 and read
    // the launcher's requests or write frames of its own. A non-dumpable
    // process's fds need CAP_SYS_PTRACE, which nothing in the jail has.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        tracing::error!("cannot make the agent non-dumpable: {e}");
        return ExitCode::FAILURE;
    }
    if let Err(e) = init::become_init() {
        tracing::error!("cannot take up the jail's pid 1 duties: {e}");
        return ExitCode::FAILURE;
    }
    match session::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// Help and version go to stdout, asked for by a person, never by the launcher.
fn print(text: &str) -> ExitCode {
    match std::io::stdout().write_all(text.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}
