//! A byte sink that keeps the head and the tail of a stream and counts the
//! bytes it dropped from the middle, so a program that floods its output
//! costs a fixed amount of memory.
//!
//! With a limit of `n` bytes the first `n - n/2` bytes are kept as the head
//! and the last `n/2` bytes as the tail; everything in between is counted and
//! forgotten. Rendering marks the cut with `[... N bytes dropped ...]`.

use std::collections::VecDeque;

/// The most characters the cut marker adds to a rendering: a newline ending
/// the head, then `[... N bytes dropped ...]` and a newline, N at most
/// `u64::MAX`.
pub const MARKER_MAX_CHARS: usize = 46;

/// The most characters [`Cap::render`] returns for a cap of `limit` bytes:
/// every kept byte becomes at most one character (a UTF-8 sequence fewer, an
/// invalid byte one U+FFFD), plus the marker. The launcher holds the agent's
/// replies to it.
pub fn rendered_max_chars(limit: usize) -> usize {
    limit.saturating_add(MARKER_MAX_CHARS)
}

/// Head and tail of a stream, capped at `limit` bytes in all.
#[derive(Debug, Clone)]
pub struct Cap {
    head_max: usize,
    tail_max: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl Cap {
    /// A sink that keeps at most `limit` bytes (half head, half tail).
    pub fn new(limit: usize) -> Self {
        let tail_max = limit / 2;
        Self {
            head_max: limit - tail_max,
            tail_max,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    /// The cap whose [`Cap::render`] is `rendered` and whose
    /// [`Cap::dropped`] is `dropped`: what another cap rendered (the agent's
    /// reply), taken back. The cut is found at a marker for `dropped`; were
    /// the kept bytes to hold such a marker too, the text is the same
    /// wherever the cut is put. Its [`Cap::total`] counts the rendered text
    /// (a newline the marker added, replaced bytes), not the stream's.
    pub fn from_rendered(rendered: &str, dropped: u64) -> Self {
        let marker = format!("[... {dropped} bytes dropped ...]\n");
        let (head, tail) = match rendered.find(&marker) {
            Some(at) if dropped > 0 => (&rendered[..at], &rendered[at + marker.len()..]),
            _ => (rendered, ""),
        };
        Self {
            head_max: head.len(),
            tail_max: tail.len(),
            head: head.as_bytes().to_vec(),
            tail: tail.bytes().collect(),
            total: (head.len() + tail.len()) as u64 + dropped,
        }
    }

    /// Appends `data`: it fills the head first, then rolls through the tail.
    pub fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        let room = self.head_max - self.head.len();
        if room > 0 {
            let take = room.min(data.len());
            self.head.extend_from_slice(&data[..take]);
            data = &data[take..];
        }
        if data.is_empty() || self.tail_max == 0 {
            return;
        }
        if data.len() >= self.tail_max {
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.tail_max..]);
            return;
        }
        let overflow = (self.tail.len() + data.len()).saturating_sub(self.tail_max);
        self.tail.drain(..overflow);
        self.tail.extend(data);
    }

    /// How many bytes went in.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// How many bytes were dropped from the middle.
    pub fn dropped(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// True when nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The kept bytes as text (invalid UTF-8 replaced), with a line
    /// `[... N bytes dropped ...]` where the middle was cut.
    pub fn render(&self) -> String {
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        let dropped = self.dropped();
        if dropped > 0 {
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&format!("[... {dropped} bytes dropped ...]\n"));
        }
        let (a, b) = self.tail.as_slices();
        if b.is_empty() {
            out.push_str(&String::from_utf8_lossy(a));
        } else {
            let mut joined = Vec::with_capacity(a.len() + b.len());
            joined.extend_from_slice(a);
            joined.extend_from_slice(b);
            out.push_str(&String::from_utf8_lossy(&joined));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Cap;

    #[test]
    fn a_rendering_is_taken_back_whole() {
        for (limit, input) in [
            (16, &b"hello world"[..]),
            (8, b"0123456789abcdefghij"),
            (8, b"line one\nline two\nline three\n"),
            (4, b"[... 2 bytes dropped ...]\nxy"),
            (0, b"all dropped"),
        ] {
            let mut cap = Cap::new(limit);
            cap.push(input);
            let back = Cap::from_rendered(&cap.render(), cap.dropped());
            assert_eq!(back.render(), cap.render(), "{limit} {input:?}");
            assert_eq!(back.dropped(), cap.dropped());
        }
    }

    #[test]
    fn short_stream_is_kept_whole() {
        let mut cap = Cap::new(16);
        cap.push(b"hello ");
        cap.push(b"world");
        assert_eq!(cap.render(), "hello world");
        assert_eq!(cap.dropped(), 0);
        assert_eq!(cap.total(), 11);
    }

    #[test]
    fn exactly_the_limit_is_not_cut() {
        let mut cap = Cap::new(8);
        cap.push(b"abcdefgh");
        assert_eq!(cap.dropped(), 0);
        assert_eq!(cap.render(), "abcdefgh");
    }

    #[test]
    fn long_stream_keeps_head_and_tail_in_small_pushes() {
        let mut cap = Cap::new(8);
        for b in b"0123456789abcdefghij" {
            cap.push(std::slice::from_ref(b));
        }
        assert_eq!(cap.total(), 20);
        assert_eq!(cap.dropped(), 12);
        assert_eq!(cap.render(), "0123\n[... 12 bytes dropped ...]\nghij");
    }

    #[test]
    fn one_big_push_is_cut_the_same_way() {
        let mut cap = Cap::new(8);
        cap.push(b"0123456789abcdefghij");
        assert_eq!(cap.render(), "0123\n[... 12 bytes dropped ...]\nghij");
    }

    #[test]
    fn odd_limit_gives_the_extra_byte_to_the_head() {
        let mut cap = Cap::new(5);
        cap.push(b"abcdefghij");
        assert_eq!(cap.render(), "abc\n[... 5 bytes dropped ...]\nij");
    }

    #[test]
    fn memory_stays_at_the_limit() {
        let mut cap = Cap::new(1024);
        let chunk = [b'y'; 4096];
        for _ in 0..1000 {
            cap.push(&chunk);
        }
        assert_eq!(cap.total(), 4_096_000);
        assert_eq!(cap.dropped(), 4_096_000 - 1024);
        assert!(cap.head.capacity() <= 2048 && cap.tail.capacity() <= 2048);
    }

    #[test]
    fn invalid_utf8_is_rendered_lossily() {
        let mut cap = Cap::new(64);
        cap.push(&[b'a', 0xff, b'b']);
        assert_eq!(cap.render(), "a\u{fffd}b");
    }

    #[test]
    fn a_rendering_stays_within_its_bound() {
        let marker = format!("\n[... {} bytes dropped ...]\n", u64::MAX);
        assert_eq!(marker.chars().count(), super::MARKER_MAX_CHARS);
        // Invalid bytes (one U+FFFD each), a cut inside UTF-8 sequences.
        let mut cap = Cap::new(9);
        for _ in 0..1000 {
            cap.push(&[0xff, b'a', 0xc3]);
            cap.push("é€".as_bytes());
        }
        let text = cap.render();
        assert!(
            text.chars().count() <= super::rendered_max_chars(9),
            "{text}"
        );
        assert!(text.contains("bytes dropped"));
    }

    #[test]
    fn zero_limit_keeps_nothing_and_counts_everything() {
        let mut cap = Cap::new(0);
        cap.push(b"abc");
        assert_eq!(cap.dropped(), 3);
        assert_eq!(cap.render(), "[... 3 bytes dropped ...]\n");
    }
}
