//! What the launcher takes from a session's agent. Nothing in a jail is
//! trusted, the agent included: user code runs beside it as the same user,
//! and an agent it got hold of could answer anything. So each reply is held
//! to what an honest agent can send (`proto::frame`), and what the result
//! states as fact is bounded by the launcher itself:
//!
//! - each output stream at most the call's `output_bytes` as the agent's
//!   cap renders it (`proto::cap::rendered_max_chars`);
//! - `status` from 0 to 255 (an exit code, 128 + a signal, 130 when
//!   interrupted); an interpreter's exit code from 0 to 255 or signal from 1
//!   to 64, and then `status` is that exit's;
//! - at most `MAX_OUTPUTS_LISTED` outputs, error messages of at most
//!   [`MAX_MESSAGE_BYTES`];
//! - a read's answer: the path and offset asked for, at most the bytes
//!   asked for, base64;
//! - a `live` exec's output frames ([`LiveBudget`]): base64 of at most
//!   `LIVE_CHUNK_BYTES`, and of each stream one at once, then at most one
//!   every `LIVE_EVERY_MS` since the exec was sent, so that a flood of
//!   them ends the session after a few; a call that did not ask for them
//!   gets none.
//!
//! A reply that breaks any of these ends the session (the jail is killed,
//! the result says so and is an error); of such an exec reply only the
//! output is shown, cut by the launcher to the cap ([`bounded`]), and none
//! of its claims. A reply within them is still the agent's word for what
//! the launcher cannot see (the code's status, whether the interpreter
//! restarted): it decides `isError` only together with what the launcher
//! knows itself (its deadline, a cancel, a reset).

use std::fmt;
use std::time::Instant;

use proto::cap::{Cap, rendered_max_chars};
use proto::frame::{
    ExecReply, Exit, FileReply, LIVE_CHUNK_BYTES, LIVE_EVERY_MS, MAX_CHUNK_BYTES,
    MAX_OUTPUTS_LISTED, Reply, Stream,
};

/// The longest error message an agent may send (a path and why).
pub const MAX_MESSAGE_BYTES: usize = 16 << 10;

/// How a reply broke the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A stream longer than the cap lets the agent render it.
    OverCap {
        stream: &'static str,
        chars: usize,
        cap: usize,
    },
    Status(i32),
    Exit(Exit),
    /// An exit whose status is not the reply's.
    ExitStatus {
        status: i32,
        exit: Exit,
    },
    Outputs(usize),
    Message(usize),
    /// A read answered for another path or offset.
    ReadPlace {
        path: String,
        offset: u64,
        want: u64,
    },
    /// A read answered with more than it asked for.
    ReadSize {
        got: usize,
        max: u64,
    },
    ReadData(String),
    /// A spawn's output chunk that is not base64 or is over
    /// `MAX_CHUNK_BYTES`.
    Chunk(String),
    /// A live output that is not base64 or is over `LIVE_CHUNK_BYTES`.
    LiveChunk(String),
    /// More live outputs of a stream than its periods allow.
    LiveRate {
        stream: Stream,
        frames: u64,
        ms: u128,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::OverCap { stream, chars, cap } => {
                write!(
                    f,
                    "{stream} over its cap of {cap} bytes ({chars} characters)"
                )
            }
            Violation::Status(status) => write!(f, "status {status}, not 0 to 255"),
            Violation::Exit(exit) => {
                write!(f, "the interpreter's exit {} is out of range", shown(*exit))
            }
            Violation::ExitStatus { status, exit } => write!(
                f,
                "status {status} with the interpreter's exit {}",
                shown(*exit)
            ),
            Violation::Outputs(n) => {
                write!(f, "{n} outputs listed, more than {MAX_OUTPUTS_LISTED}")
            }
            Violation::Message(n) => write!(
                f,
                "an error message of {n} bytes, more than {MAX_MESSAGE_BYTES}"
            ),
            Violation::ReadPlace { path, offset, want } => {
                let path: String = path.chars().take(80).collect();
                write!(
                    f,
                    "a read answered for {path:?} at offset {offset} for a read at {want}"
                )
            }
            Violation::ReadSize { got, max } => {
                write!(f, "{got} bytes for a read of at most {max}")
            }
            Violation::ReadData(why) => write!(f, "a read's data: {why}"),
            Violation::Chunk(why) => write!(f, "a spawn's output: {why}"),
            Violation::LiveChunk(why) => write!(f, "a live output: {why}"),
            Violation::LiveRate { stream, frames, ms } => write!(
                f,
                "{frames} live outputs of {} in {ms} ms, more than one each {LIVE_EVERY_MS} ms",
                match stream {
                    Stream::Stdout => "stdout",
                    Stream::Stderr => "stderr",
                }
            ),
        }
    }
}

