//! The private channel between the agent and an interpreter's driver
//! (`agent/drivers/`), on the driver's fds 3 and 4.
//!
//! Agent -> driver: NUL-terminated messages. Between calls, the code of the
//! next call (code never contains NUL, and is never empty); during a call,
//! only `held 1` or `held 0`, the answer to `hold`. An empty message
//! ([`ONCE`]) before the code makes that call the interpreter's only one: the
//! driver runs it as the environment's run wrapper runs a script (no value
//! shown, the script's own name in tracebacks) and then exits as that
//! interpreter would, with the script's status, instead of saying `done`.
//! After its `start` it may close the channel (the program driver execs the
//! program runner): the process's exit then ends the call.
//!
//! Driver -> agent: one message a line.
//! - `start`: the call's code runs now and SIGINT is safe: the driver turns it
//!   into an interrupt of that code. An interrupt asked for earlier is sent
//!   now. A driver may send `start` again after a `hold`.
//! - `hold` (node): SIGINT is not safe until the next `start`. The agent
//!   answers `held 1` if it sent SIGINT since the last `start` (the signal is
//!   then already delivered), else `held 0`, and defers later interrupts.
//!   Drivers that can always take SIGINT never send it.
//! - `done STATUS`: the call ended with STATUS (see `proto::frame`). The
//!   driver flushed its own buffers first, so everything the code wrote is
//!   already in the stdout and stderr pipes.

/// The message that makes the next call the interpreter's only one.
pub const ONCE: &[u8] = b"\0";

/// A message from the driver.
#[derive(Debug, PartialEq, Eq)]
pub enum Message {
    Start,
    Hold,
    Done(i32),
}

/// The answer to [`Message::Hold`]: whether SIGINT was sent since `start`.
pub fn held(signalled: bool) -> &'static [u8] {
    if signalled { b"held 1\0" } else { b"held 0\0" }
}

/// Parses one line (without its newline).
pub fn parse(line: &[u8]) -> Option<Message> {
    match line {
        b"start" => Some(Message::Start),
        b"hold" => Some(Message::Hold),
        _ => {
            let status = line.strip_prefix(b"done ")?;
            std::str::from_utf8(status)
                .ok()?
                .parse()
                .ok()
                .map(Message::Done)
        }
    }
}

/// The message that hands `code` to the driver.
pub fn code_message(code: &str) -> Vec<u8> {
    let mut message = Vec::with_capacity(code.len() + 1);
    message.extend_from_slice(code.as_bytes());
    message.push(0);
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_parse() {
        assert_eq!(parse(b"start"), Some(Message::Start));
        assert_eq!(parse(b"hold"), Some(Message::Hold));
        assert_eq!(parse(b"done 0"), Some(Message::Done(0)));
        assert_eq!(parse(b"done 130"), Some(Message::Done(130)));
        assert_eq!(parse(b"done -1"), Some(Message::Done(-1)));
        assert_eq!(parse(b"done"), None);
        assert_eq!(parse(b"done x"), None);
        assert_eq!(parse(b"started"), None);
    }

    #[test]
    fn held_says_whether_sigint_was_sent() {
        assert_eq!(held(true), b"held 1\0");
        assert_eq!(held(false), b"held 0\0");
    }

    #[test]
    fn code_is_nul_terminated() {
        assert_eq!(code_message("print(1)\n"), b"print(1)\n\0");
    }
}
