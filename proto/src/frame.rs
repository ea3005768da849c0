//! The launcher <-> agent protocol: one JSON object per line, UTF-8.
//!
//! - Transport: the launcher writes [`Request`]s to the agent's stdin and reads
//!   [`Reply`]s from the agent's stdout; the agent's stderr is its log. A frame
//!   is one line of at most [`MAX_FRAME_BYTES`] bytes, newline included.
//! - Ids: every request carries an `id` chosen by the launcher (any u64; use a
//!   fresh one per request). Every request gets exactly one reply carrying the
//!   same id (a `spawn` first gets its `output`s, and so may a `live`
//!   `exec`, with its id too; a `put` none); the launcher checks it. A line that cannot be parsed gets an
//!   `error` reply with the id when one could be read, else `id: null`.
//! - Ordering: the agent reads requests in order and runs one `exec` at a time.
//!   While an `exec` runs, the agent still answers `ping`, `interrupt` and
//!   `shutdown` at once, so their replies can overtake the running exec's.
//!   A second `exec` while one runs gets `error` `busy`.
//! - `exec`: runs `code` in the session's interpreter (state is kept between
//!   calls). stdout and stderr are captured separately, each capped at
//!   `output_bytes` (at most [`MAX_OUTPUT_BYTES`]) keeping head and tail, and
//!   rendered lossily as UTF-8 with a `[... N bytes dropped ...]` line at the
//!   cut. Output the interpreter's processes write between calls goes to the
//!   next call's reply. `status` is the call's own result: 0, 1 for an
//!   uncaught exception (python, node), `$?` for bash, 130 when interrupted.
//! - `interrupt`: SIGINT to the interpreter's process group while the code
//!   runs (deferred while the driver cannot take it), repeated every 500 ms
//!   until the call ends. Python raises KeyboardInterrupt; bash ends the
//!   snippet; node ends the cell (a sync loop is broken, an awaited promise
//!   abandoned). State is kept; the exec's reply has `interrupted: true`
//!   (status 130 unless the code handled it). The `ack` says `busy: true` when
//!   an exec was running. Code ignoring SIGINT runs on: reset the session.
//! - `ping`: an `ack`; `busy` says whether an exec is running.
//! - `shutdown`: an `ack`, then the agent kills the interpreter's process
//!   group and exits. Closing the agent's stdin does the same.
//! - Dead interpreter (`exit()`, `sys.exit(3)`, bash `exit 7`, `set -e` and a
//!   failing command, `process.exit(2)`, a signal): the reply of the call that
//!   saw it carries what was printed, `exit` (`{"code": N}` or
//!   `{"signal": N}`) and `status` (N, or 128+N for a signal). The agent kills
//!   what is left of that process group and starts a fresh interpreter when
//!   the next exec comes; that exec's reply has `restarted: true` (state was
//!   lost; files are kept). A death between calls shows only as `restarted`.
//! - User code never sees the agent's stdin or stdout, so nothing it prints
//!   can forge or break a frame: the agent is the jail's pid 1 (bubblewrap's
//!   `--as-pid-1`), the only process of the jail holding them, and not
//!   dumpable. The launcher still holds every reply to this description
//!   (its `session/verify.rs`): output within `output_bytes`, `status` and
//!   `exit` in range and agreeing, at most [`MAX_OUTPUTS_LISTED`] outputs, a
//!   `read` answered with what it asked for. A reply that is not, or a line
//!   that is not a reply to a request of the launcher's, ends the session.
//! - Files in: their bytes come first, in `put`s, each appending up to
//!   [`PUT_CHUNK_BYTES`] (`data`, base64) to the staged file number `file`
//!   (0-based, below `files::MAX_FILES`) of the next `exec`; a `put` has
//!   no reply: what goes wrong is told by that `exec`. The agent stages them
//!   in a fresh directory of the workspace, so they count against its size.
//!   The `exec`'s `files` then name where each staged file goes (a file no
//!   `put` was for is empty): paths `files::check_path` accepts, under the
//!   workspace (`/workspace`). All of them are checked before any is moved
//!   into place, so a call writes all its files or none: a path that exists
//!   and whose `replace` is not true gets `error` `file_exists` naming it;
//!   a path through or onto a symbolic link (never followed), a
//!   non-directory, or onto anything but a regular file, or a staged file
//!   that could not be written (the workspace full), gets `error`
//!   `bad_file` naming it; either way nothing runs and nothing is written.
//!   Directories on the way are made. At most `files::MAX_FILES` files.
//! - Outputs: the agent notes the regular files under `/workspace/outputs`
//!   (made if missing) before the code runs; the exec reply's `outputs` lists
//!   those that are new or changed after it (path relative to `outputs`,
//!   size, MIME type), at most [`MAX_OUTPUTS_LISTED`] of them, sorted by
//!   path; `outputs_more` counts the rest. Symbolic links and what they
//!   point to are never listed.
//! - `spawn`: runs `argv` (the program, found on `PATH`, and its
//!   arguments; no shell) beside the interpreter, whose state it does not
//!   touch, in a process group of its own, cwd the workspace, the agent's
//!   environment, stdin `/dev/null`, stdout and stderr on fresh pipes. Its
//!   output comes as it is written, in `output` replies carrying the
//!   spawn's id (`stream`, `data` base64, at most [`MAX_CHUNK_BYTES`]
//!   bytes each); once it has exited and both pipes reached end of file
//!   (or 1 s after it exited, when something else holds them), the rest
//!   of its process group is killed and one `spawned` reply says how it
//!   ended (`exit`, `status` as for exec). One spawn at a time (another
//!   gets `error` `busy`); a program that cannot be started gets `error`
//!   `spawn_failed`; an empty argv, a NUL byte or more than
//!   [`MAX_ARGV_BYTES`] gets `bad_request`. Requests are answered at once
//!   while it runs. `stop` sends SIGKILL to its process group (an `ack`).
//!   With `tty` (`rows`, `cols`) the argv gets a pseudo-terminal the agent
//!   opens in the jail instead of the pipes: a session of its own whose
//!   controlling terminal that is, its output as `stdout`; `input` writes
//!   bytes to it and `resize` sets its size (each an `ack`, `busy` false
//!   when no such spawn runs).
//! - Live output: an `exec` with `live` also gets, while it runs, `output`
//!   replies carrying the exec's id (`stream`, `data` base64), so that the
//!   launcher can show the newest lines in progress notifications: at most
//!   one per stream every [`LIVE_EVERY_MS`] ms, counted from the exec's
//!   arrival, each holding the newest bytes (at most [`LIVE_CHUNK_BYTES`])
//!   that stream got since the one before; the bytes between are skipped.
//!   None comes after the exec's reply, which still holds the whole capped
//!   output. Without `live`, none comes.
//! - `read`: up to `max_bytes` (at most [`MAX_READ_BYTES`]) of the output
//!   file at `path` (relative to `outputs`), from `offset`, as a `file` reply
//!   (`data` base64, `size` the file's size now, `eof`). Opened without
//!   following symbolic links, regular files only; otherwise `error`
//!   `not_found`. Answered at once, also while an exec runs.

