//! A run's output while it runs: the newest lines of its stdout and stderr
//! together, kept in a small ring that the readers of the run's pipes fill
//! (or, for a call an agent runs, its live output frames: session/call.rs)
//! and that the MCP layer reads once a second for a progress notification.
//! Its memory is fixed ([`TAIL_BYTES`]) however much the run prints; what
//! the model reads at the end is the run's own output caps, not this.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

/// The bytes of output a [`Tail`] keeps: the newest, across both streams.
pub const TAIL_BYTES: usize = 2048;

/// The lines a progress message shows at most, newest last.
pub const TAIL_LINES: usize = 8;

/// The newest output of a run, shared between its readers and whoever
/// shows it. Cloning shares it.
#[derive(Clone, Debug, Default)]
pub struct Tail(Arc<Mutex<Ring>>);

#[derive(Debug, Default)]
struct Ring {
    bytes: VecDeque<u8>,
}

impl Tail {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds output; only the newest [`TAIL_BYTES`] stay.
    pub fn push(&self, chunk: &[u8]) {
        let mut ring = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let keep = &chunk[chunk.len().saturating_sub(TAIL_BYTES)..];
        let over = (ring.bytes.len() + keep.len()).saturating_sub(TAIL_BYTES);
        ring.bytes.drain(..over);
        ring.bytes.extend(keep);
    }

    /// The newest lines, at most [`TAIL_LINES`], as text (invalid UTF-8
    /// replaced, control characters but tab dropped); a line cut by the
    /// ring's start is left out unless it is the only one.
    pub fn lines(&self) -> String {
        let bytes: Vec<u8> = {
            let ring = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            ring.bytes.iter().copied().collect()
        };
        let full = bytes.len() == TAIL_BYTES;
        let text = String::from_utf8_lossy(&bytes);
        let mut lines: Vec<&str> = text.trim_end_matches('\n').split('\n').collect();
        if full && lines.len() > 1 {
            lines.remove(0);
        }
        let start = lines.len().saturating_sub(TAIL_LINES);
        lines[start..]
            .iter()
            .map(|line| {
                line.chars()
                    .filter(|c| *c == '\t' || !c.is_control())
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_lines_stay() {
        let tail = Tail::new();
        for i in 0..20 {
            tail.push(format!("line {i}\n").as_bytes());
        }
        let lines = tail.lines();
        assert_eq!(lines.lines().count(), TAIL_LINES);
        assert!(lines.ends_with("line 19"), "{lines}");
        assert!(lines.starts_with("line 12"), "{lines}");
    }

    #[test]
    fn a_flood_keeps_memory_flat_and_drops_the_cut_line() {
        let tail = Tail::new();
        tail.push(&vec![b'x'; 1 << 20]);
        tail.push(b"\nlast\x1b[31m red\r\n");
        assert!(tail.0.lock().unwrap().bytes.len() <= TAIL_BYTES);
        assert_eq!(tail.lines(), "last[31m red");
        let one = Tail::new();
        one.push(&vec![b'y'; 3 * TAIL_BYTES]);
        assert_eq!(one.lines().len(), TAIL_BYTES);
    }
}
