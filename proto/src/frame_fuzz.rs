//! A property test of the launcher <-> agent frame decoder (the fuzz
//! target of the agent protocol), bounded random loops in the manner of the
//! launcher's manifest test:
//!
//! - random valid requests and replies round-trip through [`encode`] and
//!   [`decode`], and their frame holds one newline, its last byte;
//! - arbitrary bytes and mutated valid frames (values swapped for other JSON,
//!   fields dropped, added or renamed, bytes flipped, cut, inserted or
//!   repeated, deep nesting) never panic [`decode`] or [`salvage_id`]; what
//!   `decode` accepts re-encodes to the same value, and its id is the one
//!   `salvage_id` reads; a line over [`MAX_FRAME_BYTES`] is refused unread;
//! - the [`Splitter`] yields the same items wherever the stream is cut (one
//!   push, random cuts, every byte alone, cuts beside every newline and
//!   beside the size limit of every line), those a plain model of the
//!   framing rules gives, and never keeps [`MAX_FRAME_BYTES`] or more of an
//!   unfinished line.
//!
//! Each loop stops after its number of cases or [`BUDGET`], whichever comes
//! first (a guard on the suite's time, not an assertion). A failure names
//! the seed that reproduces it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::frame::{
    ErrorCode, ExecReply, Exit, FileIn, FileReply, FrameError, MAX_FRAME_BYTES, Output, Reply,
    Request, Split, Splitter, Stream, decode, encode, encode_data, salvage_id,
};
use crate::fuzz::Rng;

const DECODE_CASES: usize = 20_000;
const SPLIT_CASES: usize = 1_500;
/// Streams holding a line near [`MAX_FRAME_BYTES`] (16 MiB each: few).
const BIG_CASES: usize = 12;
const BUDGET: Duration = Duration::from_secs(10);
/// Cases run whatever the time: the first ones decide the assertions on
/// what was reached, so a slow or loaded machine cannot fail them.
const MIN_CASES: usize = 200;

impl Rng {
    /// The random source of a test's case, and its seed.
    fn new(test: u64, case: usize) -> (Self, u64) {
        let seed = 0x9e37_79b9_7f4a_7c15 ^ test.rotate_left(32) ^ (case as u64 + 1);
        (Rng(seed), seed)
    }
}

// --- valid frames ---------------------------------------------------------------

/// Text with what JSON must escape, multi-byte characters and newlines.
fn text(rng: &mut Rng) -> String {
    (0..rng.below(24))
        .map(|_| match rng.below(9) {
            0 => '"',
            1 => '\\',
            2 => '\n',
            3 => char::from(rng.below(32) as u8),
            4 => 'é',
            5 => '\u{2028}',
            6 => '\u{1f600}',
            7 => '\u{7f}',
            _ => char::from(b'a' + rng.below(26) as u8),
        })
        .collect()
}

fn number(rng: &mut Rng) -> u64 {
    match rng.below(4) {
        0 => 0,
        1 => u64::MAX,
        2 => rng.next_u64(),
        _ => rng.below(1000) as u64,
    }
}

fn status(rng: &mut Rng) -> i32 {
    let any = rng.next_u64() as i32;
    *rng.pick(&[0, 1, 130, 139, -1, i32::MIN, i32::MAX, any])
}

fn request(rng: &mut Rng) -> Request {
    let id = number(rng);
    match rng.below(5) {
        0 => Request::Exec {
            id,
            code: text(rng),
            output_bytes: number(rng) as usize,
            files: (0..rng.below(3))
                .map(|_| FileIn {
                    path: text(rng),
                    replace: rng.below(2) == 0,
                })
                .collect(),
            once: rng.below(2) == 0,
            live: rng.below(2) == 0,
        },
        1 => Request::Read {
            id,
            path: text(rng),
            offset: number(rng),
            max_bytes: number(rng),
        },
        2 => Request::Interrupt { id },
        3 => Request::Ping { id },
        _ => Request::Shutdown { id },
    }
}

