//! The agent's terminal (docs/agents.md): on a person's terminal the agent
//! gets a pseudo-terminal of the launcher's, never the person's own, so
//! nothing in the jail can reach the person's terminal but by the bytes it
//! writes (no `TIOCSTI`, no changing its modes): the person's terminal is
//! put in raw mode and relayed both ways, the window size copied on every
//! `SIGWINCH`, and Ctrl-C reaches the agent as the byte it is, which the
//! pseudo-terminal turns into `SIGINT` for the agent's foreground group
//! (agent/src/bin/jail-tty.rs made it the controlling terminal). The
//! person's modes are restored when the agent ends. Without a terminal
//! (stdin or stdout not one: a script), the agent gets the launcher's
//! stdio as it is. Either way `SIGTERM`, `SIGHUP` and `SIGINT` sent to the
//! launcher go on to the agent's wrapper, in a process group of its own.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};

use nix::pty::Winsize;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::termios::{self, SetArg, Termios};
use nix::unistd::Pid;

/// The person's terminal and the agent's pseudo-terminal.
pub struct Pty {
    master: OwnedFd,
    slave: OwnedFd,
    saved: Termios,
}

/// The person's terminal's window size, read from `fd`.
fn window(fd: impl AsFd) -> Option<Winsize> {
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

/// Sets the pseudo-terminal's window size.
fn resize(master: impl AsFd, size: &Winsize) {
    // SAFETY: TIOCSWINSZ reads one winsize, which lives through the call.
    let _ = unsafe {
        nix::libc::ioctl(
            master.as_fd().as_raw_fd(),
            nix::libc::TIOCSWINSZ,
            std::ptr::from_ref(size),
        )
    };
}

impl Pty {
    /// A pseudo-terminal like the person's, when stdin and stdout are
    /// terminals; `None` otherwise.
    pub fn open() -> io::Result<Option<Self>> {
        use std::io::IsTerminal;
        if !io::stdin().is_terminal() || !io::stdout().is_terminal() {
            return Ok(None);
        }
        let saved = termios::tcgetattr(io::stdin())?;
        let size = window(io::stdin());
        let pty = nix::pty::openpty(size.as_ref(), Some(&saved))?;
        Ok(Some(Self {
            master: pty.master,
            slave: pty.slave,
            saved,
        }))
    }

    /// Gives the pseudo-terminal to `command` as its stdin, stdout and
    /// stderr.
    pub fn attach(&self, command: &mut Command) -> io::Result<()> {
        command
            .stdin(Stdio::from(self.slave.try_clone()?))
            .stdout(Stdio::from(self.slave.try_clone()?))
            .stderr(Stdio::from(self.slave.try_clone()?));
        Ok(())
    }
}

/// Blocks the signals the launcher forwards (call before any thread
/// starts, so every thread has them blocked and [`run`]'s waits for them).
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

/// Starts `command` in a process group of its own (with `pty`, on it),
/// relays until it ends, and returns how it ended. `signals`: those
/// [`block_signals`] blocked.
pub fn run(mut command: Command, pty: Option<Pty>, signals: SigSet) -> io::Result<ExitStatus> {
    if let Some(pty) = &pty {
        pty.attach(&mut command)?;
    }
    command.process_group(0);
    let mut child = command.spawn()?;
    let group = i32::try_from(child.id()).unwrap_or(0);
    let master = pty.as_ref().map(|p| p.master.try_clone()).transpose()?;
    std::thread::spawn(move || forward(signals, group, master));
    let Some(pty) = pty else {
        return child.wait();
    };
    drop(pty.slave);
    let mut raw = pty.saved.clone();
    termios::cfmakeraw(&mut raw);
    termios::tcsetattr(io::stdin(), SetArg::TCSANOW, &raw)?;
    let input = pty.master.try_clone()?;
    std::thread::spawn(move || copy_input(input));
    let status = relay_output(&pty.master, &mut child);
    let _ = termios::tcsetattr(io::stdin(), SetArg::TCSADRAIN, &pty.saved);
    status
}

/// The forwarded signals, until the process ends: a resize copied to the
/// pseudo-terminal, the others sent on to the agent's wrapper's group.
fn forward(signals: SigSet, group: i32, master: Option<OwnedFd>) {
    while let Ok(signal) = signals.wait() {
        match (signal, &master) {
            (Signal::SIGWINCH, Some(master)) => {
                if let Some(size) = window(io::stdin()) {
                    resize(master, &size);
                }
            }
            (Signal::SIGWINCH, None) => {}
            // A group the launcher made: never 0, 1 or below.
            (signal, _) if group > 1 => {
                let _ = nix::sys::signal::killpg(Pid::from_raw(group), signal);
            }
            _ => {}
        }
    }
}

/// The person's keys to the agent, until stdin ends.
fn copy_input(master: OwnedFd) {
    let mut master = std::fs::File::from(master);
    let mut buf = [0u8; 4096];
    loop {
        match io::stdin().lock().read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if master.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

/// The agent's output to the person's stdout, until the agent's wrapper
/// ended and the pseudo-terminal has nothing more to read (a process of
/// the jail that keeps it open does not hold the launcher).
fn relay_output(master: &OwnedFd, child: &mut Child) -> io::Result<ExitStatus> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut out = io::stdout().lock();
    let mut buf = [0u8; 16384];
    let mut ended = None;
    loop {
        if ended.is_none() {
            ended = child.try_wait()?;
        }
        let wait = match ended {
            Some(_) => PollTimeout::from(50u16),
            None => PollTimeout::from(200u16),
        };
        let mut fds = [PollFd::new(master.as_fd(), PollFlags::POLLIN)];
        let ready = poll(&mut fds, wait).unwrap_or(0);
        if ready == 0 {
            if let Some(status) = ended {
                return Ok(status);
            }
            continue;
        }
        match nix::unistd::read(master, &mut buf) {
            Ok(0) | Err(_) => {
                // Every slave closed (EIO): only the wrapper's end remains.
                return match ended {
                    Some(status) => Ok(status),
                    None => child.wait(),
                };
            }
            Ok(n) => {
                out.write_all(&buf[..n])?;
                out.flush()?;
            }
        }
    }
}
