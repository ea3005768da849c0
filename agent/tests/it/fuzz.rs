//! The agent fed random and mutated frames on stdin (the agent's side of
//! the protocol's fuzz target), a bounded random loop with a fixed seed: valid
//! requests with fields dropped, renamed, repeated or given other JSON,
//! bytes flipped, cut or inserted (newlines too), and noise, sent in
//! batches. For every line the agent must answer exactly once, with what
//! [`frame::decode`] says the line is (a `bad_request` error carrying the id
//! [`frame::salvage_id`] finds, or the request's own answer or error, an
//! exec that asked for it its live output besides); it
//! must never exit, never write an unreadable frame, keep at most one
//! interpreter and no zombie, and, closed, leave no process it ever had.
//!
//! It runs in the fixture jail, as the agent runs for real: the code a
//! mutated exec carries stays inside it. It stops after [`LINES`] lines or
//! [`BUDGET`], whichever comes first (a guard on the suite's time, not an
//! assertion); a failure names the batch's seed.

use std::collections::{HashMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use proto::frame::{self, ErrorCode, LIVE_CHUNK_BYTES, Reply, Request};
use proto::fuzz::Rng;

use crate::harness::{Agent, DEADLINE, Lang, Mode, assert_prints};

const LINES: usize = 3000;
const BUDGET: Duration = Duration::from_secs(40);
/// The jail's processes: bwrap, the agent (the jail's pid 1), the
/// interpreter.
const JAIL_PROCESSES: usize = 3;

/// What a request's code does: short, straight-line (a mutation cannot make
/// a loop of it), some of it ending the interpreter or leaving a process.
fn code(rng: &mut Rng, token: &str) -> String {
    let code = match rng.below(10) {
        0 => "print(1)".to_string(),
        1 => "x = globals().get('x', 0) + 1\nprint(x)".into(),
        2 => "import sys\nsys.stderr.write('e')".into(),
        3 => "raise ValueError('v')".into(),
        4 => "exit(3)".into(),
        5 => "print('\u{e9}\\n')".into(),
        6 => "import os\nos.makedirs('outputs', exist_ok=True)\nopen('outputs/f.txt', 'w').write('hi')".into(),
        7 => format!("import subprocess\nsubprocess.Popen(['sleep', '{token}'])"),
        8 => "input()".into(),
        _ => "print(open('in.txt').read())".into(),
    };
    serde_json_string(&code)
}

/// `s` as a JSON string (the agent's tests have no JSON library of their own).
fn serde_json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Raw JSON values, some nearly right for some field.
const VALUES: &[&str] = &[
    "null",
    "true",
    "0",
    "-1",
    "1.5",
    "1e3",
    "18446744073709551615",
    "18446744073709551616",
    "\"\"",
    "\"x\"",
    "\"exec\"",
    "\"ping\"",
    "\"read\"",
    "\"f.txt\"",
    "\"../f.txt\"",
    "\"/etc/passwd\"",
    "\"\\u0000\"",
    "\"print(2)\\u0000\"",
    "\"\u{e9}\"",
    "[]",
    "{}",
    "[{\"path\":\"in.txt\",\"content\":\"x\"}]",
    "[{\"path\":\"a\",\"content\":1}]",
    "{\"id\":1}",
];

/// Fields of a valid request (never `shutdown`, which would end the agent).
fn request(rng: &mut Rng, id: u64, token: &str) -> Vec<(String, String)> {
    let mut fields = vec![("id".to_string(), id.to_string())];
    let mut add = |k: &str, v: String| fields.push((k.to_string(), v));
    match rng.below(6) {
        0..=2 => {
            add("op", "\"exec\"".into());
            add("code", code(rng, token));
            add(
                "output_bytes",
                rng.pick(&["4096", "0", "1", "18446744073709551615"])
                    .to_string(),
            );
            if rng.below(3) == 0 {
                let files = *rng.pick(&[
                    "[{\"path\":\"in.txt\",\"content\":\"in\"}]",
                    "[{\"path\":\"d/e/in.txt\",\"content\":\"\u{e9}\"}]",
                    "[{\"path\":\"../out.txt\",\"content\":\"x\"}]",
                    "[{\"path\":\"/etc/x\",\"content\":\"x\"}]",
                    "[]",
                ]);
                add("files", files.into());
            }
            if rng.below(4) == 0 {
                add("live", rng.pick(&["true", "false"]).to_string());
            }
        }
        3 => {
            add("op", "\"read\"".into());
            add(
                "path",
                rng.pick(&["\"f.txt\"", "\"missing.png\"", "\"../in.txt\"", "\"\""])
                    .to_string(),
            );
            add("offset", rng.pick(&["0", "1", "99999"]).to_string());
            add(
                "max_bytes",
                rng.pick(&["10", "0", "18446744073709551615"]).to_string(),
            );
        }
        4 => add("op", "\"interrupt\"".into()),
        _ => add("op", "\"ping\"".into()),
    }
    // Field order is free in JSON.
    if rng.below(2) == 0 {
        fields.rotate_left(1);
    }
    fields
}

/// The fields changed: dropped, renamed, repeated, given another value.
fn mutate_fields(rng: &mut Rng, fields: &mut Vec<(String, String)>) {
    for _ in 0..1 + rng.below(3) {
        if fields.is_empty() {
            fields.push(("id".into(), "1".into()));
        }
        let i = rng.below(fields.len());
        match rng.below(5) {
            0 => {
                fields.remove(i);
            }
            1 => fields[i].0.push('x'),
            2 => {
                let again = fields[i].clone();
                fields.push(again);
            }
            3 => fields.push((
                rng.pick(&["files", "op", "code", "extra", ""]).to_string(),
                rng.pick(VALUES).to_string(),
            )),
            _ => fields[i].1 = rng.pick(VALUES).to_string(),
        }
    }
}

fn object(fields: &[(String, String)]) -> Vec<u8> {
    let inner: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}:{v}", serde_json_string(k)))
        .collect();
    format!("{{{}}}", inner.join(",")).into_bytes()
}