fn shown(exit: Exit) -> String {
    match exit {
        Exit::Code(code) => format!("code {code}"),
        Exit::Signal(signal) => format!("signal {signal}"),
    }
}

/// Checks an exec reply of a call capped at `output_bytes`.
pub fn exec(reply: &ExecReply, output_bytes: usize) -> Result<(), Violation> {
    for (stream, text) in [("stdout", &reply.stdout), ("stderr", &reply.stderr)] {
        let cap = rendered_max_chars(output_bytes);
        // Bytes bound characters: only a long text is counted.
        if text.len() > cap && text.chars().count() > cap {
            return Err(Violation::OverCap {
                stream,
                chars: text.chars().count(),
                cap: output_bytes,
            });
        }
    }
    if !(0..=255).contains(&reply.status) {
        return Err(Violation::Status(reply.status));
    }
    if let Some(exit) = reply.exit {
        spawned(reply.status, exit)?;
    }
    if reply.outputs.len() > MAX_OUTPUTS_LISTED {
        return Err(Violation::Outputs(reply.outputs.len()));
    }
    Ok(())
}

/// The bytes of a spawn's `output` reply.
pub fn chunk(data: &str) -> Result<Vec<u8>, Violation> {
    // Base64 of MAX_CHUNK_BYTES, rounded up: a longer text is refused unread.
    if data.len() > MAX_CHUNK_BYTES.div_ceil(3) * 4 {
        return Err(Violation::Chunk(format!("{} bytes of base64", data.len())));
    }
    let bytes = proto::frame::decode_data(data).map_err(|e| Violation::Chunk(e.to_string()))?;
    if bytes.len() > MAX_CHUNK_BYTES {
        return Err(Violation::Chunk(format!("{} bytes", bytes.len())));
    }
    Ok(bytes)
}

/// The live outputs a `live` exec's agent may send: each
/// [`LIVE_CHUNK_BYTES`] at most, and of each stream one at once, then one
/// a [`LIVE_EVERY_MS`] (the agent counts from the exec's arrival, which is
/// after [`LiveBudget::new`]'s instant, and a frame is read after it was
/// sent), [`LIVE_SLACK`] more for rounding. What a frame holds is decoded
/// only once its size and its turn are checked.
#[derive(Debug)]
pub struct LiveBudget {
    /// Before the exec was sent.
    asked: Instant,
    /// Frames of stdout and of stderr so far.
    frames: [u64; 2],
}

/// Frames a stream may send beyond its periods' count.
pub const LIVE_SLACK: u64 = 2;

impl LiveBudget {
    /// The budget of an exec about to be sent (`asked`: now).
    pub fn new(asked: Instant) -> Self {
        LiveBudget {
            asked,
            frames: [0; 2],
        }
    }

    /// The bytes of a live output of `stream`, `data`, read at `now`.
    pub fn admit(
        &mut self,
        stream: Stream,
        data: &str,
        now: Instant,
    ) -> Result<Vec<u8>, Violation> {
        let ms = now.saturating_duration_since(self.asked).as_millis();
        let frames = &mut self.frames[usize::from(stream == Stream::Stderr)];
        *frames += 1;
        let periods = u64::try_from(ms / u128::from(LIVE_EVERY_MS)).unwrap_or(u64::MAX);
        if *frames > periods.saturating_add(1 + LIVE_SLACK) {
            return Err(Violation::LiveRate {
                stream,
                frames: *frames,
                ms,
            });
        }
        // Base64 of LIVE_CHUNK_BYTES, rounded up: a longer text is refused unread.
        if data.len() > LIVE_CHUNK_BYTES.div_ceil(3) * 4 {
            return Err(Violation::LiveChunk(format!(
                "{} bytes of base64",
                data.len()
            )));
        }
        let bytes =
            proto::frame::decode_data(data).map_err(|e| Violation::LiveChunk(e.to_string()))?;
        if bytes.len() > LIVE_CHUNK_BYTES {
            return Err(Violation::LiveChunk(format!("{} bytes", bytes.len())));
        }
        Ok(bytes)
    }
}

/// Checks an exit (an interpreter's, a spawn's): in range, and `status`
/// is its status.
pub fn spawned(status: i32, exit: Exit) -> Result<(), Violation> {
    let in_range = match exit {
        Exit::Code(code) => (0..=255).contains(&code),
        Exit::Signal(signal) => (1..=64).contains(&signal),
    };
    if !in_range {
        return Err(Violation::Exit(exit));
    }
    if exit.status() != status {
        return Err(Violation::ExitStatus { status, exit });
    }
    Ok(())
}

