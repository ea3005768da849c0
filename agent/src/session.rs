//! The agent's loop: requests from the launcher on stdin, replies on stdout,
//! one interpreter kept alive, one call at a time.
//!
//! A single thread polls stdin, the interpreter's stdout and stderr, the
//! driver's channel and a signalfd for SIGCHLD. Output is read whenever it
//! comes (so user code never blocks on a full pipe) into head/tail caps, which
//! the reply of the running call takes; output written between calls stays in
//! them for the next call. A `live` call's output also goes to the launcher
//! as it comes, throttled (live.rs). A call ends when the driver says `done` (what was
//! written before is then drained from the pipes) or when the interpreter
//! dies. A dead interpreter's process group is killed and a fresh interpreter
//! is started on the next exec. After every wake-up the loop collects the
//! orphans of user code that exited (the agent is the jail's pid 1: init.rs).

use std::io::{self, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use proto::cap::Cap;
use proto::frame::{
    self, ErrorCode, ExecReply, Exit, FLOOD_FACTOR, FileIn, MAX_CHUNK_BYTES, MAX_OUTPUT_BYTES,
    Reply, Request, Split, Splitter, Stream, TtySize,
};

use crate::cli::Config;
use crate::driver::{self, Message};
use crate::files::{Snapshot, Workspace};
use crate::inbox::{Inbox, Refused};
use crate::init;
use crate::interpreter::{self, Interpreter};
use crate::live::Live;
use crate::pipe::{self, Read, pump};
use crate::spawn::{self, Spawned};

/// The cap for output that arrives before the first call.
const FIRST_CAP: usize = 64 << 10;
/// How much of one stream is drained after `done`: what the code wrote
/// before it finished fits in the pipe; anything more is a background
/// process still writing, left for the next call.
const DRAIN_AFTER_DONE: usize = 1 << 20;
/// How long a dead interpreter's pipes are read, after its process group was
/// killed, for output still in them (a process that left the group may hold
/// them open).
const DRAIN_AFTER_DEATH: Duration = Duration::from_secs(1);
/// While interrupted code keeps running, SIGINT is sent again this often: a
/// SIGINT can be lost (bash forking a command defers its trap until the
/// command ends, and the command, not yet exec'd, drops the signal), and a
/// repeated one is what a person at a terminal would press.
const INTERRUPT_REPEAT: Duration = Duration::from_millis(500);
/// How long an interpreter that closed its channel has to exit by itself.
const EXIT_GRACE: Duration = Duration::from_millis(500);
/// How long the agent waits for a killed interpreter to exit.
const KILL_WAIT: Duration = Duration::from_secs(2);

/// Runs the agent until stdin closes or a `shutdown` request.
pub fn run(config: Config) -> io::Result<()> {
    let mut session = Session::new(config)?;
    let result = session.serve();
    if let Some(spawned) = &session.spawned {
        spawned.kill_group();
    }
    session.kill_interpreter();
    result
}

/// Where the running call is, as the driver reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The code was sent; the driver has not started it.
    Sent,
    /// The code runs and SIGINT is safe.
    Running,
    /// SIGINT is unsafe until the next `start`.
    Holding,
}

#[derive(Debug)]
struct Call {
    id: u64,
    started: Instant,
    phase: Phase,
    /// When SIGINT is next due: set by an interrupt, sent once the driver
    /// can take it, then again every [`INTERRUPT_REPEAT`] while the call runs.
    interrupt_due: Option<Instant>,
    interrupted: bool,
    /// SIGINT was sent since the driver's last `start`.
    signalled: bool,
    restarted: bool,
    /// A `once` call: the bytes past which a stream is a flood.
    once: Option<u64>,
    /// The stream that flooded, for which the interpreter was killed.
    flooded: Option<Stream>,
}