fn reply(rng: &mut Rng) -> Reply {
    let id = number(rng);
    match rng.below(4) {
        0 => Reply::Exec(ExecReply {
            id,
            status: status(rng),
            stdout: text(rng),
            stderr: text(rng),
            stdout_dropped: number(rng),
            stderr_dropped: number(rng),
            exit: match rng.below(3) {
                0 => None,
                1 => Some(Exit::Code(status(rng))),
                _ => Some(Exit::Signal(status(rng))),
            },
            restarted: rng.below(2) == 0,
            interrupted: rng.below(2) == 0,
            flooded: match rng.below(3) {
                0 => None,
                1 => Some(Stream::Stdout),
                _ => Some(Stream::Stderr),
            },
            duration_ms: number(rng),
            outputs: (0..rng.below(3))
                .map(|_| Output {
                    path: text(rng),
                    size: number(rng),
                    mime: text(rng),
                })
                .collect(),
            outputs_more: number(rng),
        }),
        1 => {
            let bytes: Vec<u8> = (0..rng.below(64)).map(|_| rng.next_u64() as u8).collect();
            Reply::File(FileReply {
                id,
                path: text(rng),
                size: number(rng),
                offset: number(rng),
                data: encode_data(&bytes),
                eof: rng.below(2) == 0,
            })
        }
        2 => Reply::Ack {
            id,
            busy: rng.below(2) == 0,
        },
        _ => Reply::Error {
            id: (rng.below(3) > 0).then_some(id),
            code: *rng.pick(&[
                ErrorCode::BadRequest,
                ErrorCode::FrameTooLarge,
                ErrorCode::Busy,
                ErrorCode::SpawnFailed,
                ErrorCode::BadFile,
                ErrorCode::NotFound,
            ]),
            message: text(rng),
        },
    }
}

/// A valid frame of either direction, newline included.
fn valid_frame(rng: &mut Rng) -> Vec<u8> {
    let line = if rng.below(2) == 0 {
        encode(&request(rng))
    } else {
        encode(&reply(rng))
    };
    line.expect("a small frame encodes")
}

// --- mutations -----------------------------------------------------------------

/// A random JSON value, sometimes one that is nearly right.
fn value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth > 2 { 10 } else { 12 }) {
        0 => Value::Null,
        1 => json!(rng.below(2) == 0),
        2 => json!(-1),
        3 => json!(u64::MAX),
        4 => json!(1.5),
        5 => json!(rng.next_u64() % 100_000),
        6 => json!(i64::MIN),
        7 => json!(*rng.pick(&[
            "",
            "exec",
            "read",
            "ping",
            "interrupt",
            "shutdown",
            "launch",
            "error",
            "ack",
            "file",
            "signal",
            "code",
            "busy",
            "AAAA",
            "not base64",
            "\u{0}",
            "a\nb",
        ])),
        8 => json!(text(rng)),
        9 => json!("x".repeat(rng.below(300))),
        10 => Value::Array((0..rng.below(4)).map(|_| value(rng, depth + 1)).collect()),
        _ => {
            let mut map = serde_json::Map::new();
            for _ in 0..rng.below(4) {
                map.insert(key(rng), value(rng, depth + 1));
            }
            Value::Object(map)
        }
    }
}

fn key(rng: &mut Rng) -> String {
    rng.pick(&[
        "id",
        "op",
        "type",
        "code",
        "output_bytes",
        "files",
        "path",
        "replace",
        "file",
        "offset",
        "max_bytes",
        "busy",
        "status",
        "exit",
        "message",
        "data",
        "x",
        "",
    ])
    .to_string()
}