/// Checks an error message.
pub fn message(message: &str) -> Result<(), Violation> {
    if message.len() > MAX_MESSAGE_BYTES {
        return Err(Violation::Message(message.len()));
    }
    Ok(())
}

/// The bytes of `file`, the answer to a read of `path` at `offset` of at
/// most `max` bytes.
pub fn file(file: &FileReply, path: &str, offset: u64, max: u64) -> Result<Vec<u8>, Violation> {
    if file.path != path || file.offset != offset {
        return Err(Violation::ReadPlace {
            path: file.path.clone(),
            offset: file.offset,
            want: offset,
        });
    }
    let bytes = file
        .bytes()
        .map_err(|e| Violation::ReadData(e.to_string()))?;
    if bytes.len() as u64 > max {
        return Err(Violation::ReadSize {
            got: bytes.len(),
            max,
        });
    }
    Ok(bytes)
}

/// An exec reply's output, bounded by the launcher: each stream as it came
/// when within the cap, else cut to `output_bytes` (head and tail, as the
/// agent's cap does); the dropped counts are the launcher's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Streams {
    pub stdout: String,
    pub stderr: String,
    pub stdout_dropped: u64,
    pub stderr_dropped: u64,
}

/// The output of `reply`, a reply that broke the protocol, bounded.
pub fn bounded(reply: &ExecReply, output_bytes: usize) -> Streams {
    let cut = |text: &str| {
        if text.chars().count() <= rendered_max_chars(output_bytes) {
            return (text.to_owned(), 0);
        }
        let mut cap = Cap::new(output_bytes);
        cap.push(text.as_bytes());
        (cap.render(), cap.dropped())
    };
    let (stdout, stdout_dropped) = cut(&reply.stdout);
    let (stderr, stderr_dropped) = cut(&reply.stderr);
    Streams {
        stdout,
        stderr,
        stdout_dropped,
        stderr_dropped,
    }
}