use serde::{Deserialize, Serialize};

/// The largest frame in either direction, newline included.
pub const MAX_FRAME_BYTES: usize = 16 << 20;

/// The most bytes one `read` returns: base64 makes 4 MiB about 5.6 MiB.
pub const MAX_READ_BYTES: u64 = 4 << 20;

/// The most bytes of a file one `put` carries (base64: about 5.6 MiB).
pub const PUT_CHUNK_BYTES: usize = 4 << 20;

/// How many times its cap a stream of a one-shot run may write before the
/// run is stopped as a flood: far past what is kept, so only a program that
/// floods meets it.
pub const FLOOD_FACTOR: u64 = 1024;

/// The most outputs one exec reply lists.
pub const MAX_OUTPUTS_LISTED: usize = 64;

/// The largest `output_bytes` the agent honours (per stream); larger values
/// are lowered to it, so that a reply always fits in a frame (a rendered byte
/// takes at most 6 bytes of JSON).
pub const MAX_OUTPUT_BYTES: usize = 1 << 20;

/// What the launcher asks of the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Move the staged files into place at `files`, then run `code` in the
    /// interpreter; cap each output stream at `output_bytes`.
    ///
    /// With `once`, the call is the interpreter's only one and runs as the
    /// environment's run wrapper would run it (a script, not a cell: no
    /// value shown, the interpreter's own exit), and the interpreter exits
    /// after it; an `interrupt` kills its process group instead of sending
    /// SIGINT, and a stream past [`FLOOD_FACTOR`] times `output_bytes`
    /// kills it too (the reply's `flooded`).
    Exec {
        id: u64,
        code: String,
        output_bytes: usize,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        files: Vec<FileIn>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        once: bool,
        /// Send the output as it comes, throttled, in `output` replies with
        /// this id (the module documentation, "Live output").
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        live: bool,
    },
    /// Part of the staged file number `file` of the next exec: `data`
    /// (base64) is appended to it. No reply.
    Put { id: u64, file: usize, data: String },
    /// Part of an output file.
    Read {
        id: u64,
        path: String,
        offset: u64,
        max_bytes: u64,
    },
    /// Interrupt the running exec (SIGINT to the interpreter's process group).
    Interrupt { id: u64 },
    /// Is the agent alive, and is an exec running?
    Ping { id: u64 },
    /// Kill the interpreter and exit.
    Shutdown { id: u64 },
    /// Run `argv` (no shell) beside the interpreter: its output comes as
    /// `output` replies carrying this id, then one `spawned` (or an
    /// `error`).
    /// With `tty`, on a pseudo-terminal of that size instead of pipes.
    Spawn {
        id: u64,
        argv: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tty: Option<TtySize>,
    },
    /// SIGKILL to the process group of the running spawn `spawn`; an `ack`.
    Stop { id: u64, spawn: u64 },
    /// Bytes (`data`, base64, at most [`MAX_CHUNK_BYTES`]) typed into the
    /// pseudo-terminal of the running spawn `spawn`; an `ack`.
    Input { id: u64, spawn: u64, data: String },
    /// The new size of the running spawn `spawn`'s pseudo-terminal; an
    /// `ack`.
    Resize {
        id: u64,
        spawn: u64,
        rows: u16,
        cols: u16,
    },
}