/// Every object or array inside `v` (as a path of keys and indexes).
fn containers(v: &Value, here: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    match v {
        Value::Object(map) => {
            out.push(here.clone());
            for (k, child) in map {
                here.push(json!(k));
                containers(child, here, out);
                here.pop();
            }
        }
        Value::Array(items) => {
            out.push(here.clone());
            for (i, child) in items.iter().enumerate() {
                here.push(json!(i));
                containers(child, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

fn at<'a>(v: &'a mut Value, path: &[Value]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, step| match step {
        Value::String(k) => v.get_mut(k.as_str()),
        Value::Number(i) => v.get_mut(i.as_u64()? as usize),
        _ => None,
    })
}

/// A valid frame changed at the level of its JSON values.
fn mutate_values(rng: &mut Rng) -> Vec<u8> {
    let line = valid_frame(rng);
    let mut v: Value = serde_json::from_slice(&line).expect("a valid frame is JSON");
    for _ in 0..1 + rng.below(3) {
        let mut all = Vec::new();
        containers(&v, &mut Vec::new(), &mut all);
        let path = rng.pick(&all).clone();
        match at(&mut v, &path) {
            Some(Value::Object(map)) => {
                let keys: Vec<String> = map.keys().cloned().collect();
                match rng.below(4) {
                    0 if !keys.is_empty() => {
                        map.remove(rng.pick(&keys));
                    }
                    1 if !keys.is_empty() => {
                        let old = rng.pick(&keys).clone();
                        let moved = map.remove(&old).unwrap_or(Value::Null);
                        map.insert(format!("{old}x"), moved);
                    }
                    2 if !keys.is_empty() => {
                        map.insert(rng.pick(&keys).clone(), value(rng, 0));
                    }
                    _ => {
                        map.insert(key(rng), value(rng, 0));
                    }
                }
            }
            Some(Value::Array(items)) => {
                if items.is_empty() || rng.below(2) == 0 {
                    items.push(value(rng, 0));
                } else {
                    let i = rng.below(items.len());
                    items[i] = value(rng, 0);
                }
            }
            _ => {}
        }
    }
    let mut bytes = v.to_string().into_bytes();
    if rng.below(4) == 0 {
        // A duplicated field, which JSON allows and the frames must not.
        if let Some(i) = bytes.iter().rposition(|&b| b == b'}') {
            let fields: [&[u8]; 3] = [br#","id":1"#, br#","op":"ping""#, br#","type":"ack""#];
            let field = *rng.pick(&fields);
            bytes.splice(i..i, field.iter().copied());
        }
    }
    bytes
}

/// Bytes flipped, cut, inserted or repeated.
fn mutate_bytes(rng: &mut Rng, mut bytes: Vec<u8>) -> Vec<u8> {
    const TOKENS: &[&[u8]] = &[
        b"{",
        b"}",
        b"[",
        b"]",
        b"\"",
        b",",
        b":",
        b"0",
        b"-",
        b"\\",
        b"\n",
        b"\r",
        b"\xff",
        b"\xc3",
        b"\x00",
        b"1e999",
        b"-0",
        b"18446744073709551616",
        b"\\u0000",
        b"\\ud800",
        b"null",
        b" ",
    ];
    for _ in 0..1 + rng.below(4) {
        if bytes.is_empty() {
            let token = *rng.pick(TOKENS);
            bytes.extend_from_slice(token);
            continue;
        }
        let i = rng.below(bytes.len());
        match rng.below(4) {
            0 => bytes[i] = rng.next_u64() as u8,
            1 => bytes.truncate(i),
            2 => {
                let token = rng.pick(TOKENS);
                bytes.splice(i..i, token.iter().copied());
            }
            _ => {
                let end = (i + 1 + rng.below(16)).min(bytes.len());
                let piece = bytes[i..end].to_vec();
                bytes.splice(i..i, piece);
            }
        }
    }
    bytes
}

/// Random bytes, mostly JSON's own characters.
fn noise(rng: &mut Rng) -> Vec<u8> {
    (0..rng.below(256))
        .map(|_| {
            if rng.below(2) == 0 {
                *rng.pick(b"{}[]\",:0123456789-.eE\\ \nnulltruefalse\"id\"\"op\"")
            } else {
                rng.next_u64() as u8
            }
        })
        .collect()
}

/// Nesting deeper than the JSON reader's recursion limit.
fn deep(rng: &mut Rng) -> Vec<u8> {
    let depth = 100 + rng.below(20_000);
    let open = if rng.below(2) == 0 { "[" } else { "{\"id\":" };
    let mut line = br#"{"op":"ping","id":"#.to_vec();
    line.extend(open.repeat(depth).bytes());
    line
}

/// One line for the decoder: arbitrary, or a valid frame gone wrong.
fn fuzz_line(rng: &mut Rng) -> Vec<u8> {
    match rng.below(10) {
        0 => noise(rng),
        1 => deep(rng),
        2 | 3 => {
            let line = valid_frame(rng);
            mutate_bytes(rng, line)
        }
        4..=7 => mutate_values(rng),
        _ => {
            let line = mutate_values(rng);
            mutate_bytes(rng, line)
        }
    }
}

// --- the properties ----------------------------------------------------------

/// Runs `body` for each case until `cases` or [`BUDGET`]; a panic is
/// reported with the case's seed. Returns how many cases ran.
fn cases(test: u64, cases: usize, mut body: impl FnMut(&mut Rng, u64)) -> usize {
    let started = Instant::now();
    let mut ran = 0;
    for case in 0..cases {
        if case >= MIN_CASES.min(cases) && started.elapsed() > BUDGET {
            break;
        }
        let (mut rng, seed) = Rng::new(test, case);
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| body(&mut rng, seed))) {
            let why = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a panic");
            panic!("case {case} (seed {seed:#x}): {why}");
        }
        ran += 1;
    }
    ran
}

/// The frame of a value holds one newline, its last byte.
fn one_line(line: &[u8], seed: u64) {
    assert_eq!(
        line.iter().position(|&b| b == b'\n'),
        Some(line.len() - 1),
        "seed {seed:#x}: {}",
        String::from_utf8_lossy(line)
    );
}

#[test]
fn valid_frames_round_trip() {
    let ran = cases(1, DECODE_CASES, |rng, seed| {
        let sent = request(rng);
        let line = encode(&sent).expect("a small request encodes");
        one_line(&line, seed);
        assert_eq!(decode::<Request>(&line).unwrap(), sent, "seed {seed:#x}");
        assert_eq!(
            decode::<Request>(&line[..line.len() - 1]).unwrap(),
            sent,
            "seed {seed:#x}: without its newline"
        );
        assert_eq!(salvage_id(&line), Some(sent.id()), "seed {seed:#x}");
        let sent = reply(rng);
        let line = encode(&sent).expect("a small reply encodes");
        one_line(&line, seed);
        let back = decode::<Reply>(&line).unwrap();
        assert_eq!(back, sent, "seed {seed:#x}");
        assert_eq!(salvage_id(&line), sent.id(), "seed {seed:#x}");
        if let Reply::File(file) = &back {
            let bytes = file.bytes().expect("encode_data is base64");
            assert_eq!(encode_data(&bytes), file.data, "seed {seed:#x}");
        }
    });
    assert!(ran > 100, "only {ran} cases ran");
}

/// Decodes `line` both ways: no panic, and what is accepted is consistent.
fn decode_checked(line: &[u8], seed: u64) -> (bool, bool) {
    let salvaged = salvage_id(line);
    let request = decode::<Request>(line).ok();
    if let Some(r) = &request {
        let again = encode(r).expect("an accepted request re-encodes");
        one_line(&again, seed);
        assert_eq!(&decode::<Request>(&again).unwrap(), r, "seed {seed:#x}");
        assert_eq!(salvaged, Some(r.id()), "seed {seed:#x}: salvage_id");
    }
    let reply = decode::<Reply>(line).ok();
    if let Some(r) = &reply {
        let again = encode(r).expect("an accepted reply re-encodes");
        one_line(&again, seed);
        assert_eq!(&decode::<Reply>(&again).unwrap(), r, "seed {seed:#x}");
        assert_eq!(salvaged, r.id(), "seed {seed:#x}: salvage_id");
        if let Reply::File(file) = r {
            // Any data at all: an answer, never a panic.
            let _ = file.bytes();
        }
    }
    (request.is_some(), reply.is_some())
}

#[test]
fn arbitrary_and_mutated_lines_never_panic_and_what_decodes_round_trips() {
    let (mut accepted, mut refused) = (0, 0);
    let ran = cases(2, DECODE_CASES, |rng, seed| {
        let line = fuzz_line(rng);
        match decode_checked(&line, seed) {
            (false, false) => refused += 1,
            _ => accepted += 1,
        }
    });
    assert!(ran > 100, "only {ran} cases ran");
    // The mutations reach both sides: some stay valid, most do not.
    assert!(
        accepted > 0 && refused > accepted,
        "{accepted} accepted, {refused} refused"
    );
}

#[test]
fn a_line_over_the_limit_is_refused_before_it_is_parsed() {
    // Valid JSON but for its size: only the size check can refuse it.
    let mut line = br#"{"op":"ping","id":1}"#.to_vec();
    line.resize(MAX_FRAME_BYTES + 1, b' ');
    assert!(matches!(
        decode::<Request>(&line),
        Err(FrameError::TooLarge(n)) if n == MAX_FRAME_BYTES + 1
    ));
    line.truncate(MAX_FRAME_BYTES);
    assert_eq!(
        decode::<Request>(&line).unwrap(),
        Request::Ping { id: 1 },
        "a line of exactly the limit is read"
    );
}

/// What the framing rules say a whole stream splits into: each line
/// shorter than the limit is a frame, each longer one (also an unfinished
/// one that reached the limit) is reported once; the rest is pending.
fn model(stream: &[u8]) -> (Vec<Split>, usize) {
    let mut items = Vec::new();
    let mut rest = stream;
    while let Some(i) = rest.iter().position(|&b| b == b'\n') {
        items.push(if i < MAX_FRAME_BYTES {
            Split::Frame(rest[..i].to_vec())
        } else {
            Split::TooLarge
        });
        rest = &rest[i + 1..];
    }
    if rest.len() >= MAX_FRAME_BYTES {
        items.push(Split::TooLarge);
        return (items, 0);
    }
    (items, rest.len())
}

/// The stream pushed in pieces cut at `cuts` (sorted), frames taken after
/// each push; what came out and what is pending at the end.
fn feed(stream: &[u8], cuts: &[usize], seed: u64) -> (Vec<Split>, usize) {
    let mut splitter = Splitter::new();
    let mut items = Vec::new();
    let mut start = 0;
    for &cut in cuts.iter().chain([&stream.len()]) {
        splitter.push(&stream[start..cut]);
        start = cut;
        while let Some(item) = splitter.next_frame() {
            if let Split::Frame(line) = &item {
                assert!(
                    line.len() < MAX_FRAME_BYTES,
                    "seed {seed:#x}: a frame of {} bytes",
                    line.len()
                );
            }
            items.push(item);
        }
        assert!(
            splitter.pending() < MAX_FRAME_BYTES,
            "seed {seed:#x}: {} bytes of an unfinished line kept",
            splitter.pending()
        );
    }
    (items, splitter.pending())
}

/// A stream of frames, broken lines, noise and empty lines, sometimes with a
/// line near the size limit, sometimes ending inside a line.
fn stream(rng: &mut Rng, big: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let segments = rng.below(12);
    let big_at = big.then(|| rng.below(segments + 1));
    for i in 0..=segments {
        if big_at == Some(i) {
            // A line of MAX-2 ..= MAX+2 bytes, newline or not.
            let len = MAX_FRAME_BYTES - 2 + rng.below(5);
            let fill = *rng.pick(b"x{\"\\ \xff");
            out.resize(out.len() + len, fill);
            if rng.below(4) > 0 {
                out.push(b'\n');
            }
        }
        if i == segments {
            break;
        }
        match rng.below(6) {
            0 | 1 => out.extend(valid_frame(rng)),
            2 => {
                out.extend(fuzz_line(rng));
                out.push(b'\n');
            }
            3 => out.extend(noise(rng)),
            4 => out.push(b'\n'),
            _ => out.extend_from_slice(b"\r\n"),
        }
    }
    out
}

/// Cut points that matter: beside every newline and beside the size limit
/// of every line.
fn edges(stream: &[u8]) -> Vec<usize> {
    let mut cuts = Vec::new();
    let mut line_start = 0;
    for (i, &b) in stream.iter().enumerate() {
        if b == b'\n' {
            cuts.extend([i, i + 1]);
            for d in [MAX_FRAME_BYTES - 1, MAX_FRAME_BYTES, MAX_FRAME_BYTES + 1] {
                if line_start + d < i {
                    cuts.push(line_start + d);
                }
            }
            line_start = i + 1;
        }
    }
    for d in [MAX_FRAME_BYTES - 1, MAX_FRAME_BYTES, MAX_FRAME_BYTES + 1] {
        cuts.push(line_start + d);
    }
    cuts.retain(|&c| c > 0 && c < stream.len());
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

fn check_splits(stream: &[u8], rng: &mut Rng, seed: u64) {
    let expected = model(stream);
    let mut random: Vec<usize> = (0..rng.below(16))
        .map(|_| rng.below(stream.len()))
        .collect();
    random.sort_unstable();
    let mut cut_sets = vec![("one push", Vec::new()), ("random cuts", random)];
    cut_sets.push(("cuts beside newlines and the limit", edges(stream)));
    if stream.len() <= 4096 {
        cut_sets.push(("every byte alone", (1..stream.len()).collect()));
    }
    for (how, cuts) in cut_sets {
        let got = feed(stream, &cuts, seed);
        assert!(
            got == expected,
            "seed {seed:#x}, {how}: {} items and {} pending, expected {} items and {} pending",
            got.0.len(),
            got.1,
            expected.0.len(),
            expected.1
        );
    }
}

#[test]
fn the_splitter_yields_the_same_frames_wherever_the_stream_is_cut() {
    let mut frames = 0;
    let ran = cases(3, SPLIT_CASES, |rng, seed| {
        let stream = stream(rng, false);
        check_splits(&stream, rng, seed);
        frames += model(&stream).0.len();
    });
    assert!(ran > 100 && frames > ran, "{ran} cases, {frames} frames");
}

#[test]
fn the_splitter_holds_no_line_over_the_limit_wherever_it_is_cut() {
    let (mut too_large, mut near) = (0, 0);
    let ran = cases(4, BIG_CASES, |rng, seed| {
        let stream = stream(rng, true);
        check_splits(&stream, rng, seed);
        for item in model(&stream).0 {
            match item {
                Split::TooLarge => too_large += 1,
                Split::Frame(line) if line.len() >= MAX_FRAME_BYTES - 2 => near += 1,
                Split::Frame(_) => {}
            }
        }
    });
    // Lines of MAX-2 ..= MAX+2 bytes: both sides of the limit are reached.
    assert!(
        ran > 2 && too_large > 0 && near > 0,
        "{ran} cases: {too_large} lines too large, {near} frames just under the limit"
    );
}