/// A reply nobody asked for, in a few words (never its content: it could be
/// megabytes, and it is not the code's output).
pub fn describe(reply: &Reply) -> String {
    match reply {
        Reply::Exec(_) => "an exec reply to no request of this call".into(),
        Reply::File(_) => "a file reply to no request of this call".into(),
        Reply::Ack { .. } => "an ack to no request of this call".into(),
        Reply::Output { .. } => "an output to no request of this call".into(),
        Reply::Spawned { .. } => "a spawn's end to no request of this call".into(),
        Reply::Error { code, .. } => format!("an error ({code:?}) to no request of this call"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: i32, exit: Option<Exit>, stdout: &str) -> ExecReply {
        ExecReply {
            id: 1,
            status,
            stdout: stdout.into(),
            stderr: String::new(),
            stdout_dropped: 0,
            stderr_dropped: 0,
            exit,
            restarted: false,
            interrupted: false,
            duration_ms: 1,
            outputs: Vec::new(),
            outputs_more: 0,
            flooded: None,
        }
    }

    #[test]
    fn what_an_honest_agent_sends_passes() {
        assert_eq!(exec(&reply(0, None, "hi\n"), 8), Ok(()));
        assert_eq!(exec(&reply(3, Some(Exit::Code(3)), ""), 8), Ok(()));
        assert_eq!(exec(&reply(137, Some(Exit::Signal(9)), ""), 8), Ok(()));
        assert_eq!(exec(&reply(130, None, ""), 8), Ok(()));
        // The agent's own rendering of a cut stream, invalid bytes included.
        let mut cap = Cap::new(8);
        cap.push(&[0xff; 100]);
        assert_eq!(exec(&reply(0, None, &cap.render()), 8), Ok(()));
    }

    #[test]
    fn what_it_cannot_send_is_named() {
        let over = "y".repeat(100);
        assert_eq!(
            exec(&reply(0, None, &over), 8),
            Err(Violation::OverCap {
                stream: "stdout",
                chars: 100,
                cap: 8
            })
        );
        // Multi-byte characters count once.
        assert_eq!(exec(&reply(0, None, &"€".repeat(54)), 8), Ok(()));
        assert_eq!(exec(&reply(256, None, ""), 8), Err(Violation::Status(256)));
        assert_eq!(exec(&reply(-1, None, ""), 8), Err(Violation::Status(-1)));
        assert_eq!(
            exec(&reply(0, Some(Exit::Code(3)), ""), 8),
            Err(Violation::ExitStatus {
                status: 0,
                exit: Exit::Code(3)
            })
        );
        assert_eq!(
            exec(&reply(193, Some(Exit::Signal(65)), ""), 8),
            Err(Violation::Exit(Exit::Signal(65)))
        );
        let mut many = reply(0, None, "");
        many.outputs = vec![
            proto::frame::Output {
                path: "a".into(),
                size: 1,
                mime: "text/plain".into()
            };
            MAX_OUTPUTS_LISTED + 1
        ];
        assert_eq!(exec(&many, 8), Err(Violation::Outputs(65)));
        assert!(message(&"m".repeat(MAX_MESSAGE_BYTES + 1)).is_err());
    }

    #[test]
    fn an_over_long_stream_is_cut_head_and_tail() {
        let mut r = reply(0, None, &format!("HEAD{}TAIL", "x".repeat(1000)));
        r.stdout_dropped = 7;
        let streams = bounded(&r, 16);
        assert_eq!(
            streams.stdout,
            "HEADxxxx\n[... 992 bytes dropped ...]\nxxxxTAIL"
        );
        assert_eq!(streams.stdout_dropped, 992);
        assert_eq!((streams.stderr.as_str(), streams.stderr_dropped), ("", 0));
    }

    #[test]
    fn a_read_gets_what_it_asked_for_or_nothing() {
        let file = |path: &str, offset: u64, bytes: &[u8]| FileReply {
            id: 1,
            path: path.into(),
            size: 100,
            offset,
            data: proto::frame::encode_data(bytes),
            eof: false,
        };
        assert_eq!(file_ok(&file("a", 4, b"abc"), 3), Ok(b"abc".to_vec()));
        assert!(matches!(
            super::file(&file("b", 4, b"abc"), "a", 4, 3),
            Err(Violation::ReadPlace { .. })
        ));
        assert!(matches!(
            super::file(&file("a", 5, b"abc"), "a", 4, 3),
            Err(Violation::ReadPlace { .. })
        ));
        assert_eq!(
            file_ok(&file("a", 4, b"abcd"), 3),
            Err(Violation::ReadSize { got: 4, max: 3 })
        );
        assert_eq!(
            file_ok(&file("a", 4, &[0; 100]), 3),
            Err(Violation::ReadSize { got: 100, max: 3 })
        );
    }

    #[test]
    fn live_outputs_are_held_to_their_size_and_their_periods() {
        use std::time::Duration;
        let asked = Instant::now();
        let every = Duration::from_millis(LIVE_EVERY_MS);
        let mut budget = LiveBudget::new(asked);
        let data = |n: usize| proto::frame::encode_data(&vec![b'x'; n]);
        // What an honest agent sends: one a stream at once, then one a
        // period, each of at most LIVE_CHUNK_BYTES.
        for k in 0..10u32 {
            let now = asked + every * k;
            for stream in [Stream::Stdout, Stream::Stderr] {
                let got = budget.admit(stream, &data(LIVE_CHUNK_BYTES), now);
                assert_eq!(got.map(|b| b.len()), Ok(LIVE_CHUNK_BYTES), "frame {k}");
            }
        }
        // A flood: past the slack, the next one is refused.
        let mut flood = LiveBudget::new(asked);
        for _ in 0..=LIVE_SLACK {
            assert!(flood.admit(Stream::Stderr, &data(1), asked).is_ok());
        }
        assert_eq!(
            flood.admit(Stream::Stderr, &data(1), asked),
            Err(Violation::LiveRate {
                stream: Stream::Stderr,
                frames: LIVE_SLACK + 2,
                ms: 0
            })
        );
        // Each stream has its own periods.
        assert!(flood.admit(Stream::Stdout, &data(1), asked).is_ok());
        // Too large, or not base64: refused, the large one unread.
        let mut one = LiveBudget::new(asked);
        assert!(matches!(
            one.admit(Stream::Stdout, &data(LIVE_CHUNK_BYTES + 1), asked),
            Err(Violation::LiveChunk(_))
        ));
        assert!(matches!(
            one.admit(Stream::Stdout, &"A".repeat(1 << 20), asked),
            Err(Violation::LiveChunk(why)) if why == "1048576 bytes of base64"
        ));
        assert!(matches!(
            one.admit(Stream::Stdout, "!!", asked),
            Err(Violation::LiveChunk(_))
        ));
    }

    fn file_ok(file: &FileReply, max: u64) -> Result<Vec<u8>, Violation> {
        super::file(file, "a", 4, max)
    }
}