/// A pseudo-terminal's size, in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TtySize {
    pub rows: u16,
    pub cols: u16,
}

impl Request {
    /// The request's id, which its reply carries.
    pub fn id(&self) -> u64 {
        match self {
            Request::Exec { id, .. }
            | Request::Put { id, .. }
            | Request::Read { id, .. }
            | Request::Interrupt { id }
            | Request::Ping { id }
            | Request::Shutdown { id }
            | Request::Spawn { id, .. }
            | Request::Stop { id, .. }
            | Request::Input { id, .. }
            | Request::Resize { id, .. } => *id,
        }
    }
}

/// What the agent answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Reply {
    /// The result of an `exec`.
    Exec(ExecReply),
    /// The answer to `read`.
    File(FileReply),
    /// The answer to `ping`, `interrupt` and `shutdown`: `busy` is true when an
    /// exec was running.
    Ack { id: u64, busy: bool },
    /// Bytes a spawned argv wrote (`data`: base64, at most
    /// [`MAX_CHUNK_BYTES`] of them), with the spawn's id; or the newest
    /// bytes of a `live` exec's stream (at most [`LIVE_CHUNK_BYTES`]), with
    /// the exec's id.
    Output {
        id: u64,
        stream: Stream,
        data: String,
    },
    /// A spawned argv ended: `exit` how, `status` its shell status (the
    /// code, or 128 + the signal).
    Spawned { id: u64, status: i32, exit: Exit },
    /// A request that could not be carried out.
    Error {
        id: Option<u64>,
        code: ErrorCode,
        message: String,
    },
}

impl Reply {
    /// The id of the request this answers (none for an unreadable line).
    pub fn id(&self) -> Option<u64> {
        match self {
            Reply::Exec(r) => Some(r.id),
            Reply::File(r) => Some(r.id),
            Reply::Ack { id, .. } | Reply::Output { id, .. } | Reply::Spawned { id, .. } => {
                Some(*id)
            }
            Reply::Error { id, .. } => *id,
        }
    }
}

/// The result of one `exec`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecReply {
    pub id: u64,
    /// The call's status, 0 to 255: 0 on success; see the module
    /// documentation.
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
    /// Bytes cut from the middle of stdout (and of stderr).
    pub stdout_dropped: u64,
    pub stderr_dropped: u64,
    /// Set when the interpreter died during this call.
    pub exit: Option<Exit>,
    /// This call ran in a fresh interpreter: the state of earlier calls is lost.
    pub restarted: bool,
    /// An interrupt was delivered to this call.
    pub interrupted: bool,
    pub duration_ms: u64,
    /// Files under `/workspace/outputs` this call created or changed.
    #[serde(default)]
    pub outputs: Vec<Output>,
    /// Further such files, not listed.
    #[serde(default)]
    pub outputs_more: u64,
    /// A `once` call's stream that passed [`FLOOD_FACTOR`] times the cap,
    /// for which the interpreter was killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flooded: Option<Stream>,
}

