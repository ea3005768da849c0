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
//! launcher go on to the agent's wrapper, in a process group of its own,
//! and end the jail, as the person's terminal closing does; the jail never
//! outlives the launcher ([`run`]).

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use nix::pty::Winsize;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::termios::{self, Termios};
use nix::unistd::Pid;

pub use crate::tty::block_signals;
use crate::tty::{Raw, window};

/// The person's terminal and the agent's pseudo-terminal.
pub struct Pty {
    master: OwnedFd,
    slave: OwnedFd,
    saved: Termios,
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

/// The signals a terminal's person sends or causes, which the agent gets
/// with their default action whatever the launcher inherited.
const TERMINAL_SIGNALS: [Signal; 8] = [
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTSTP,
    Signal::SIGTTIN,
    Signal::SIGTTOU,
    Signal::SIGHUP,
    Signal::SIGTERM,
    Signal::SIGWINCH,
];

/// How long the agent's jail has to end after a hangup or `SIGTERM`
/// before the launcher kills it.
const GRACE: Duration = Duration::from_secs(3);

/// Starts `command` in a process group of its own (with `pty`, on it),
/// relays until it ends, and returns how it ended. `signals`: those
/// [`block_signals`] blocked. The jail never outlives the launcher: a
/// hangup of the person's terminal (its end read, or `SIGHUP`) or
/// `SIGTERM` is sent on to the group, which is killed [`GRACE`] later if
/// it is still there, and the launcher's own end, however it comes, kills
/// the jail's wrapper (`PR_SET_PDEATHSIG`), whose bubblewrap takes the
/// jail with it (`--die-with-parent`).
pub fn run(mut command: Command, pty: Option<Pty>, signals: SigSet) -> io::Result<ExitStatus> {
    if let Some(pty) = &pty {
        pty.attach(&mut command)?;
    }
    command.process_group(0);
    let launcher = nix::unistd::getpid();
    // SAFETY: sigprocmask, signal (SIG_DFL, no handler), prctl and getppid
    // are async-signal-safe and touch only the values copied into the
    // closure.
    unsafe {
        command.pre_exec(move || {
            // The launcher blocks the signals it forwards, and a blocked
            // signal stays blocked across exec: the agent gets them as
            // any program does.
            nix::sys::signal::sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&signals), None)?;
            // An ignored signal stays ignored across exec too: a launcher
            // started in the background of a script (SIGINT and SIGQUIT
            // ignored) would give the agent a Ctrl-C that stops nothing.
            for signal in TERMINAL_SIGNALS {
                nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigDfl)?;
            }
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            // The launcher ended before the flag was set.
            if nix::unistd::getppid() != launcher {
                return Err(io::Error::other("the launcher ended"));
            }
            Ok(())
        });
    }
    let mut child = command.spawn()?;
    // The copies of the pseudo-terminal's slave `attach` gave the command:
    // the agent's alone from here.
    drop(command);
    let group = i32::try_from(child.id()).unwrap_or(0);
    let ending = Arc::new(AtomicI32::new(0));
    let master = pty.as_ref().map(|p| p.master.try_clone()).transpose()?;
    let told = Arc::clone(&ending);
    std::thread::spawn(move || forward(signals, master, &told));
    let Some(pty) = pty else {
        return end(&mut child, group, None, &ending);
    };
    drop(pty.slave);
    let raw = Raw::enter(pty.saved)?;
    let input = pty.master.try_clone()?;
    let told = Arc::clone(&ending);
    std::thread::spawn(move || copy_input(input, &told));
    let status = end(&mut child, group, Some(&pty.master), &ending);
    drop(raw);
    status
}

/// The forwarded signals, until the process ends: a resize copied to the
/// pseudo-terminal, the others left in `ending` for [`end`] to send on.
fn forward(signals: SigSet, master: Option<OwnedFd>, ending: &AtomicI32) {
    while let Ok(signal) = signals.wait() {
        match (signal, &master) {
            (Signal::SIGWINCH, Some(master)) => {
                if let Some(size) = window(io::stdin()) {
                    resize(master, &size);
                }
            }
            (Signal::SIGWINCH, None) => {}
            (signal, _) => ending.store(signal as i32, Ordering::SeqCst),
        }
    }
}

/// The person's keys to the agent, until stdin ends: then the person's
/// terminal is gone, a hangup for the agent (`ending`).
fn copy_input(master: OwnedFd, ending: &AtomicI32) {
    let mut master = std::fs::File::from(master);
    let mut buf = [0u8; 4096];
    loop {
        match io::stdin().lock().read(&mut buf) {
            Ok(0) | Err(_) => {
                let _ = ending.compare_exchange(
                    0,
                    Signal::SIGHUP as i32,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
                return;
            }
            Ok(n) => {
                if master.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

/// Relays the agent's output (from `master`, when it has a terminal) to
/// the person's stdout until the agent's wrapper ended and the
/// pseudo-terminal has nothing more to read (a process of the jail that
/// keeps it open does not hold the launcher); sends the signal left in
/// `ending` on to the wrapper's `group`, and kills the group [`GRACE`]
/// after. Only this thread reaps the wrapper, so the group it signals is
/// still the one the launcher made.
fn end(
    child: &mut Child,
    group: i32,
    master: Option<&OwnedFd>,
    ending: &AtomicI32,
) -> io::Result<ExitStatus> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut out = io::stdout().lock();
    let mut buf = [0u8; 16384];
    let (mut ended, mut sent, mut killed) = (None, None::<Instant>, false);
    let mut person = true;
    loop {
        if ended.is_none() {
            ended = child.try_wait()?;
        }
        if ended.is_none() {
            let signal = ending.swap(0, Ordering::SeqCst);
            // A group the launcher made and has not reaped: never 0, 1
            // or below.
            if signal != 0 && group > 1 {
                if let Ok(signal) = Signal::try_from(signal) {
                    let _ = nix::sys::signal::killpg(Pid::from_raw(group), signal);
                }
                if signal != Signal::SIGINT as i32 {
                    sent.get_or_insert_with(Instant::now);
                }
            }
            if !killed && group > 1 && sent.is_some_and(|at| at.elapsed() >= GRACE) {
                let _ = nix::sys::signal::killpg(Pid::from_raw(group), Signal::SIGKILL);
                killed = true;
            }
        }
        let wait = PollTimeout::from(if ended.is_some() { 50u16 } else { 100 });
        let Some(master) = master else {
            match ended {
                Some(status) => return Ok(status),
                None => std::thread::sleep(Duration::from_millis(100)),
            }
            continue;
        };
        let mut fds = [PollFd::new(master.as_fd(), PollFlags::POLLIN)];
        if poll(&mut fds, wait).unwrap_or(0) == 0 {
            if let Some(status) = ended {
                return Ok(status);
            }
            continue;
        }
        match nix::unistd::read(master, &mut buf) {
            // Every slave closed (EIO): only the wrapper's end remains.
            Ok(0) | Err(_) => match ended {
                Some(status) => return Ok(status),
                None => std::thread::sleep(Duration::from_millis(50)),
            },
            Ok(n) if person => {
                // The person's terminal gone: a hangup, the output dropped.
                if out.write_all(&buf[..n]).and_then(|()| out.flush()).is_err() {
                    person = false;
                    let _ = ending.compare_exchange(
                        0,
                        Signal::SIGHUP as i32,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    );
                }
            }
            Ok(_) => {}
        }
    }
}