/// Bytes flipped, cut, inserted or repeated.
fn mutate_bytes(rng: &mut Rng, bytes: &mut Vec<u8>) {
    const TOKENS: &[&[u8]] = &[
        b"{", b"}", b"[", b"]", b"\"", b",", b":", b"0", b"\\", b"\n", b"\r", b"\xff", b"\x00",
        b"null", b" ", b"\\u0000",
    ];
    for _ in 0..1 + rng.below(3) {
        if bytes.is_empty() {
            return;
        }
        let i = rng.below(bytes.len());
        match rng.below(4) {
            0 => bytes[i] = rng.next_u64() as u8,
            1 => bytes.truncate(i),
            2 => {
                let token = *rng.pick(TOKENS);
                bytes.splice(i..i, token.iter().copied());
            }
            _ => {
                let end = (i + 1 + rng.below(16)).min(bytes.len());
                let piece = bytes[i..end].to_vec();
                bytes.splice(i..i, piece);
            }
        }
    }
}

/// Some lines (mutations may have split one in two).
fn lines(rng: &mut Rng, next_id: &mut u64, token: &str) -> Vec<u8> {
    *next_id += 1;
    let mut fields = request(rng, *next_id, token);
    let mut bytes = match rng.below(8) {
        0 => (0..rng.below(200)).map(|_| rng.next_u64() as u8).collect(),
        1..=3 => object(&fields),
        4 | 5 => {
            mutate_fields(rng, &mut fields);
            object(&fields)
        }
        _ => {
            if rng.below(2) == 0 {
                mutate_fields(rng, &mut fields);
            }
            let mut bytes = object(&fields);
            mutate_bytes(rng, &mut bytes);
            bytes
        }
    };
    bytes.push(b'\n');
    bytes
}

/// What must answer a line.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Not a request: `bad_request`, with the id `salvage_id` finds.
    BadRequest(Option<u64>),
    Exec(u64),
    Read(u64),
    Ack(u64),
    /// A `put`: sent, never answered.
    Silent,
}

impl Expect {
    fn of(line: &[u8]) -> Option<Expect> {
        Some(match frame::decode::<Request>(line) {
            Err(_) => Expect::BadRequest(frame::salvage_id(line)),
            Ok(Request::Exec { id, .. }) => Expect::Exec(id),
            Ok(Request::Read { id, .. }) => Expect::Read(id),
            Ok(Request::Put { .. }) => Expect::Silent,
            Ok(Request::Interrupt { id } | Request::Ping { id }) => Expect::Ack(id),
            // Only a mutation makes one: such a line is not sent (a spawn
            // is tested in spawn.rs).
            Ok(
                Request::Shutdown { .. }
                | Request::Spawn { .. }
                | Request::Stop { .. }
                | Request::Input { .. }
                | Request::Resize { .. },
            ) => {
                return None;
            }
        })
    }

