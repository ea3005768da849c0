//! The control socket (docs/cli.md): a serving server listens on a Unix
//! socket, `PID.sock` in its user's directory (wire.rs: `socket_dir`), for
//! `nix-sandbox-mcp sandbox` (sandbox/) to list, inspect and end its
//! sessions. Only the server's own uid gets in, twice over:
//!
//! - the directory is made mode 0700, and one that is already there is
//!   used only when it is a directory (not a symbolic link) of the
//!   server's uid with no permission for group or others; else no socket,
//!   one line logged. The socket is mode 0600.
//! - every connection's peer uid (SO_PEERCRED) must be the server's own,
//!   whatever the modes became; another is closed unanswered, one line
//!   logged.
//!
//! The socket is removed when the server stops.

pub mod wire;

use std::future::Future;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

use crate::admission::{Chunk, ExecEnd, ExecRefused, Keys, OpenSession, SessionSlots, Terminal};
use wire::{Event, Op, Request, Response, Session, VERSION};

/// How long `destroy` waits for a cancelled call to give its session back.
const DESTROY_WAIT: Duration = Duration::from_secs(15);
const DESTROY_POLL: Duration = Duration::from_millis(50);

/// Why a session ended by `destroy`, told to its next call.
const DESTROYED: &str = "a person ended it (nix-sandbox-mcp sandbox destroy)";

