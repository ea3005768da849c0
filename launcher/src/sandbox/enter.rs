//! `sandbox enter ID` (docs/cli.md): an interactive shell in the session's
//! jail, on a pseudo-terminal the session's agent opens there, relayed
//! through the control socket. The person's terminal is put in raw mode
//! (restored on every way out: the shell's end, the server's, a signal)
//! so that every key, Ctrl-C included, goes to the jail, where the
//! pseudo-terminal makes it `SIGINT` for the shell's foreground job; each
//! `SIGWINCH` sends the window's new size. `SIGTERM`, `SIGHUP` and
//! `SIGINT` sent to this process close the connection, which ends the
//! shell. The exit status is the shell's.

use std::io::{self, IsTerminal, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use nix::sys::signal::{SigSet, Signal};
use nix::sys::termios;

use super::{Server, exec};
use crate::control::wire::{self, KeysLine, KeysOp};
use crate::tty::{Raw, block_signals, window};

/// Why `enter` does not start without a terminal on stdin.
pub const NOT_A_TERMINAL: &str = "enter needs a terminal on stdin (it is an interactive shell); from a script use `nix-sandbox-mcp sandbox exec ID -- CMD`";

/// Whether stdin is a terminal.
pub fn stdin_is_terminal() -> bool {
    io::stdin().is_terminal()
}

/// Runs a shell in session `name` of `server` on the person's terminal
/// (`TERM` set to `term`); the shell's status.
pub fn run(server: &Server, name: String, term: Option<String>) -> Result<ExitCode, String> {
    // Before any thread starts, so that every thread has them blocked and
    // only the signal thread takes them: the agent subcommand's set
    // (SIGWINCH, SIGTERM, SIGHUP, SIGINT).
    let signals = block_signals().map_err(|e| format!("cannot block signals: {e}"))?;
    let saved = termios::tcgetattr(io::stdin())
        .map_err(|e| format!("cannot read the terminal's modes: {e}"))?;
    let (rows, cols) = size();
    let op = wire::Op::Enter {
        id: name,
        rows,
        cols,
        term,
    };
    let stream = server.send(&op, None)?;
    let failed = |e: io::Error| format!("server {} did not answer: {e}", server.pid);
    let writer = Arc::new(Mutex::new(stream.try_clone().map_err(failed)?));
    let restore =
        Raw::enter(saved).map_err(|e| format!("cannot put the terminal in raw mode: {e}"))?;
    let ending = Arc::new(AtomicI32::new(0));
    let to_server = Arc::clone(&writer);
    std::thread::spawn(move || copy_input(&to_server));
    let (to_server, told) = (Arc::clone(&writer), Arc::clone(&ending));
    std::thread::spawn(move || forward(signals, &to_server, &told));
    let ended = exec::relay(server, stream, false);
    drop(restore);
    match (ended, ending.load(Ordering::SeqCst)) {
        (Err(_), signal) if signal != 0 => {
            let name = Signal::try_from(signal).map_or("a signal", Signal::as_str);
            Err(format!("{name} ended enter, and with it the shell"))
        }
        (ended, _) => ended,
    }
}

/// The person's window size, 24 by 80 when it cannot be read.
fn size() -> (u16, u16) {
    window(io::stdin()).map_or((24, 80), |w| (w.ws_row, w.ws_col))
}

/// Sends `keys` as one line; false when the connection is gone.
fn send(writer: &Mutex<UnixStream>, keys: KeysOp) -> bool {
    let line = KeysLine {
        v: wire::VERSION,
        keys,
    };
    let Ok(mut line) = serde_json::to_vec(&line) else {
        return false;
    };
    line.push(b'\n');
    let Ok(mut stream) = writer.lock() else {
        return false;
    };
    stream.write_all(&line).is_ok()
}

/// The person's keys to the server until stdin ends (the terminal gone:
/// the connection is closed, which ends the shell).
fn copy_input(writer: &Mutex<UnixStream>) {
    let mut buf = [0u8; 4096];
    loop {
        let n = match io::stdin().lock().read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let data = proto::frame::encode_data(&buf[..n]);
        if !send(writer, KeysOp::Input { data }) {
            return;
        }
    }
    if let Ok(stream) = writer.lock() {
        let _ = stream.shutdown(Shutdown::Both);
    }
}

/// Each resize sent as the window's new size; another signal closes the
/// connection (left in `ending` to be said).
fn forward(signals: SigSet, writer: &Mutex<UnixStream>, ending: &AtomicI32) {
    while let Ok(signal) = signals.wait() {
        if signal == Signal::SIGWINCH {
            let (rows, cols) = size();
            send(writer, KeysOp::Resize { rows, cols });
            continue;
        }
        ending.store(signal as i32, Ordering::SeqCst);
        if let Ok(stream) = writer.lock() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        return;
    }
}