    fn accepts(self, reply: &Reply) -> bool {
        match (self, reply) {
            (
                Expect::BadRequest(want),
                Reply::Error {
                    id,
                    code: ErrorCode::BadRequest,
                    ..
                },
            ) => *id == want,
            (Expect::Exec(want), Reply::Exec(r)) => r.id == want,
            (Expect::Exec(want), Reply::Error { id, code, .. }) => {
                *id == Some(want)
                    && matches!(
                        code,
                        ErrorCode::Busy
                            | ErrorCode::BadRequest
                            | ErrorCode::BadFile
                            | ErrorCode::FileExists
                            | ErrorCode::SpawnFailed
                    )
            }
            (Expect::Read(want), Reply::File(f)) => f.id == want,
            (
                Expect::Read(want),
                Reply::Error {
                    id,
                    code: ErrorCode::NotFound,
                    ..
                },
            ) => *id == Some(want),
            (Expect::Ack(want), Reply::Ack { id, .. }) => *id == want,
            _ => false,
        }
    }
}

/// Whether every reply answers a different line (a perfect matching of
/// replies to lines, found by augmenting paths).
fn matched(expected: &[Expect], replies: &[Reply]) -> bool {
    fn augment(
        r: usize,
        edges: &[Vec<usize>],
        seen: &mut [bool],
        line_of: &mut [Option<usize>],
    ) -> bool {
        for &l in &edges[r] {
            if !seen[l] {
                seen[l] = true;
                if line_of[l].is_none_or(|other| augment(other, edges, seen, line_of)) {
                    line_of[l] = Some(r);
                    return true;
                }
            }
        }
        false
    }
    if expected.len() != replies.len() {
        return false;
    }
    let edges: Vec<Vec<usize>> = replies
        .iter()
        .map(|reply| {
            (0..expected.len())
                .filter(|&l| expected[l].accepts(reply))
                .collect()
        })
        .collect();
    let mut line_of = vec![None; expected.len()];
    (0..replies.len()).all(|r| augment(r, &edges, &mut vec![false; expected.len()], &mut line_of))
}

/// A process: its parent, its start time (to tell a reused pid), state, name.
struct Proc {
    ppid: u32,
    start: u64,
    state: char,
    comm: String,
}

fn processes() -> HashMap<u32, Proc> {
    let mut all = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let (Some(state), Some(ppid), Some(start)) = (rest.first(), rest.get(1), rest.get(19))
        else {
            continue;
        };
        all.insert(
            pid,
            Proc {
                ppid: ppid.parse().unwrap_or(0),
                start: start.parse().unwrap_or(0),
                state: state.chars().next().unwrap_or('?'),
                comm: stat[open + 1..close].to_string(),
            },
        );
    }
    all
}

/// `root` and every process below it.
fn tree(root: u32) -> Vec<(u32, Proc)> {
    let mut all = processes();
    let mut found = Vec::new();
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        todo.extend(all.iter().filter(|(_, p)| p.ppid == pid).map(|(&c, _)| c));
        if let Some(p) = all.remove(&pid) {
            found.push((pid, p));
        }
    }
    found
}

