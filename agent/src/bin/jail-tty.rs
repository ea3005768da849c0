//! `jail-tty`: the first step of a person's agent jail (docs/agents.md)
//! after bubblewrap, whose `--new-session` left the jail without a
//! controlling terminal (so nothing in the jail can push input into the
//! person's terminal with `TIOCSTI`). When its stdin is a terminal (the
//! pseudo-terminal the launcher made and relays, never the person's own),
//! it makes a session of its own whose controlling terminal that is, its
//! process group the foreground one, so that Ctrl-C (`SIGINT`) and a
//! resize (`SIGWINCH`) reach the agent, then execs PROGRAM:
//!
//!   jail-tty -- PROGRAM [ARGS...]
//!
//! On a pipe (an agent run by a script) it only execs PROGRAM. A terminal
//! that cannot be made the controlling one is said in one line on stderr
//! and the program runs without it (its keys still arrive; the signals
//! do not).

use std::ffi::OsString;
use std::io::IsTerminal;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

const USAGE: &str = "usage: jail-tty -- PROGRAM [ARGS...]";

fn main() -> ExitCode {
    let mut argv = std::env::args_os().skip(1);
    if argv.next().as_deref() != Some(std::ffi::OsStr::new("--")) {
        eprintln!("jail-tty: {USAGE}");
        return ExitCode::from(2);
    }
    let Some(program) = argv.next() else {
        eprintln!("jail-tty: {USAGE}");
        return ExitCode::from(2);
    };
    let args: Vec<OsString> = argv.collect();
    if std::io::stdin().is_terminal()
        && let Err(e) = controlling_terminal()
    {
        eprintln!(
            "jail-tty: the terminal is not the agent's controlling one ({e}): Ctrl-C and resizes reach it as keys only"
        );
    }
    let e = std::process::Command::new(&program).args(args).exec();
    eprintln!("jail-tty: cannot run {}: {e}", program.to_string_lossy());
    ExitCode::from(127)
}

/// Stdin, a terminal, made the controlling terminal of a session of this
/// process's own (bubblewrap's `--new-session` made the session of its
/// pid 1, whose child this is: not a leader, which TIOCSCTTY needs), this
/// process group its foreground group.
fn controlling_terminal() -> nix::Result<()> {
    // EPERM: already a session's leader, which is what is wanted.
    let _ = nix::unistd::setsid();
    // SAFETY: TIOCSCTTY takes an integer argument (0: do not steal the
    // terminal from another session) and touches no memory of ours.
    let set = unsafe { nix::libc::ioctl(0, nix::libc::TIOCSCTTY, 0) };
    nix::errno::Errno::result(set)?;
    nix::unistd::tcsetpgrp(std::io::stdin(), nix::unistd::getpgrp())
}