struct Session {
    config: Config,
    interpreter: Option<Interpreter>,
    /// An interpreter died since the last call: the next one starts afresh.
    lost_state: bool,
    call: Option<Call>,
    stdout: Cap,
    stderr: Cap,
    /// The cap of the last call, for output that comes between calls.
    cap_limit: usize,
    requests: Splitter,
    /// Bytes not yet written to the driver.
    to_driver: Vec<u8>,
    /// A partial line from the driver.
    from_driver: Vec<u8>,
    /// A `once` call's driver closed its channel after `start` (the program
    /// driver hands its process to the program runner): the process's exit
    /// ends the call.
    channel_closed: bool,
    sigchld: SignalFd,
    buf: Vec<u8>,
    /// The workspace, for files in and outputs out; `None` when it could not
    /// be opened (such calls then get an error, and list no outputs).
    workspace: Option<Workspace>,
    /// The outputs directory as the running call found it.
    outputs_before: Option<Snapshot>,
    /// The files `put` for the next exec.
    inbox: Inbox,
    /// The running spawn, if any (spawn.rs).
    spawned: Option<Spawned>,
    /// The running call's output as it comes, when it asked (live.rs).
    live: Live,
}

/// What one poll reported.
#[derive(Debug)]
struct Ready {
    stdin: bool,
    sigchld: bool,
    from_driver: bool,
    to_driver: bool,
    stdout: bool,
    stderr: bool,
    spawned_stdout: bool,
    spawned_stderr: bool,
}