/// Waits (bounded) until the jail holds its own processes and at most one
/// interpreter, none of them a zombie (background `sleep`s of the code
/// aside); notes every process seen.
fn check_tree(agent: &Agent, seen: &mut HashSet<(u32, u64)>, seed: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let procs = tree(agent.pid());
        seen.extend(procs.iter().map(|(pid, p)| (*pid, p.start)));
        // The code's own children are the interpreter's to reap (Python's
        // subprocess does so at its next Popen), not the agent's: its
        // `sleep`s, wherever they ended up, and whatever the interpreter
        // forked (a child interrupted between fork and exec dies a zombie
        // still named python3).
        let agents: HashSet<u32> = procs
            .iter()
            .filter(|(_, p)| p.comm == "agent")
            .map(|(pid, _)| *pid)
            .collect();
        let interpreters: HashSet<u32> = procs
            .iter()
            .filter(|(_, p)| agents.contains(&p.ppid))
            .map(|(pid, _)| *pid)
            .collect();
        let own: Vec<(&u32, &Proc)> = procs
            .iter()
            .filter(|(_, p)| p.comm != "sleep" && !interpreters.contains(&p.ppid))
            .map(|(pid, p)| (pid, p))
            .collect();
        let zombies = own.iter().filter(|(_, p)| p.state == 'Z').count();
        if own.len() <= JAIL_PROCESSES && zombies == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "seed {seed:#x}: the jail holds {:?} ({zombies} zombies)\nagent log:\n{}",
            own.iter()
                .map(|(pid, p)| format!("{pid} {} {}", p.comm, p.state))
                .collect::<Vec<_>>(),
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn random_and_mutated_frames_get_answers_and_leave_nothing() {
    let mut a = Agent::start(Mode::Jail, Lang::Python);
    let token = a.token.clone();
    let started = Instant::now();
    let mut seen = HashSet::new();
    let (mut sent, mut batches, mut next_id) = (0, 0u64, 0u64);
    let mut kinds: HashMap<&'static str, usize> = HashMap::new();
    while sent < LINES && started.elapsed() < BUDGET {
        batches += 1;
        let seed = 0x9e37_79b9_7f4a_7c15 ^ batches;
        let mut rng = Rng(seed);
        let mut stream = Vec::new();
        for _ in 0..1 + rng.below(40) {
            stream.extend(lines(&mut rng, &mut next_id, &token));
        }
        // What the agent will see: lines, as it splits them.
        let mut expected = Vec::new();
        // The execs that asked for live output, which may come before
        // their answers.
        let mut live = HashSet::new();
        let mut batch = Vec::new();
        let mut pieces: Vec<&[u8]> = stream.split(|&b| b == b'\n').collect();
        // After the stream's last newline: not a line.
        pieces.pop();
        for line in pieces {
            if let Ok(Request::Exec { id, live: true, .. }) = frame::decode::<Request>(line) {
                live.insert(id);
            }
            if let Some(expect) = Expect::of(line) {
                if !matches!(expect, Expect::Silent) {
                    expected.push(expect);
                }
                batch.extend_from_slice(line);
                batch.push(b'\n');
            }
        }
        a.write_raw(&batch);
        let mut outputs = 0;
        let replies = catch_unwind(AssertUnwindSafe(|| {
            let mut replies = Vec::new();
            while replies.len() < expected.len() {
                match a.next_reply() {
                    Reply::Output { id, data, .. } if live.contains(&id) => {
                        let bytes = frame::decode_data(&data).expect("base64");
                        assert!(bytes.len() <= LIVE_CHUNK_BYTES, "{} bytes", bytes.len());
                        outputs += 1;
                    }
                    reply => replies.push(reply),
                }
            }
            replies
        }))
        .unwrap_or_else(|_| {
            panic!(
                "seed {seed:#x}: fewer answers than lines\nlines: {}",
                String::from_utf8_lossy(&batch)
            )
        });
        assert!(
            matched(&expected, &replies),
            "seed {seed:#x}: the replies do not answer the lines one each\nlines: {}\nexpected: {expected:?}\nreplies: {replies:?}\nagent log:\n{}",
            String::from_utf8_lossy(&batch),
            a.log()
        );
        for reply in &replies {
            let kind = match reply {
                Reply::Exec(_) => "exec",
                Reply::File(_) => "file",
                Reply::Ack { .. } => "ack",
                Reply::Output { .. } | Reply::Spawned { .. } => "spawn",
                Reply::Error {
                    code: ErrorCode::BadRequest,
                    ..
                } => "bad_request",
                Reply::Error { .. } => "other error",
            };
            *kinds.entry(kind).or_default() += 1;
        }
        *kinds.entry("live output").or_default() += outputs;
        sent += expected.len();
        check_tree(&a, &mut seen, seed);
    }
    // Nothing more came than the lines asked for, and the agent still works.
    a.send(&Request::Ping { id: u64::MAX });
    match a.next_reply() {
        Reply::Ack { id: u64::MAX, busy } => assert!(!busy, "an exec still runs"),
        other => panic!("a reply no line asked for: {other:?}"),
    }
    assert_prints(&mut a, "print('still here')", "still here\n");
    assert!(
        ["exec", "file", "ack", "bad_request", "other error"]
            .iter()
            .all(|k| kinds.get(k).is_some_and(|&n| n > 0))
            && sent > 100,
        "{sent} lines in {batches} batches: the mix missed a kind of reply: {kinds:?}"
    );
    assert!(
        seen.len() >= JAIL_PROCESSES,
        "the jail's processes were not found: {seen:?}"
    );
    a.close();
    // No process the jail ever had is left (a pid reused since is another).
    let deadline = Instant::now() + DEADLINE;
    loop {
        let now = processes();
        let left: Vec<_> = seen
            .iter()
            .filter(|(pid, start)| now.get(pid).is_some_and(|p| p.start == *start))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "processes left: {left:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "{sent} lines in {batches} batches: {kinds:?}; {} processes seen",
        seen.len()
    );
}