/// What makes a person's sessions (`create`): the MCP server's own way of
/// starting one, given to [`start`].
pub trait Create: Send + Sync {
    /// Makes session `name` of environment `env` with `packages` added,
    /// under `profile`; the refusal's one line.
    fn create(
        &self,
        env: String,
        name: String,
        packages: Option<Vec<String>>,
        profile: Option<String>,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>;

    /// The profiles `create` takes, sorted by name.
    fn profiles(&self) -> Vec<wire::ProfileShown>;
}

/// A listening control socket; dropping it removes the socket file.
#[derive(Debug)]
pub struct Control {
    listener: UnixListener,
    path: PathBuf,
    /// The uid every peer must have.
    owner: u32,
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Makes `dir` (mode 0700) if missing, and checks that it is a directory
/// of `owner`'s that nobody else may enter: a symbolic link or a directory
/// planted by another user in its place is refused, naming what is wrong.
pub fn prepare_dir(dir: &Path, owner: u32) -> io::Result<()> {
    if let Some(parent) = dir.parent()
        && !parent.exists()
    {
        std::fs::create_dir_all(parent)?;
    }
    match rustix::fs::mkdir(dir, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    check_dir(dir, owner)
}

/// Checks that `dir` is a directory of `owner`'s, not a symbolic link,
/// that nobody else may enter (what the CLI checks before it trusts a
/// socket there).
pub fn check_dir(dir: &Path, owner: u32) -> io::Result<()> {
    let fd = rustix::fs::open(
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP => io::Error::other(format!(
            "{} is not a directory (a symbolic link or a file in its place)",
            dir.display()
        )),
        e => e.into(),
    })?;
    let stat = rustix::fs::fstat(fd.as_fd())?;
    if stat.st_uid != owner {
        return Err(io::Error::other(format!(
            "{} belongs to uid {}, not to this server's uid {owner}",
            dir.display(),
            stat.st_uid
        )));
    }
    if stat.st_mode & 0o077 != 0 {
        return Err(io::Error::other(format!(
            "{} has mode {:o}: group or others may enter it (it must be 0700)",
            dir.display(),
            stat.st_mode & 0o7777
        )));
    }
    Ok(())
}

impl Control {
    /// Listens on `PID.sock` in `dir` (made and checked: [`prepare_dir`]),
    /// for peers of uid `owner`.
    pub fn bind(dir: &Path, owner: u32) -> io::Result<Self> {
        prepare_dir(dir, owner)?;
        let path = dir.join(wire::socket_name(std::process::id()));
        // A socket left by a dead server of the same pid.
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let listener = UnixListener::bind(&path)?;
        let control = Self {
            listener,
            path,
            owner,
        };
        rustix::fs::chmod(&control.path, Mode::from_raw_mode(0o600))?;
        Ok(control)
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Answers connections until `shutdown`, each on a task of its own.
    pub async fn serve(
        self,
        slots: SessionSlots,
        creator: Option<Arc<dyn Create>>,
        shutdown: CancellationToken,
    ) {
        loop {
            let accepted = tokio::select! {
                () = shutdown.cancelled() => return,
                accepted = self.listener.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "control socket: accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            match stream.peer_cred().map(|c| c.uid()) {
                Ok(uid) if uid == self.owner => {
                    tokio::spawn(answer(stream, slots.clone(), creator.clone()));
                }
                Ok(uid) => tracing::warn!(
                    "control socket: refused a connection from uid {uid}: only this server's uid {} may use it",
                    self.owner
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "control socket: refused a connection whose peer is unknown")
                }
            }
        }
    }
}

/// Starts the control socket of a serving server whose sessions `slots`
/// holds, in `dir` (wire.rs: `socket_dir`), making a person's sessions
/// with `creator`; none (one line said) when it has no directory or the
/// socket cannot be made there.
pub fn start(
    slots: SessionSlots,
    creator: Option<Arc<dyn Create>>,
    shutdown: &CancellationToken,
    dir: Option<&Path>,
) {
    let owner = nix::unistd::geteuid().as_raw();
    let Some(dir) = dir else {
        tracing::info!(
            "control socket: none (XDG_RUNTIME_DIR is unset): `nix-sandbox-mcp sandbox` cannot see this server"
        );
        return;
    };
    match Control::bind(dir, owner) {
        Ok(control) => {
            tracing::info!(socket = %control.path().display(), "control socket listening (nix-sandbox-mcp sandbox)");
            tokio::spawn(control.serve(slots, creator, shutdown.clone()));
        }
        Err(e) => tracing::error!(
            "control socket: none, {e}; `nix-sandbox-mcp sandbox` cannot see this server (remove it or fix its owner and mode, then restart the server)"
        ),
    }
}

/// Answers each request line of one connection.
async fn answer(stream: UnixStream, slots: SessionSlots, creator: Option<Arc<dyn Create>>) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read);
    let pid = std::process::id();
    loop {
        let mut line = Vec::new();
        let read = (&mut lines)
            .take(wire::MAX_REQUEST_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let response = if line.len() > wire::MAX_REQUEST_BYTES {
            Response::error(pid, "the request is longer than 64 KiB".into())
        } else {
            match respond(&line, &slots, creator.as_deref()).await {
                Answer::One(response) => response,
                Answer::Exec { id, argv, terminal } => {
                    exec(&mut lines, &mut write, &slots, id, argv, terminal).await;
                    return;
                }
            }
        };
        let mut out = serde_json::to_vec(&response).unwrap_or_default();
        out.push(b'\n');
        if write.write_all(&out).await.is_err() || line.len() > wire::MAX_REQUEST_BYTES {
            return;
        }
    }
}

/// What a request line is answered with.
enum Answer {
    One(Response),
    /// A stream of events (`exec`).
    Exec {
        id: String,
        argv: Vec<String>,
        /// `enter`'s terminal size.
        terminal: Option<(u16, u16)>,
    },
}

/// The answer to one request line.
async fn respond(line: &[u8], slots: &SessionSlots, creator: Option<&dyn Create>) -> Answer {
    match respond_one(line, slots, creator).await {
        Ok(response) => Answer::One(response),
        Err((id, argv, terminal)) => Answer::Exec { id, argv, terminal },
    }
}

/// An `exec`'s (or `enter`'s) session, argv and terminal size.
type Exec = (String, Vec<String>, Option<(u16, u16)>);

/// The answer to one request line; an `exec`'s session and argv.
async fn respond_one(
    line: &[u8],
    slots: &SessionSlots,
    creator: Option<&dyn Create>,
) -> Result<Response, Exec> {
    let pid = std::process::id();
    // Read once: the version is checked before the request's shape, so a
    // request of another version is named as such.
    let request = serde_json::from_slice::<serde_json::Value>(line).and_then(|value| {
        match value.get("v").and_then(serde_json::Value::as_u64) {
            Some(v) if v != u64::from(VERSION) => Ok(Err(v)),
            _ => serde_json::from_value::<Request>(value).map(Ok),
        }
    });
    let request = match request {
        Ok(Ok(request)) => request,
        Ok(Err(version)) => {
            return Ok(Response::error(
                pid,
                format!(
                    "protocol version {version} is not this server's ({VERSION}): use the nix-sandbox-mcp that runs this server"
                ),
            ));
        }
        Err(e) => return Ok(Response::error(pid, format!("not a request: {e}"))),
    };
    Ok(match request.op {
        Op::List => Response::ok(pid, every(slots)),
        Op::Status { id } => match one(slots, &id) {
            Ok(session) => Response::ok(pid, vec![session]),
            Err(e) => Response::error(pid, e),
        },
        Op::Destroy { id } => match destroy(slots, &id).await {
            Ok(session) => Response::ok(pid, vec![session]),
            Err(e) => Response::error(pid, e),
        },
        Op::Exec { id, argv } => return Err((id, argv, None)),
        Op::Enter {
            id,
            rows,
            cols,
            term,
        } => {
            let argv = ["sh", "-c", wire::ENTER_SHELL, "sh"].map(String::from);
            let argv = [&argv[..], &[term.unwrap_or_default()]].concat();
            return Err((id, argv, Some((rows, cols))));
        }
        Op::Create {
            id,
            env,
            packages,
            profile,
        } => match create(slots, creator, id, env, packages, profile).await {
            Ok(session) => Response::ok(pid, vec![session]),
            Err(e) => Response::error(pid, e),
        },
        Op::Profiles => Response {
            profiles: Some(creator.map(Create::profiles).unwrap_or_default()),
            ..Response::ok(pid, Vec::new())
        },
    })
}

/// Makes session `id` (refused when one of that name is open) and
/// describes it.
async fn create(
    slots: &SessionSlots,
    creator: Option<&dyn Create>,
    id: String,
    env: String,
    packages: Option<Vec<String>>,
    profile: Option<String>,
) -> Result<Session, String> {
    let Some(creator) = creator else {
        return Err("this server makes no sessions for a person".into());
    };
    if every(slots).iter().any(|s| s.id == id) {
        return Err(format!(
            "a session `{id}` is open on server {} already: choose another --name",
            std::process::id()
        ));
    }
    creator.create(env, id.clone(), packages, profile).await?;
    tracing::info!(session = %id, "a person made the session");
    every(slots)
        .into_iter()
        .find(|s| s.id == id && s.client == crate::admission::ClientKey::person().as_str())
        .ok_or_else(|| format!("session `{id}` ended as soon as it was made"))
}

/// How many chunks of a command's output wait for the connection, and
/// how many of a person's key lines wait for the command.
const EXEC_BACKLOG: usize = 16;

/// Runs `argv` in session `id` (on a pseudo-terminal of `terminal`'s
/// size: `enter`) and answers with its events as they come; the person
/// closing the connection stops the command.
async fn exec(
    lines: &mut BufReader<tokio::net::unix::OwnedReadHalf>,
    write: &mut tokio::net::unix::OwnedWriteHalf,
    slots: &SessionSlots,
    id: String,
    argv: Vec<String>,
    terminal: Option<(u16, u16)>,
) {
    let pid = std::process::id();
    let send = |response: Response| {
        let mut out = serde_json::to_vec(&response).unwrap_or_default();
        out.push(b'\n');
        out
    };
    let table = one(slots, &id).and_then(|_| {
        (slots.tables().into_iter())
            .find(|t| t.describe().iter().any(|s| s.name == id))
            .ok_or_else(|| format!("session `{id}` ended meanwhile"))
    });
    let table = match table {
        Ok(table) => table,
        Err(e) => {
            let _ = write.write_all(&send(Response::error(pid, e))).await;
            return;
        }
    };
    tracing::info!(session = %id, program = argv.first().map(String::as_str).unwrap_or(""), "a person's command runs in the session");
    let (chunks, mut output) = tokio::sync::mpsc::channel(EXEC_BACKLOG);
    let stop = CancellationToken::new();
    let (keys, input) = tokio::sync::mpsc::channel(EXEC_BACKLOG);
    let terminal = terminal.map(|(rows, cols)| Terminal { rows, cols, input });
    let on_terminal = terminal.is_some();
    let run = table.exec(id, argv, terminal, chunks, stop.clone());
    tokio::pin!(run);
    let mut gone = false;
    let mut scratch = Vec::new();
    // The person's key lines read and not yet taken by the command.
    let mut typed = std::collections::VecDeque::new();
    let ended = loop {
        tokio::select! {
            ended = &mut run => break ended,
            permit = keys.reserve(), if !typed.is_empty() => {
                if let (Ok(permit), Some(next)) = (permit, typed.pop_front()) {
                    permit.send(next);
                }
            }
            chunk = output.recv() => {
                let Some(chunk) = chunk else { continue };
                if !gone && write.write_all(&send(Response::event(pid, event_of(chunk)))).await.is_err() {
                    gone = true;
                    stop.cancel();
                }
            }
            // For `exec`, anything more from the person, or the end of the
            // connection (Ctrl-C), stops the command; for `enter`, the end
            // or a line that is not a key line does.
            read = bounded_line(lines, &mut scratch), if !gone && typed.len() < EXEC_BACKLOG => {
                let next = match read {
                    Ok(n) if n > 0 && on_terminal => keys_of(&scratch),
                    _ => None,
                };
                match next {
                    Some(next) => typed.push_back(next),
                    None => {
                        if on_terminal && matches!(read, Ok(n) if n > 0) {
                            tracing::warn!("control socket: a line after enter that is neither input nor resize; the shell is stopped");
                        }
                        gone = true;
                        stop.cancel();
                    }
                }
                scratch.clear();
            }
        }
    };
    // Output still queued when it ended.
    while let Ok(chunk) = output.try_recv() {
        if gone
            || write
                .write_all(&send(Response::event(pid, event_of(chunk))))
                .await
                .is_err()
        {
            return;
        }
    }
    let last = last_of(pid, ended);
    if !gone {
        let _ = write.write_all(&send(last)).await;
    }
}

/// The last line of an `exec`'s answer: how it ended, or why it did not
/// run.
fn last_of(pid: u32, ended: Result<ExecEnd, ExecRefused>) -> Response {
    match ended {
        Ok(end) => Response::event(
            pid,
            Event::Exit {
                code: end.code.unwrap_or_else(|| 128 + end.signal.unwrap_or(0)),
                signal: end.signal,
                timed_out: end.timed_out,
            },
        ),
        Err(refused) => Response {
            not_found: refused.not_found,
            ..Response::error(pid, refused.message)
        },
    }
}

/// One line of the person's into `line`, at most a request's length;
/// empty at the end of the connection.
async fn bounded_line(
    lines: &mut BufReader<tokio::net::unix::OwnedReadHalf>,
    line: &mut Vec<u8>,
) -> io::Result<usize> {
    let limit = (wire::MAX_REQUEST_BYTES + 1).saturating_sub(line.len()) as u64;
    lines.take(limit).read_until(b'\n', line).await
}

/// What a person's line after `enter` asks; `None` when it is not one
/// (or is cut at the length limit).
fn keys_of(line: &[u8]) -> Option<Keys> {
    if !line.ends_with(b"\n") {
        return None;
    }
    let line: wire::KeysLine = serde_json::from_slice(line).ok()?;
    match line.keys {
        wire::KeysOp::Input { data } => proto::frame::decode_data(&data).ok().map(Keys::Typed),
        wire::KeysOp::Resize { rows, cols } => Some(Keys::Resize { rows, cols }),
    }
}

/// Every open session of every table, sorted by name.
fn every(slots: &SessionSlots) -> Vec<Session> {
    let now = Instant::now();
    let mut all: Vec<Session> = (slots.tables().iter())
        .flat_map(|t| t.describe())
        .map(|s| shown(&s, now))
        .collect();
    all.sort_by(|a, b| (&a.id, &a.client).cmp(&(&b.id, &b.client)));
    all
}

/// Session `id`: exactly one open session of that name.
fn one(slots: &SessionSlots, id: &str) -> Result<Session, String> {
    let mut found: Vec<Session> = every(slots).into_iter().filter(|s| s.id == id).collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(format!(
            "no open session `{id}` on server {}; `nix-sandbox-mcp sandbox list` shows the open ones",
            std::process::id()
        )),
        n => Err(format!(
            "{n} clients of server {} each have a session `{id}`: this server serves MCP over HTTP, whose clients' sessions only they can name apart",
            std::process::id()
        )),
    }
}