impl Session {
    fn new(config: Config) -> io::Result<Self> {
        if let Err(e) = interpreter::hide_inherited_fds() {
            // Before Linux 5.11: interpreters then inherit what the agent did.
            tracing::warn!("close_range: {e}");
        }
        let mut mask = SigSet::empty();
        mask.add(Signal::SIGCHLD);
        // Blocked here, read from the signalfd; children get a clean mask.
        sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None)?;
        let sigchld = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        let workspace = match Workspace::open(&config.workspace) {
            Ok(workspace) => Some(workspace),
            Err(e) => {
                tracing::warn!("no workspace, so no files in or outputs out: {e}");
                None
            }
        };
        let mut session = Session {
            config,
            interpreter: None,
            lost_state: false,
            call: None,
            stdout: Cap::new(FIRST_CAP),
            stderr: Cap::new(FIRST_CAP),
            cap_limit: FIRST_CAP,
            requests: Splitter::new(),
            to_driver: Vec::new(),
            from_driver: Vec::new(),
            channel_closed: false,
            sigchld,
            buf: vec![0; 64 << 10],
            workspace,
            outputs_before: None,
            inbox: Inbox::default(),
            spawned: None,
            live: Live::default(),
        };
        // Start the interpreter now so that the first call does not wait for
        // it; a failure is reported to the first exec.
        if let Err(e) = session.start_interpreter() {
            tracing::error!("{e}");
        }
        Ok(session)
    }

    fn start_interpreter(&mut self) -> io::Result<()> {
        let config = &self.config;
        let interpreter = Interpreter::spawn(config).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot start the {} interpreter {} {}: {e}",
                    config.interpreter,
                    config.program.display(),
                    config.driver.display()
                ),
            )
        })?;
        tracing::info!(
            pid = interpreter.pid().as_raw(),
            "{} interpreter started",
            config.interpreter
        );
        self.to_driver.clear();
        self.from_driver.clear();
        self.channel_closed = false;
        self.interpreter = Some(interpreter);
        Ok(())
    }

    fn serve(&mut self) -> io::Result<()> {
        loop {
            let ready = self.wait()?;
            if ready.stdout || ready.stderr {
                self.read_output(DRAIN_AFTER_DONE);
                self.stop_flood();
            }
            if ready.from_driver {
                self.read_driver()?;
            }
            if ready.to_driver {
                self.write_driver();
            }
            if ready.sigchld {
                self.check_child()?;
            }
            if ready.spawned_stdout || ready.spawned_stderr {
                self.pass_spawned_output()?;
            }
            if ready.stdin && !self.read_requests()? {
                return Ok(());
            }
            self.deliver_interrupt();
            self.send_live()?;
            self.finish_spawned()?;
            let keep = [
                self.interpreter.as_ref().map(Interpreter::pid),
                self.spawned.as_ref().map(Spawned::pid),
            ];
            init::reap_orphans(&keep);
        }
    }

    /// Polls everything the agent listens to.
    fn wait(&self) -> io::Result<Ready> {
        let stdin = io::stdin();
        let mut fds = vec![
            PollFd::new(stdin.as_fd(), PollFlags::POLLIN),
            PollFd::new(self.sigchld.as_fd(), PollFlags::POLLIN),
        ];
        // Slots: from the driver, to the driver, stdout, stderr.
        let mut slots = [None; 4];
        if let Some(interp) = &self.interpreter {
            let wanted = [
                (!self.channel_closed).then(|| (interp.from_driver.as_fd(), PollFlags::POLLIN)),
                (!self.to_driver.is_empty())
                    .then(|| (interp.to_driver.as_fd(), PollFlags::POLLOUT)),
                interp
                    .stdout
                    .as_ref()
                    .map(|fd| (fd.as_fd(), PollFlags::POLLIN)),
                interp
                    .stderr
                    .as_ref()
                    .map(|fd| (fd.as_fd(), PollFlags::POLLIN)),
            ];
            for (slot, entry) in wanted.into_iter().enumerate() {
                if let Some((fd, flags)) = entry {
                    slots[slot] = Some(fds.len());
                    fds.push(PollFd::new(fd, flags));
                }
            }
        }
        let mut spawned_slots = [None; 2];
        if let Some(spawned) = &self.spawned {
            for (slot, fd) in [&spawned.stdout, &spawned.stderr].into_iter().enumerate() {
                if let Some(fd) = fd {
                    spawned_slots[slot] = Some(fds.len());
                    fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
                }
            }
        }
        loop {
            match poll(&mut fds, self.timeout()) {
                Ok(_) => break,
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(with_context(e, "poll")),
            }
        }
        let is_ready = |i: usize| fds[i].revents().is_some_and(|r| !r.is_empty());
        let slot_ready = |slot: usize| slots[slot].is_some_and(is_ready);
        Ok(Ready {
            stdin: is_ready(0),
            sigchld: is_ready(1),
            from_driver: slot_ready(0),
            to_driver: slot_ready(1),
            stdout: slot_ready(2),
            stderr: slot_ready(3),
            spawned_stdout: spawned_slots[0].is_some_and(is_ready),
            spawned_stderr: spawned_slots[1].is_some_and(is_ready),
        })
    }

    fn read_output(&mut self, budget: usize) {
        if let Some(interp) = &mut self.interpreter {
            let (live, stdout, stderr) = (&mut self.live, &mut self.stdout, &mut self.stderr);
            pump(&mut interp.stdout, &mut self.buf, budget, |data| {
                stdout.push(data);
                live.push(Stream::Stdout, data);
            });
            pump(&mut interp.stderr, &mut self.buf, budget, |data| {
                stderr.push(data);
                live.push(Stream::Stderr, data);
            });
        }
    }

    /// Acts on the driver's messages. A driver that closes its channel cannot
    /// run calls any more: it is killed, and its death handled as any other,
    /// unless the call is a `once` call that started, whose process may
    /// close it (an exec) and ends the call when it exits.
    fn read_driver(&mut self) -> io::Result<()> {
        if self.drain_driver()? {
            return Ok(());
        }
        if self
            .call
            .as_ref()
            .is_some_and(|call| call.once.is_some() && call.phase == Phase::Running)
        {
            tracing::debug!("a one-shot call's driver closed its channel");
            self.channel_closed = true;
            return Ok(());
        }
        // Usually the interpreter is exiting: its fds close before it is a
        // zombie. One that lives on without its channel is killed.
        let Some(interp) = &self.interpreter else {
            return Ok(());
        };
        let exit = match self.wait_exit(interp, EXIT_GRACE) {
            Some(exit) => exit,
            None => {
                tracing::warn!("the driver closed its channel but lives on; killing it");
                interp.signal_group(Signal::SIGKILL);
                match self.wait_exit(interp, KILL_WAIT) {
                    Some(exit) => exit,
                    None => {
                        tracing::error!(
                            pid = interp.pid().as_raw(),
                            "the interpreter did not die after SIGKILL; abandoned"
                        );
                        self.interpreter = None;
                        return self.on_lost(Exit::Signal(Signal::SIGKILL as i32));
                    }
                }
            }
        };
        self.on_death(exit)
    }

    /// Reads and handles the driver's messages until none is waiting; false
    /// when the channel reached end of file.
    fn drain_driver(&mut self) -> io::Result<bool> {
        loop {
            let Some(interp) = &self.interpreter else {
                return Ok(true);
            };
            let n = match pipe::read(interp.from_driver.as_fd(), &mut self.buf)? {
                Read::Data(n) => n,
                Read::Again => return Ok(true),
                Read::Eof => return Ok(false),
            };
            self.from_driver.extend_from_slice(&self.buf[..n]);
            while let Some(end) = self.from_driver.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.from_driver.drain(..=end).collect();
                self.on_driver_message(&line[..line.len() - 1])?;
            }
            if pipe::emptied(n, &self.buf) {
                return Ok(true);
            }
        }
    }

    fn on_driver_message(&mut self, line: &[u8]) -> io::Result<()> {
        let Some(message) = driver::parse(line) else {
            tracing::warn!(line = %String::from_utf8_lossy(line), "unknown message from the driver");
            return Ok(());
        };
        let Some(call) = &mut self.call else {
            tracing::warn!(?message, "message from the driver outside a call");
            return Ok(());
        };
        match message {
            Message::Start => {
                call.phase = Phase::Running;
                call.signalled = false;
                self.deliver_interrupt();
            }
            Message::Hold => {
                call.phase = Phase::Holding;
                self.to_driver
                    .extend_from_slice(driver::held(std::mem::take(&mut call.signalled)));
                self.write_driver();
            }
            Message::Done(status) => {
                self.read_output(DRAIN_AFTER_DONE);
                self.finish(status, None)?;
            }
        }
        Ok(())
    }

    /// Writes what it can of the pending bytes to the driver.
    fn write_driver(&mut self) {
        let Some(interp) = &self.interpreter else {
            return;
        };
        while !self.to_driver.is_empty() {
            match nix::unistd::write(&interp.to_driver, &self.to_driver) {
                Ok(n) => {
                    self.to_driver.drain(..n);
                }
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => return,
                Err(e) => {
                    // EPIPE: the driver is gone; SIGCHLD follows.
                    tracing::warn!("writing to the driver: {e}");
                    self.to_driver.clear();
                    return;
                }
            }
        }
    }

    /// Drains the signalfd and handles the interpreter's death, if it died.
    fn check_child(&mut self) -> io::Result<()> {
        while let Ok(Some(_)) = self.sigchld.read_signal() {}
        match self.interpreter.as_ref().and_then(Interpreter::exited) {
            Some(exit) => self.on_death(exit),
            None => Ok(()),
        }
    }

    /// Waits up to `limit` for the interpreter to exit; how it ended.
    fn wait_exit(&self, interp: &Interpreter, limit: Duration) -> Option<Exit> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(exit) = interp.exited() {
                return Some(exit);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let timeout = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
            let mut fds = [PollFd::new(self.sigchld.as_fd(), PollFlags::POLLIN)];
            let _ = poll(&mut fds, timeout);
            while let Ok(Some(_)) = self.sigchld.read_signal() {}
        }
    }

    /// The interpreter exited: messages it sent before come first (a call it
    /// finished is answered as usual), then what is left of its process group
    /// is killed, its output read to the end, and the running call, if any,
    /// answered with the exit.
    fn on_death(&mut self, exit: Exit) -> io::Result<()> {
        self.drain_driver()?;
        let Some(mut interp) = self.interpreter.take() else {
            return Ok(());
        };
        tracing::info!(pid = interp.pid().as_raw(), ?exit, "the interpreter died");
        // Before reaping: the zombie keeps the group's id from being reused.
        interp.signal_group(Signal::SIGKILL);
        interp.reap();
        let deadline = Instant::now() + DRAIN_AFTER_DEATH;
        while interp.stdout.is_some() || interp.stderr.is_some() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!("a process outside the interpreter's group holds its output open");
                break;
            }
            let mut fds: Vec<PollFd> = [&interp.stdout, &interp.stderr]
                .into_iter()
                .flatten()
                .map(|fd| PollFd::new(fd.as_fd(), PollFlags::POLLIN))
                .collect();
            let timeout = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
            match poll(&mut fds, timeout) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(e) => return Err(with_context(e, "poll")),
            }
            drop(fds);
            // The call ends next: nothing more of it goes live.
            let (stdout, stderr) = (&mut self.stdout, &mut self.stderr);
            pump(&mut interp.stdout, &mut self.buf, usize::MAX, |data| {
                stdout.push(data);
            });
            pump(&mut interp.stderr, &mut self.buf, usize::MAX, |data| {
                stderr.push(data);
            });
        }
        self.on_lost(exit)
    }

    /// The interpreter is gone: the next exec starts a fresh one, and the
    /// running call, if any, is answered with how it ended.
    fn on_lost(&mut self, exit: Exit) -> io::Result<()> {
        self.lost_state = true;
        self.finish(exit.status(), Some(exit))
    }

    /// Answers the running call with what it printed.
    fn finish(&mut self, status: i32, exit: Option<Exit>) -> io::Result<()> {
        let Some(call) = self.call.take() else {
            return Ok(());
        };
        // What waits to go live is in the reply: nothing follows it.
        self.live.stop();
        let stdout = std::mem::replace(&mut self.stdout, Cap::new(self.cap_limit));
        let stderr = std::mem::replace(&mut self.stderr, Cap::new(self.cap_limit));
        let (outputs, outputs_more) = match (&mut self.workspace, self.outputs_before.take()) {
            (Some(workspace), Some(before)) => workspace.changed_since(&before),
            _ => (Vec::new(), 0),
        };
        let reply = ExecReply {
            id: call.id,
            status,
            stdout: stdout.render(),
            stderr: stderr.render(),
            stdout_dropped: stdout.dropped(),
            stderr_dropped: stderr.dropped(),
            exit,
            restarted: call.restarted,
            interrupted: call.interrupted,
            flooded: call.flooded,
            duration_ms: u64::try_from(call.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            outputs,
            outputs_more,
        };
        tracing::debug!(id = call.id, status, ?exit, "call done");
        send(&Reply::Exec(reply))
    }

    /// Reads requests; false when stdin reached end of file.
    fn read_requests(&mut self) -> io::Result<bool> {
        let n = match pipe::read(io::stdin().as_fd(), &mut self.buf)? {
            Read::Data(n) => n,
            Read::Again => return Ok(true),
            Read::Eof => {
                if self.requests.pending() > 0 {
                    tracing::warn!(
                        bytes = self.requests.pending(),
                        "stdin closed inside a frame"
                    );
                }
                tracing::info!("stdin closed");
                return Ok(false);
            }
        };
        self.requests.push(&self.buf[..n]);
        while let Some(split) = self.requests.next_frame() {
            let keep_going = match split {
                Split::Frame(line) => self.on_frame(&line)?,
                Split::TooLarge => {
                    send(&Reply::Error {
                        id: None,
                        code: ErrorCode::FrameTooLarge,
                        message: format!("a request line exceeds {} bytes", frame::MAX_FRAME_BYTES),
                    })?;
                    true
                }
            };
            if !keep_going {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Handles one request; false after `shutdown`.
    fn on_frame(&mut self, line: &[u8]) -> io::Result<bool> {
        let request = match frame::decode::<Request>(line) {
            Ok(request) => request,
            Err(e) => {
                send(&Reply::Error {
                    id: frame::salvage_id(line),
                    code: ErrorCode::BadRequest,
                    message: e.to_string(),
                })?;
                return Ok(true);
            }
        };
        tracing::debug!(id = request.id(), "request");
        let busy = self.call.is_some();
        match request {
            Request::Exec {
                id,
                code,
                output_bytes,
                files,
                once,
                live,
            } => self.exec(id, &code, output_bytes, &files, once, live)?,
            Request::Put { id, file, data } => match &self.workspace {
                Some(workspace) => self.inbox.put(workspace.root(), file, &data),
                None => tracing::warn!(id, "a put, and no workspace"),
            },
            Request::Read {
                id,
                path,
                offset,
                max_bytes,
            } => send(&self.read(id, &path, offset, max_bytes))?,
            Request::Interrupt { id } => {
                self.interrupt();
                send(&Reply::Ack { id, busy })?;
            }
            Request::Ping { id } => send(&Reply::Ack { id, busy })?,
            Request::Shutdown { id } => {
                send(&Reply::Ack { id, busy })?;
                return Ok(false);
            }
            Request::Spawn { id, argv, tty } => self.spawn(id, &argv, tty)?,
            Request::Input { id, spawn, data } => {
                let Ok(bytes) = frame::decode_data(&data) else {
                    return send(&Reply::Error {
                        id: Some(id),
                        code: ErrorCode::BadRequest,
                        message: "input: data is not base64".into(),
                    })
                    .map(|()| true);
                };
                let running = self.spawned.as_ref().filter(|s| s.id == spawn);
                let busy = running.is_some_and(|s| s.input(&bytes));
                send(&Reply::Ack { id, busy })?;
            }
            Request::Resize {
                id,
                spawn,
                rows,
                cols,
            } => {
                let running = self.spawned.as_ref().filter(|s| s.id == spawn);
                let busy = running.is_some_and(|s| s.resize(TtySize { rows, cols }));
                send(&Reply::Ack { id, busy })?;
            }
            Request::Stop { id, spawn } => {
                let running = self.spawned.as_ref().filter(|s| s.id == spawn);
                if let Some(spawned) = running {
                    spawned.kill_group();
                }
                send(&Reply::Ack {
                    id,
                    busy: running.is_some(),
                })?;
            }
        }
        Ok(true)
    }

    /// Starts `argv` beside the interpreter (spawn.rs), or says why not.
    fn spawn(&mut self, id: u64, argv: &[String], tty: Option<TtySize>) -> io::Result<()> {
        let refuse = |code, message: String| {
            send(&Reply::Error {
                id: Some(id),
                code,
                message,
            })
        };
        if let Some(running) = &self.spawned {
            return refuse(
                ErrorCode::Busy,
                format!("spawn {} is still running", running.id),
            );
        }
        match Spawned::start(id, argv, &self.config.workspace, tty) {
            Ok(spawned) => {
                tracing::info!(id, pid = spawned.pid().as_raw(), "spawned an argv");
                self.spawned = Some(spawned);
                Ok(())
            }
            Err(spawn::Refused::Bad(why)) => refuse(ErrorCode::BadRequest, why),
            Err(spawn::Refused::Failed(why)) => refuse(ErrorCode::SpawnFailed, why),
        }
    }

    /// Passes on what the spawn wrote, a chunk an `output` reply, at most a
    /// few chunks a stream before the loop looks at the rest.
    fn pass_spawned_output(&mut self) -> io::Result<()> {
        let Some(spawned) = &mut self.spawned else {
            return Ok(());
        };
        let id = spawned.id;
        for (stream, pipe) in [
            (Stream::Stdout, &mut spawned.stdout),
            (Stream::Stderr, &mut spawned.stderr),
        ] {
            for _ in 0..4 {
                let Some(fd) = pipe else { break };
                let most = MAX_CHUNK_BYTES.min(self.buf.len());
                let chunk = &mut self.buf[..most];
                match pipe::read(fd.as_fd(), chunk) {
                    Ok(Read::Data(n)) => {
                        send(&Reply::Output {
                            id,
                            stream,
                            data: frame::encode_data(&chunk[..n]),
                        })?;
                        if pipe::emptied(n, chunk) {
                            break;
                        }
                    }
                    Ok(Read::Again) => break,
                    Ok(Read::Eof) => *pipe = None,
                    // A pseudo-terminal's master once every slave closed.
                    Err(e) if e.raw_os_error() == Some(nix::libc::EIO) => *pipe = None,
                    Err(e) => {
                        tracing::warn!("reading a spawn's output: {e}");
                        *pipe = None;
                    }
                }
            }
        }
        Ok(())
    }

    /// Answers the spawn once it exited and its output was read to the end
    /// (or [`DRAIN_AFTER_DEATH`] after it exited, when a process that left
    /// its group holds its pipes).
    fn finish_spawned(&mut self) -> io::Result<()> {
        let Some(spawned) = &mut self.spawned else {
            return Ok(());
        };
        spawned.check_exit();
        let Some((exit, at)) = spawned.exit else {
            return Ok(());
        };
        let drained = spawned.stdout.is_none() && spawned.stderr.is_none();
        if !drained && at.elapsed() < DRAIN_AFTER_DEATH {
            return Ok(());
        }
        let id = spawned.id;
        self.spawned = None;
        tracing::info!(id, ?exit, "the spawned argv ended");
        send(&Reply::Spawned {
            id,
            status: exit.status(),
            exit,
        })
    }

    /// The answer to `read`.
    fn read(&self, id: u64, path: &str, offset: u64, max_bytes: u64) -> Reply {
        let not_found = |message: String| Reply::Error {
            id: Some(id),
            code: ErrorCode::NotFound,
            message,
        };
        match &self.workspace {
            Some(workspace) => match workspace.read(id, path, offset, max_bytes) {
                Ok(file) => Reply::File(file),
                Err(why) => not_found(format!("outputs/{path}: {why}")),
            },
            None => not_found("this agent has no workspace".into()),
        }
    }

    fn exec(
        &mut self,
        id: u64,
        code: &str,
        output_bytes: usize,
        files: &[FileIn],
        once: bool,
        live: bool,
    ) -> io::Result<()> {
        let refuse = |code, message: String| {
            send(&Reply::Error {
                id: Some(id),
                code,
                message,
            })
        };
        let refused = match &self.call {
            Some(call) => Some((
                ErrorCode::Busy,
                format!("call {} is still running", call.id),
            )),
            None if code.contains('\0') => {
                Some((ErrorCode::BadRequest, "the code contains a NUL byte".into()))
            }
            None => None,
        };
        if let Some((code, message)) = refused {
            // What was put for this exec goes with it.
            if let Some(workspace) = &self.workspace {
                self.inbox.place(workspace.root(), &[]).ok();
            }
            return refuse(code, message);
        }
        let placed = match &self.workspace {
            Some(workspace) => self.inbox.place(workspace.root(), files),
            None if files.is_empty() => Ok(()),
            None => Err(Refused::Bad("this agent has no workspace".into())),
        };
        match placed {
            Ok(()) => {}
            Err(Refused::Bad(why)) => return refuse(ErrorCode::BadFile, why),
            Err(Refused::Exists(path)) => {
                return refuse(
                    ErrorCode::FileExists,
                    format!("`{path}` exists in /workspace"),
                );
            }
        }
        let restarted = if self.interpreter.is_none() {
            if let Err(e) = self.start_interpreter() {
                return refuse(ErrorCode::SpawnFailed, e.to_string());
            }
            std::mem::take(&mut self.lost_state)
        } else {
            false
        };
        self.cap_limit = output_bytes.min(MAX_OUTPUT_BYTES);
        // Output that came between calls stays, with the cap it came under.
        for cap in [&mut self.stdout, &mut self.stderr] {
            if cap.is_empty() {
                *cap = Cap::new(self.cap_limit);
            }
        }
        // After the files passed in, so that those are not listed as outputs.
        self.outputs_before = self.workspace.as_mut().map(Workspace::snapshot);
        self.call = Some(Call {
            id,
            started: Instant::now(),
            phase: Phase::Sent,
            interrupt_due: None,
            interrupted: false,
            signalled: false,
            restarted,
            once: once.then(|| (self.cap_limit as u64).saturating_mul(FLOOD_FACTOR)),
            flooded: None,
        });
        self.live.start(live);
        if once {
            self.to_driver.extend_from_slice(driver::ONCE);
        }
        // An empty message is the driver's `once`: empty code is a newline.
        let code = if code.is_empty() { "\n" } else { code };
        self.to_driver
            .extend_from_slice(&driver::code_message(code));
        self.write_driver();
        Ok(())
    }

    /// Interrupts the running call, if any; a `once` call's interpreter is
    /// killed instead, as the run wrapper's process tree would be.
    fn interrupt(&mut self) {
        if let Some(call) = &mut self.call {
            if call.once.is_some() {
                if let Some(interp) = &self.interpreter {
                    tracing::debug!(id = call.id, "SIGKILL to a one-shot call");
                    interp.signal_group(Signal::SIGKILL);
                }
                return;
            }
            call.interrupt_due = Some(Instant::now());
            self.deliver_interrupt();
        }
    }

    /// Kills a `once` call's interpreter when one of its streams passed the
    /// flood bound, and notes which.
    fn stop_flood(&mut self) {
        let (Some(call), Some(interp)) = (&mut self.call, &self.interpreter) else {
            return;
        };
        let Some(bound) = call.once else {
            return;
        };
        if call.flooded.is_some() {
            return;
        }
        let stream = match (self.stdout.total() > bound, self.stderr.total() > bound) {
            (true, _) => Stream::Stdout,
            (false, true) => Stream::Stderr,
            (false, false) => return,
        };
        tracing::debug!(id = call.id, ?stream, "a one-shot call flooded: SIGKILL");
        interp.signal_group(Signal::SIGKILL);
        call.flooded = Some(stream);
    }

    /// Sends SIGINT to the interpreter's process group if an interrupt is due
    /// and the driver can take it.
    fn deliver_interrupt(&mut self) {
        let (Some(call), Some(interp)) = (&mut self.call, &self.interpreter) else {
            return;
        };
        let now = Instant::now();
        if call.phase != Phase::Running || call.interrupt_due.is_none_or(|due| due > now) {
            return;
        }
        tracing::debug!(id = call.id, "SIGINT");
        interp.signal_group(Signal::SIGINT);
        call.interrupted = true;
        call.signalled = true;
        call.interrupt_due = Some(now + INTERRUPT_REPEAT);
    }

    /// How long the loop may sleep: until a spawn's drain time is up, a
    /// repeated SIGINT is due, or live output may go.
    fn timeout(&self) -> PollTimeout {
        let now = Instant::now();
        // A spawn that exited while something holds its pipes is answered
        // when its drain time is up.
        let drained = (self.spawned.as_ref())
            .and_then(|s| s.exit)
            .map(|(_, at)| at + DRAIN_AFTER_DEATH);
        let interrupt = (self.call.as_ref())
            .filter(|call| call.phase == Phase::Running)
            .and_then(|call| call.interrupt_due);
        match [drained, interrupt, self.live.due(now)]
            .into_iter()
            .flatten()
            .min()
        {
            Some(due) => {
                let left = due.saturating_duration_since(now);
                // Rounded up, so that the loop does not wake just before.
                PollTimeout::try_from(left + Duration::from_millis(1)).unwrap_or(PollTimeout::MAX)
            }
            None => PollTimeout::NONE,
        }
    }

    /// Sends the running call's live output that is due (live.rs): an
    /// `output` with the call's id for each stream whose period is over.
    fn send_live(&mut self) -> io::Result<()> {
        let Some(call) = &self.call else {
            return Ok(());
        };
        let id = call.id;
        for (stream, data) in self.live.take_due(Instant::now()) {
            send(&Reply::Output {
                id,
                stream,
                data: frame::encode_data(&data),
            })?;
        }
        Ok(())
    }

    /// Kills the interpreter's process group and waits (bounded) for it.
    fn kill_interpreter(&mut self) {
        let Some(interp) = self.interpreter.take() else {
            return;
        };
        interp.signal_group(Signal::SIGKILL);
        if self.wait_exit(&interp, KILL_WAIT).is_some() {
            interp.reap();
        } else {
            tracing::error!(
                pid = interp.pid().as_raw(),
                "the interpreter did not die after SIGKILL"
            );
        }
    }
}

fn with_context(e: Errno, what: &str) -> io::Error {
    io::Error::new(io::Error::from(e).kind(), format!("{what}: {e}"))
}

/// Writes one reply to stdout.
fn send(reply: &Reply) -> io::Result<()> {
    let line = frame::encode(reply).map_err(io::Error::other)?;
    let mut out = io::stdout().lock();
    out.write_all(&line)?;
    out.flush()
}