/// Where a file passed in goes: `path` relative to the workspace; a file
/// already there is replaced only when `replace` is true. Its bytes were
/// `put` before the exec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileIn {
    pub path: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replace: bool,
}

/// An output file a call created or changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Output {
    /// Relative to `/workspace/outputs`.
    pub path: String,
    pub size: u64,
    /// From its first bytes or its name (`files::mime_type`).
    pub mime: String,
}

/// Part of an output file, the answer to `read`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileReply {
    pub id: u64,
    pub path: String,
    /// The file's size when it was read.
    pub size: u64,
    pub offset: u64,
    /// The bytes read, base64 (standard alphabet, padded).
    pub data: String,
    /// The bytes read reach the end of the file.
    pub eof: bool,
}

impl FileReply {
    /// The bytes read.
    pub fn bytes(&self) -> Result<Vec<u8>, FrameError> {
        decode_data(&self.data)
    }
}

/// `bytes` as the `data` of a [`FileReply`].
pub fn encode_data(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The bytes of `data`, base64 (standard alphabet, padded).
pub fn decode_data(data: &str) -> Result<Vec<u8>, FrameError> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| FrameError::Base64(e.to_string()))
}

/// Which of a spawned argv's streams an `output` is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// The most bytes one `output` reply carries.
pub const MAX_CHUNK_BYTES: usize = 64 << 10;

/// The most bytes one live `output` of an exec carries: the newest, as
/// many as a progress message shows at most.
pub const LIVE_CHUNK_BYTES: usize = 2048;

/// The least time between two live `output`s of one stream of an exec, in
/// milliseconds.
pub const LIVE_EVERY_MS: u64 = 250;

/// The longest argv a `spawn` may carry, all its bytes together.
pub const MAX_ARGV_BYTES: usize = 256 << 10;

/// How an interpreter ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal.
    Signal(i32),
}

impl Exit {
    /// The shell's convention: the code, or 128 + the signal number.
    pub fn status(self) -> i32 {
        match self {
            Exit::Code(c) => c,
            Exit::Signal(s) => 128 + s,
        }
    }
}

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Not a request: bad JSON, unknown op or field, NUL byte in code.
    BadRequest,
    /// A line longer than [`MAX_FRAME_BYTES`]; it was skipped.
    FrameTooLarge,
    /// An exec is already running.
    Busy,
    /// The interpreter could not be started (the message says why).
    SpawnFailed,
    /// A file passed in could not be written (the message names it and
    /// says why); nothing ran.
    BadFile,
    /// A file passed in is at a path that exists, and its `replace` is not
    /// true (the message names it); nothing ran, nothing was written.
    FileExists,
    /// `read`: no regular output file at that path.
    NotFound,
}

/// Errors of [`encode`] and [`decode`].
#[derive(Debug)]
pub enum FrameError {
    /// The encoded frame would exceed [`MAX_FRAME_BYTES`].
    TooLarge(usize),
    /// Not valid JSON for the expected type.
    Json(serde_json::Error),
    /// `data` of a file reply is not base64.
    Base64(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge(n) => {
                write!(
                    f,
                    "frame of {n} bytes exceeds the limit of {MAX_FRAME_BYTES}"
                )
            }
            FrameError::Json(e) => write!(f, "invalid frame: {e}"),
            FrameError::Base64(e) => write!(f, "invalid file data: {e}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// One frame: `value` as JSON followed by a newline.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, FrameError> {
    let mut line = serde_json::to_vec(value).map_err(FrameError::Json)?;
    line.push(b'\n');
    if line.len() > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(line.len()));
    }
    Ok(line)
}

/// Parses one frame (with or without its newline).
pub fn decode<T: for<'de> Deserialize<'de>>(line: &[u8]) -> Result<T, FrameError> {
    if line.len() > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(line.len()));
    }
    serde_json::from_slice(line).map_err(FrameError::Json)
}

/// The `id` of a line that is not a valid [`Request`], when it has one, so
/// the error reply can name the request it answers.
pub fn salvage_id(line: &[u8]) -> Option<u64> {
    serde_json::from_slice::<serde_json::Value>(line)
        .ok()?
        .get("id")?
        .as_u64()
}

