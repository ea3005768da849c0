//! A `live` exec's output as it comes, for the launcher's progress
//! notifications: of each stream the newest bytes, at most
//! [`LIVE_CHUNK_BYTES`], held until that stream may send again (one frame
//! every [`LIVE_EVERY_MS`] ms at most). A flood in the jail so sends a few
//! KiB a second whatever it writes; the exec's reply still holds the whole
//! capped output.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use proto::frame::{LIVE_CHUNK_BYTES, LIVE_EVERY_MS, Stream};

/// The least time between two frames of one stream.
pub const EVERY: Duration = Duration::from_millis(LIVE_EVERY_MS);

/// The live output of the running call, when it asked for it.
#[derive(Debug, Default)]
pub struct Live {
    /// Whether the running call is `live`.
    on: bool,
    streams: [Pending; 2],
}

/// One stream's newest bytes not sent yet.
#[derive(Debug, Default)]
struct Pending {
    bytes: VecDeque<u8>,
    /// When this stream last sent a frame.
    sent: Option<Instant>,
}

impl Pending {
    /// When this stream may send next (`None`: at once), if it holds
    /// anything.
    fn due(&self) -> Option<Option<Instant>> {
        (!self.bytes.is_empty()).then(|| self.sent.map(|sent| sent + EVERY))
    }

    /// Whether it may send at `now`.
    fn due_by(&self, now: Instant) -> bool {
        self.due().is_some_and(|at| at.is_none_or(|at| at <= now))
    }
}

fn slot(stream: Stream) -> usize {
    match stream {
        Stream::Stdout => 0,
        Stream::Stderr => 1,
    }
}

impl Live {
    /// A call starts: `on` when it asked for live output. Nothing of an
    /// earlier call's is kept.
    pub fn start(&mut self, on: bool) {
        *self = Live {
            on,
            ..Live::default()
        };
    }

    /// The call ended: nothing more is sent.
    pub fn stop(&mut self) {
        self.start(false);
    }

    /// Notes output of `stream`; only the newest [`LIVE_CHUNK_BYTES`] wait.
    pub fn push(&mut self, stream: Stream, data: &[u8]) {
        if !self.on {
            return;
        }
        let pending = &mut self.streams[slot(stream)].bytes;
        let keep = &data[data.len().saturating_sub(LIVE_CHUNK_BYTES)..];
        let over = (pending.len() + keep.len()).saturating_sub(LIVE_CHUNK_BYTES);
        pending.drain(..over);
        pending.extend(keep);
    }

    /// When the loop must wake to send what waits (`now` at the latest
    /// when something may go at once); `None` when nothing waits.
    pub fn due(&self, now: Instant) -> Option<Instant> {
        (self.streams.iter())
            .filter_map(Pending::due)
            .map(|at| at.unwrap_or(now))
            .min()
    }

    /// The frames due at `now`: each stream's waiting bytes, if it has not
    /// sent within [`EVERY`]. They are then sent.
    pub fn take_due(&mut self, now: Instant) -> Vec<(Stream, Vec<u8>)> {
        let mut due = Vec::new();
        for stream in [Stream::Stdout, Stream::Stderr] {
            let pending = &mut self.streams[slot(stream)];
            if pending.due_by(now) {
                pending.sent = Some(now);
                due.push((stream, pending.bytes.drain(..).collect()));
            }
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_kept_unless_asked() {
        let mut live = Live::default();
        live.push(Stream::Stdout, b"hi\n");
        assert_eq!(live.due(Instant::now()), None);
        assert!(live.take_due(Instant::now()).is_empty());
    }

    #[test]
    fn each_stream_sends_its_newest_bytes_at_most_once_a_period() {
        let mut live = Live::default();
        live.start(true);
        let t0 = Instant::now();
        live.push(Stream::Stdout, b"first\n");
        assert_eq!(
            live.take_due(t0),
            vec![(Stream::Stdout, b"first\n".to_vec())]
        );
        // A flood within the period: only the newest bytes wait, bounded.
        for i in 0..10_000 {
            live.push(Stream::Stdout, format!("line {i}\n").as_bytes());
        }
        live.push(Stream::Stderr, b"oops\n");
        let half = t0 + EVERY / 2;
        // stderr has not sent yet: it may now; stdout waits for its period.
        assert_eq!(
            live.take_due(half),
            vec![(Stream::Stderr, b"oops\n".to_vec())]
        );
        assert_eq!(live.due(half), Some(t0 + EVERY));
        let frames = live.take_due(t0 + EVERY);
        assert_eq!(frames.len(), 1);
        let (stream, bytes) = &frames[0];
        assert_eq!(*stream, Stream::Stdout);
        assert_eq!(bytes.len(), LIVE_CHUNK_BYTES);
        assert!(bytes.ends_with(b"line 9999\n"));
        assert_eq!(live.due(t0), None);
        live.stop();
        live.push(Stream::Stdout, b"after\n");
        assert_eq!(live.due(t0), None);
    }
}
