//! A person's terminal, for the relays that put a jail's pseudo-terminal
//! on it (agent/terminal.rs, sandbox/enter.rs): its window size and the
//! signals a relay takes itself.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use nix::pty::Winsize;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::termios::{self, SetArg, Termios};

/// The person's terminal (stdin) in raw mode until dropped, when its
/// modes `saved` are given back.
pub struct Raw(Termios);

impl Raw {
    /// Puts stdin's terminal in raw mode; `saved`: its modes before.
    pub fn enter(saved: Termios) -> nix::Result<Self> {
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(io::stdin(), SetArg::TCSANOW, &raw)?;
        Ok(Self(saved))
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(io::stdin(), SetArg::TCSADRAIN, &self.0);
    }
}

/// The person's terminal's window size, read from `fd`.
pub fn window(fd: impl AsFd) -> Option<Winsize> {
    let mut size = Winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize into `size`, which lives
    // through the call.
    let got =
        unsafe { nix::libc::ioctl(fd.as_fd().as_raw_fd(), nix::libc::TIOCGWINSZ, &raw mut size) };
    (got == 0).then_some(size)
}

/// Blocks the signals a relay takes itself: a resize, and the ends it
/// passes on (call before any thread starts, so every thread has them
/// blocked and the relay's signal thread waits for them).
pub fn block_signals() -> nix::Result<SigSet> {
    let mut set = SigSet::empty();
    for signal in [
        Signal::SIGWINCH,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGINT,
    ] {
        set.add(signal);
    }
    set.thread_block()?;
    Ok(set)
}