/// Splits a byte stream into frames, without I/O, so it serves a blocking
/// reader (the agent) and an async one (the launcher) alike: `push` what was
/// read, then take frames with `next_frame` until it returns `None`.
#[derive(Debug, Default)]
pub struct Splitter {
    buf: Vec<u8>,
    /// How much of `buf` is known to hold no newline.
    scanned: usize,
    /// Inside a line that was already reported too large: drop up to its end.
    skipping: bool,
}

/// One item out of a [`Splitter`].
#[derive(Debug, PartialEq, Eq)]
pub enum Split {
    /// A whole line, without its newline.
    Frame(Vec<u8>),
    /// A line longer than [`MAX_FRAME_BYTES`]; the rest of it is skipped.
    TooLarge,
}

impl Splitter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes read from the stream.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next complete frame, if any.
    pub fn next_frame(&mut self) -> Option<Split> {
        loop {
            let newline = self.buf[self.scanned..]
                .iter()
                .position(|&b| b == b'\n')
                .map(|i| self.scanned + i);
            self.scanned = 0;
            match newline {
                Some(end) if self.skipping => {
                    self.buf.drain(..=end);
                    self.skipping = false;
                }
                Some(end) if end < MAX_FRAME_BYTES => {
                    let mut line: Vec<u8> = self.buf.drain(..=end).collect();
                    line.pop();
                    return Some(Split::Frame(line));
                }
                Some(end) => {
                    self.buf.drain(..=end);
                    return Some(Split::TooLarge);
                }
                None if self.skipping => {
                    self.buf.clear();
                    return None;
                }
                None if self.buf.len() >= MAX_FRAME_BYTES => {
                    self.buf.clear();
                    self.skipping = true;
                    return Some(Split::TooLarge);
                }
                None => {
                    self.scanned = self.buf.len();
                    return None;
                }
            }
        }
    }

    /// Bytes of an unfinished line (a stream that ends here was cut).
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_have_a_stable_wire_form() {
        let r: Request =
            decode(br#"{"op":"exec","id":7,"code":"print(1)","output_bytes":100}"#).unwrap();
        assert_eq!(
            r,
            Request::Exec {
                id: 7,
                code: "print(1)".into(),
                output_bytes: 100,
                files: vec![],
                once: false,
                live: false,
            }
        );
        assert_eq!(r.id(), 7);
        let line = encode(&Request::Interrupt { id: 3 }).unwrap();
        assert_eq!(line, b"{\"op\":\"interrupt\",\"id\":3}\n");
    }

    #[test]
    fn files_and_reads_have_a_stable_wire_form() {
        let r: Request = decode(
            br#"{"op":"exec","id":1,"code":"x","output_bytes":9,"files":[{"path":"a.csv"},{"path":"b","replace":true}]}"#,
        )
        .unwrap();
        let Request::Exec { files, .. } = &r else {
            panic!("{r:?}")
        };
        assert_eq!(
            files,
            &[
                FileIn {
                    path: "a.csv".into(),
                    replace: false
                },
                FileIn {
                    path: "b".into(),
                    replace: true
                }
            ]
        );
        // `replace` only when true; a put carries its chunk as base64.
        let line = encode(&Request::Exec {
            id: 1,
            code: "x".into(),
            output_bytes: 9,
            files: files.clone(),
            once: false,
            live: false,
        })
        .unwrap();
        assert_eq!(
            line,
            b"{\"op\":\"exec\",\"id\":1,\"code\":\"x\",\"output_bytes\":9,\"files\":[{\"path\":\"a.csv\"},{\"path\":\"b\",\"replace\":true}]}\n"
        );
        let put: Request = decode(br#"{"op":"put","id":4,"file":1,"data":"AAE="}"#).unwrap();
        assert_eq!(
            put,
            Request::Put {
                id: 4,
                file: 1,
                data: encode_data(&[0, 1])
            }
        );
        // No files: the field is left out.
        let line = encode(&Request::Exec {
            id: 2,
            code: "x".into(),
            output_bytes: 9,
            files: vec![],
            once: false,
            live: false,
        })
        .unwrap();
        assert_eq!(
            line,
            b"{\"op\":\"exec\",\"id\":2,\"code\":\"x\",\"output_bytes\":9}\n"
        );
        let read: Request =
            decode(br#"{"op":"read","id":3,"path":"p.png","offset":0,"max_bytes":10}"#).unwrap();
        assert_eq!(read.id(), 3);
        let file = Reply::File(FileReply {
            id: 3,
            path: "p.png".into(),
            size: 3,
            offset: 0,
            data: encode_data(b"\x89PN"),
            eof: true,
        });
        let line = encode(&file).unwrap();
        assert!(line.starts_with(br#"{"type":"file","id":3"#));
        let Reply::File(back) = decode::<Reply>(&line).unwrap() else {
            panic!("not a file reply")
        };
        assert_eq!(back.bytes().unwrap(), b"\x89PN");
        assert_eq!(file.id(), Some(3));
    }

    #[test]
    fn live_is_asked_for_only_when_true() {
        // A frame from before `live` still parses, as not live.
        let old: Request =
            decode(br#"{"op":"exec","id":7,"code":"x","output_bytes":9,"once":true}"#).unwrap();
        assert!(matches!(
            old,
            Request::Exec {
                live: false,
                once: true,
                ..
            }
        ));
        let live: Request =
            decode(br#"{"op":"exec","id":7,"code":"x","output_bytes":9,"live":true}"#).unwrap();
        assert!(matches!(
            live,
            Request::Exec {
                live: true,
                once: false,
                ..
            }
        ));
        assert_eq!(
            encode(&live).unwrap(),
            b"{\"op\":\"exec\",\"id\":7,\"code\":\"x\",\"output_bytes\":9,\"live\":true}\n"
        );
        // Not live: the field is left out, so an older agent reads it.
        let Request::Exec {
            id,
            code,
            output_bytes,
            files,
            once,
            ..
        } = live
        else {
            unreachable!()
        };
        let line = encode(&Request::Exec {
            id,
            code,
            output_bytes,
            files,
            once,
            live: false,
        });
        assert!(!String::from_utf8(line.unwrap()).unwrap().contains("live"));
        // A live output is an `output` reply with the exec's id.
        let out: Reply =
            decode(br#"{"type":"output","id":7,"stream":"stderr","data":"aGk="}"#).unwrap();
        assert_eq!(out.id(), Some(7));
        // A misspelt field is refused, as any unknown one.
        assert!(
            decode::<Request>(br#"{"op":"exec","id":7,"code":"x","output_bytes":9,"lives":true}"#)
                .is_err()
        );
        assert!(
            decode::<Request>(br#"{"op":"exec","id":7,"code":"x","output_bytes":9,"live":1}"#)
                .is_err()
        );
        assert!(
            decode::<Reply>(br#"{"type":"output","id":7,"stream":"stdout","data":"","live":true}"#)
                .is_err()
        );
    }

    #[test]
    fn unknown_ops_and_fields_are_refused() {
        assert!(decode::<Request>(br#"{"op":"launch","id":1}"#).is_err());
        assert!(decode::<Request>(br#"{"op":"ping","id":1,"extra":true}"#).is_err());
        assert!(decode::<Request>(br#"{"op":"exec","id":1,"code":"x"}"#).is_err());
    }

    #[test]
    fn replies_round_trip() {
        let reply = Reply::Exec(ExecReply {
            id: 9,
            status: 139,
            stdout: "a\n".into(),
            stderr: String::new(),
            stdout_dropped: 0,
            stderr_dropped: 5,
            exit: Some(Exit::Signal(11)),
            restarted: false,
            interrupted: false,
            duration_ms: 12,
            outputs: vec![Output {
                path: "plot.png".into(),
                size: 3,
                mime: "image/png".into(),
            }],
            outputs_more: 0,
            flooded: None,
        });
        let line = encode(&reply).unwrap();
        let text = std::str::from_utf8(&line).unwrap();
        assert!(
            text.starts_with(r#"{"type":"exec","id":9,"status":139"#),
            "{text}"
        );
        assert!(text.contains(r#""exit":{"signal":11}"#), "{text}");
        assert_eq!(decode::<Reply>(&line).unwrap(), reply);
        assert_eq!(reply.id(), Some(9));
        let err = Reply::Error {
            id: None,
            code: ErrorCode::FrameTooLarge,
            message: "too long".into(),
        };
        let line = encode(&err).unwrap();
        assert!(line.starts_with(br#"{"type":"error","id":null,"code":"frame_too_large""#));
        assert_eq!(decode::<Reply>(&line).unwrap(), err);
    }

    #[test]
    fn exit_status_follows_the_shell() {
        assert_eq!(Exit::Code(3).status(), 3);
        assert_eq!(Exit::Signal(9).status(), 137);
    }

    #[test]
    fn salvage_id_reads_the_id_of_a_bad_request() {
        assert_eq!(salvage_id(br#"{"op":"nope","id":42}"#), Some(42));
        assert_eq!(salvage_id(b"not json"), None);
        assert_eq!(salvage_id(br#"{"op":"ping"}"#), None);
    }

    #[test]
    fn splitter_yields_lines_across_pushes() {
        let mut s = Splitter::new();
        s.push(b"{\"a\":1}\n{\"b\"");
        assert_eq!(s.next_frame(), Some(Split::Frame(b"{\"a\":1}".to_vec())));
        assert_eq!(s.next_frame(), None);
        assert_eq!(s.pending(), 4);
        s.push(b":2}\n\n");
        assert_eq!(s.next_frame(), Some(Split::Frame(b"{\"b\":2}".to_vec())));
        assert_eq!(s.next_frame(), Some(Split::Frame(Vec::new())));
        assert_eq!(s.next_frame(), None);
        assert_eq!(s.pending(), 0);
    }

    #[test]
    fn splitter_skips_an_oversized_line_and_resynchronises() {
        let mut s = Splitter::new();
        let chunk = vec![b'x'; MAX_FRAME_BYTES / 2];
        s.push(&chunk);
        assert_eq!(s.next_frame(), None);
        s.push(&chunk);
        assert_eq!(s.next_frame(), Some(Split::TooLarge));
        assert_eq!(s.pending(), 0, "the oversized line is not kept in memory");
        s.push(&chunk);
        assert_eq!(s.next_frame(), None);
        s.push(b"tail\n{\"ok\":1}\n");
        assert_eq!(s.next_frame(), Some(Split::Frame(b"{\"ok\":1}".to_vec())));
        assert_eq!(s.next_frame(), None);
    }

    #[test]
    fn splitter_reports_a_long_line_that_arrives_whole() {
        let mut s = Splitter::new();
        let mut line = vec![b'y'; MAX_FRAME_BYTES + 10];
        line.push(b'\n');
        line.extend_from_slice(b"{}\n");
        s.push(&line);
        assert_eq!(s.next_frame(), Some(Split::TooLarge));
        assert_eq!(s.next_frame(), Some(Split::Frame(b"{}".to_vec())));
    }

    #[test]
    fn encode_refuses_an_oversized_frame() {
        let big = Request::Exec {
            id: 1,
            code: "x".repeat(MAX_FRAME_BYTES),
            output_bytes: 1,
            files: vec![],
            once: false,
            live: false,
        };
        assert!(matches!(encode(&big), Err(FrameError::TooLarge(_))));
    }

    #[test]
    fn the_largest_reply_fits_in_a_frame() {
        // Control bytes are escaped as \u00XX: the worst case per kept byte.
        let worst = "\u{1}".repeat(MAX_OUTPUT_BYTES);
        let reply = Reply::Exec(ExecReply {
            id: u64::MAX,
            status: i32::MIN,
            stdout: worst.clone() + "\n[... 18446744073709551615 bytes dropped ...]\n",
            stderr: worst + "\n[... 18446744073709551615 bytes dropped ...]\n",
            stdout_dropped: u64::MAX,
            stderr_dropped: u64::MAX,
            exit: Some(Exit::Signal(64)),
            restarted: true,
            interrupted: true,
            flooded: Some(Stream::Stderr),
            duration_ms: u64::MAX,
            // The longest paths the agent lists: 16 components of 255
            // bytes, each byte escaped as `\xNN` (files::escape_name), and
            // its backslash again in JSON.
            outputs: vec![
                Output {
                    path: vec!["\\xff".repeat(255); crate::files::MAX_PATH_DEPTH].join("/"),
                    size: u64::MAX,
                    mime: "application/octet-stream".into(),
                };
                MAX_OUTPUTS_LISTED
            ],
            outputs_more: u64::MAX,
        });
        assert!(encode(&reply).is_ok());
        let read = Reply::File(FileReply {
            id: u64::MAX,
            path: vec!["\\xff".repeat(255); crate::files::MAX_PATH_DEPTH].join("/"),
            size: u64::MAX,
            offset: u64::MAX,
            data: encode_data(&vec![0; MAX_READ_BYTES as usize]),
            eof: true,
        });
        assert!(encode(&read).is_ok());
    }
}
