//! A person's command in a session's jail (`nix-sandbox-mcp sandbox exec`,
//! docs/cli.md): an argv the session's agent spawns beside the interpreter
//! (proto's `spawn`), its output passed on as it comes, its end told.
//!
//! The agent is as untrusted as the code beside it (verify.rs): each chunk
//! is checked (base64, at most `MAX_CHUNK_BYTES`), the end's status must be
//! its exit's, and a reply of another request breaks the jail. Time is the
//! launcher's: past the environment's `timeout_s` the spawn is stopped,
//! and an agent that has not told its end [`STOP_GRACE`] after a stop is
//! taken as broken (the jail is killed). A person who goes away (`stop`)
//! stops it the same way.
//!
//! On a terminal (`sandbox enter`), the agent opens a pseudo-terminal in
//! the jail for it; what the person types and their window's size go to
//! the agent as `input` (in chunks of at most `MAX_CHUNK_BYTES`) and
//! `resize`, each acknowledged, and there is no timeout: the person ends
//! it.

use std::time::Duration;

use std::collections::HashSet;

use proto::frame::{ErrorCode, Exit, MAX_CHUNK_BYTES, Reply, Request, Stream, TtySize};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::OutputUnreadable;
use super::jail::{Broken, Jail};
use super::lease::Running;
use super::table::{Inner, Slot};
use super::verify;
use crate::admission::{Chunk, ExecEnd, ExecRefused, Keys, Terminal};

/// How long an agent has to tell a stopped spawn's end.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    pub exit: Exit,
    /// It ran past the timeout and was killed.
    pub timed_out: bool,
}

/// Why no end is told.
#[derive(Debug)]
pub enum Failed {
    /// The agent refused the argv (its one line: no such program, ...);
    /// `not_found`: it could not be started.
    Refused { message: String, not_found: bool },
    /// The agent broke the protocol or went away: the jail was killed.
    Broken(Broken),
}

/// How long a command on a terminal may run: as long as the person keeps
/// it (a deadline far enough never to come).
const NO_TIMEOUT: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Runs `argv` in `jail` (on `terminal`, when given), sending its output
/// to `chunks`, for at most `timeout`; `stop` (or `chunks` closed) kills
/// it.
pub async fn run(
    jail: &mut Jail,
    argv: Vec<String>,
    terminal: Option<Terminal>,
    chunks: mpsc::Sender<Chunk>,
    stop: CancellationToken,
    timeout: Duration,
) -> Result<End, Failed> {
    let broken = |jail: &Jail, b: Broken| {
        tracing::warn!("a person's command broke the jail: {b}");
        jail.kill();
        Failed::Broken(b)
    };
    let id = jail.fresh_id();
    let tty = (terminal.as_ref()).map(|t| TtySize {
        rows: t.rows,
        cols: t.cols,
    });
    let timeout = if tty.is_some() { NO_TIMEOUT } else { timeout };
    let mut input = terminal.map(|t| t.input);
    if let Err(b) = jail.request(&Request::Spawn { id, argv, tty }).await {
        return Err(broken(jail, b));
    }
    // The ids of the `input` and `resize` requests not acknowledged yet.
    let mut acks = HashSet::new();
    let mut deadline = Instant::now() + timeout;
    // The stop request's id once one was sent; whether for the timeout.
    let mut stopped: Option<u64> = None;
    let mut timed_out = false;
    loop {
        let reply = tokio::select! {
            reply = jail.next_reply() => reply,
            keys = next_keys(&mut input), if stopped.is_none() => {
                match keys {
                    Some(keys) => {
                        if let Err(b) = send_keys(jail, id, keys, &mut acks).await {
                            return Err(broken(jail, b));
                        }
                    }
                    None => input = None,
                }
                continue;
            }
            () = stop.cancelled(), if stopped.is_none() => {
                match send_stop(jail, id).await {
                    Ok(stop_id) => stopped = Some(stop_id),
                    Err(b) => return Err(broken(jail, b)),
                }
                deadline = Instant::now() + STOP_GRACE;
                continue;
            }
            () = tokio::time::sleep_until(deadline) => {
                if stopped.is_some() {
                    let what = "a stopped command's end not told".to_owned();
                    return Err(broken(jail, Broken::Unexpected(what)));
                }
                match send_stop(jail, id).await {
                    Ok(stop_id) => stopped = Some(stop_id),
                    Err(b) => return Err(broken(jail, b)),
                }
                timed_out = true;
                deadline = Instant::now() + STOP_GRACE;
                continue;
            }
        };
        let reply = match reply {
            Ok(reply) => reply,
            Err(b) => return Err(broken(jail, b)),
        };
        match take(reply, id, stopped, &mut acks) {
            Ok(Taken::Chunk(chunk)) => {
                // A person who stops reading holds the command up to its
                // deadline; one who went away stops it.
                let sent = tokio::time::timeout_at(deadline, chunks.send(chunk)).await;
                if !matches!(sent, Ok(Ok(()))) && stopped.is_none() {
                    stop.cancel();
                }
            }
            Ok(Taken::Ack) => {}
            Ok(Taken::End(exit)) => return Ok(End { exit, timed_out }),
            Ok(Taken::Refused(failed)) => return Err(failed),
            Err(b) => return Err(broken(jail, b)),
        }
    }
}

/// A reply to spawn `id` (or to its stop), checked.
enum Taken {
    Chunk(Chunk),
    Ack,
    End(Exit),
    Refused(Failed),
}