/// Ends session `id`: its running call cancelled, then the session ended
/// once the call gave it back.
async fn destroy(slots: &SessionSlots, id: &str) -> Result<Session, String> {
    let session = one(slots, id)?;
    let Some(table) =
        (slots.tables().into_iter()).find(|t| t.describe().iter().any(|s| s.name == id))
    else {
        return Err(format!("session `{id}` ended meanwhile"));
    };
    let deadline = Instant::now() + DESTROY_WAIT;
    loop {
        if table.end_idle(id, DESTROYED.into()) {
            tracing::info!(session = id, "session ended through the control socket");
            return Ok(session);
        }
        if !table.cancel_call(id) {
            return Ok(session);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "session `{id}` runs a call that did not end within {} s of being cancelled; try again once it has",
                DESTROY_WAIT.as_secs()
            ));
        }
        tokio::time::sleep(DESTROY_POLL).await;
    }
}

/// A chunk of a command's output as its event (base64).
fn event_of(chunk: Chunk) -> Event {
    match chunk {
        Chunk::Stdout(bytes) => Event::Stdout {
            data: proto::frame::encode_data(&bytes),
        },
        Chunk::Stderr(bytes) => Event::Stderr {
            data: proto::frame::encode_data(&bytes),
        },
    }
}

fn shown(s: &OpenSession, now: Instant) -> Session {
    Session {
        id: s.name.clone(),
        env: s.env.clone(),
        client: s.client.clone(),
        age_s: now.saturating_duration_since(s.created).as_secs(),
        idle_s: now.saturating_duration_since(s.last_used).as_secs(),
        busy: s.busy,
        calls: s.calls,
        checkpoints: s.checkpoints,
        workspace_bytes: s.layer_bytes,
        workspace_max_bytes: s.layer_max_bytes,
        profile: s.profile.clone(),
    }
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