fn take(
    reply: Reply,
    id: u64,
    stopped: Option<u64>,
    acks: &mut HashSet<u64>,
) -> Result<Taken, Broken> {
    match reply {
        Reply::Output {
            id: of,
            stream,
            data,
        } if of == id => {
            let bytes = verify::chunk(&data).map_err(Broken::Invalid)?;
            Ok(Taken::Chunk(match stream {
                Stream::Stdout => Chunk::Stdout(bytes),
                Stream::Stderr => Chunk::Stderr(bytes),
            }))
        }
        Reply::Spawned {
            id: of,
            status,
            exit,
        } if of == id => {
            verify::spawned(status, exit).map_err(Broken::Invalid)?;
            Ok(Taken::End(exit))
        }
        Reply::Ack { id: of, .. } if Some(of) == stopped || acks.remove(&of) => Ok(Taken::Ack),
        Reply::Error {
            id: Some(of),
            code,
            message,
        } if of == id => {
            verify::message(&message).map_err(Broken::Invalid)?;
            Ok(Taken::Refused(Failed::Refused {
                not_found: code == ErrorCode::SpawnFailed,
                message,
            }))
        }
        other => Err(Broken::Unexpected(verify::describe(&other))),
    }
}

/// What the person did next to the terminal; `None` once they are gone
/// (never, without a terminal).
async fn next_keys(input: &mut Option<mpsc::Receiver<Keys>>) -> Option<Keys> {
    match input {
        Some(input) => input.recv().await,
        None => std::future::pending().await,
    }
}

/// Tells the agent what the person did to spawn `spawn`'s terminal, its
/// requests' ids left in `acks`.
async fn send_keys(
    jail: &mut Jail,
    spawn: u64,
    keys: Keys,
    acks: &mut HashSet<u64>,
) -> Result<(), Broken> {
    let requests: Vec<Request> = match keys {
        Keys::Typed(bytes) => (bytes.chunks(MAX_CHUNK_BYTES))
            .map(|chunk| Request::Input {
                id: jail.fresh_id(),
                spawn,
                data: proto::frame::encode_data(chunk),
            })
            .collect(),
        Keys::Resize { rows, cols } => vec![Request::Resize {
            id: jail.fresh_id(),
            spawn,
            rows,
            cols,
        }],
    };
    for request in requests {
        acks.insert(request.id());
        jail.request(&request).await?;
    }
    Ok(())
}

/// Asks the agent to kill spawn `spawn`; the stop's id.
async fn send_stop(jail: &mut Jail, spawn: u64) -> Result<u64, Broken> {
    let id = jail.fresh_id();
    jail.request(&Request::Stop { id, spawn }).await?;
    Ok(id)
}

impl Inner {
    /// Runs a person's `argv` in idle session `name`'s jail: the session is
    /// held as by a call (the model's call to it meanwhile is told it is
    /// busy, and `destroy` cancels it through `stop`), then given back.
    pub async fn exec_for_person(
        &self,
        name: &str,
        argv: Vec<String>,
        terminal: Option<Terminal>,
        chunks: mpsc::Sender<Chunk>,
        stop: CancellationToken,
    ) -> Result<ExecEnd, ExecRefused> {
        let refused = |message: String| ExecRefused {
            message,
            not_found: false,
        };
        let mut lease = self.acquire_open(name).map_err(|e| match e {
            OutputUnreadable::Busy => refused(format!(
                "session `{name}` is running a call of the model's; try again once it has ended \
                 (`nix-sandbox-mcp sandbox status {name}` shows it)"
            )),
            _ => refused(format!(
                "no open session `{name}`; `nix-sandbox-mcp sandbox list` shows the open ones"
            )),
        })?;
        let timeout = {
            let mut table = self.lock();
            let Some(entry) = table.open.get_mut(name) else {
                drop(table);
                lease.release();
                return Err(refused(format!("session `{name}` ended meanwhile")));
            };
            entry.running = Some(Running::new(&stop, &entry.env, std::time::Instant::now()));
            Duration::from_secs(entry.env.limits.ceiling().get())
        };
        let jail = match &mut lease.slot {
            Some(Slot::Jail(jail)) if !jail.has_exited() => jail,
            _ => {
                lease.release();
                return Err(refused(format!(
                    "session `{name}` has no running sandbox now (it stopped): the model's next \
                     call to it starts a fresh one"
                )));
            }
        };
        let ran = run(jail, argv, terminal, chunks, stop, timeout).await;
        lease.release();
        match ran {
            Ok(end) => Ok(ExecEnd {
                code: match end.exit {
                    Exit::Code(code) => Some(code),
                    Exit::Signal(_) => None,
                },
                signal: match end.exit {
                    Exit::Signal(signal) => Some(signal),
                    Exit::Code(_) => None,
                },
                timed_out: end.timed_out,
            }),
            Err(Failed::Refused { message, not_found }) => Err(ExecRefused {
                message: one_line(&message),
                not_found,
            }),
            Err(Failed::Broken(b)) => Err(refused(format!(
                "session `{name}`'s sandbox broke ({b}); the model's next call to it starts a \
                 fresh one"
            ))),
        }
    }
}

/// The agent's message on one line, at most 300 characters.
fn one_line(message: &str) -> String {
    let flat: String = message.split_whitespace().collect::<Vec<_>>().join(" ");
    flat.chars().take(300).collect()
}
