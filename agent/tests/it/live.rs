//! Live output: an exec with `live` gets its output as it comes, in
//! `output` replies with its id, at most one per stream every
//! `LIVE_EVERY_MS` ms and `LIVE_CHUNK_BYTES` bytes each, whatever the code
//! writes; none without `live`, none after the exec's reply, which holds
//! the whole capped output as before.

use std::time::Instant;

use proto::frame::{self, ExecReply, LIVE_CHUNK_BYTES, LIVE_EVERY_MS, Reply, Stream};

use crate::both_modes;
use crate::harness::{Agent, Lang, Mode};

both_modes!(
    live_output_comes_while_the_code_runs,
    a_once_calls_output_comes_live_too,
    a_flood_sends_few_small_frames,
    no_live_output_unless_asked,
);

/// The replies to exec `id` up to its reply: its live outputs (stream,
/// bytes) and the reply; anything else is a failure.
fn live_until_reply(a: &mut Agent, id: u64) -> (Vec<(Stream, Vec<u8>)>, ExecReply) {
    let mut frames = Vec::new();
    loop {
        match a.next_reply() {
            Reply::Output {
                id: of,
                stream,
                data,
            } if of == id => frames.push((stream, frame::decode_data(&data).unwrap())),
            Reply::Exec(reply) if reply.id == id => return (frames, reply),
            other => panic!("{other:?}\nagent log:\n{}", a.log()),
        }
    }
}

/// Waits for a live output of exec `id` holding `needle`.
fn wait_live(a: &mut Agent, id: u64, needle: &str) -> Stream {
    loop {
        match a.next_reply() {
            Reply::Output {
                id: of,
                stream,
                data,
            } if of == id => {
                let bytes = frame::decode_data(&data).unwrap();
                if String::from_utf8_lossy(&bytes).contains(needle) {
                    return stream;
                }
            }
            other => panic!(
                "{other:?} before the live output {needle:?}\nagent log:\n{}",
                a.log()
            ),
        }
    }
}

/// Nothing more comes after an exec's reply: the next reply is a ping's.
fn nothing_after(a: &mut Agent) {
    let id = a.fresh_id();
    a.send(&proto::frame::Request::Ping { id });
    match a.next_reply() {
        Reply::Ack { id: of, busy } if of == id => assert!(!busy),
        other => panic!("{other:?} after the exec's reply\nagent log:\n{}", a.log()),
    }
}

fn live_output_comes_while_the_code_runs(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    // Each line one write, so that an interrupt cannot fall inside it.
    let code = "import sys, time\nsys.stdout.write('to stdout\\n'); sys.stdout.flush()\n\
                sys.stderr.write('to stderr\\n')\ntime.sleep(600)";
    let id = a.send_exec_live(code, 4096, false);
    let first = wait_live(&mut a, id, "to stdout\n");
    assert_eq!(first, Stream::Stdout);
    assert_eq!(wait_live(&mut a, id, "to stderr\n"), Stream::Stderr);
    // The code still runs: only the interrupt ends it.
    assert!(a.interrupt());
    let (frames, reply) = live_until_reply(&mut a, id);
    assert!(reply.interrupted, "{reply:?}");
    assert_eq!(reply.stdout, "to stdout\n", "the reply holds it all");
    assert!(reply.stderr.starts_with("to stderr\n"), "{}", reply.stderr);
    // The traceback may come live before the reply, and only on stderr.
    assert!(
        frames.iter().all(|(s, _)| *s == Stream::Stderr),
        "{frames:?}"
    );
    nothing_after(&mut a);
    // The next call, not live, gets none.
    let reply = a.exec("print('again')");
    assert_eq!(reply.stdout, "again\n");
    a.close();
}

fn a_once_calls_output_comes_live_too(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Bash);
    let id = a.send_exec_live("echo started; sleep 600", 4096, true);
    assert_eq!(wait_live(&mut a, id, "started"), Stream::Stdout);
    // A once call's interrupt kills it.
    assert!(a.interrupt());
    let (frames, reply) = live_until_reply(&mut a, id);
    assert!(frames.is_empty(), "{frames:?}");
    assert_eq!(reply.stdout, "started\n");
    assert_eq!(reply.status, 137, "{reply:?}");
    nothing_after(&mut a);
    a.close();
}

fn a_flood_sends_few_small_frames(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    // Both streams as fast as they go for 1.5 s, then a last line each.
    let code = "import sys, time\nend = time.monotonic() + 1.5\n\
                out, err = 'o' * 999 + '\\n', 'e' * 99 + '\\n'\n\
                while time.monotonic() < end:\n    sys.stdout.write(out)\n    sys.stderr.write(err)\n\
                print('last out')\nprint('last err', file=sys.stderr)";
    let started = Instant::now();
    let id = a.send_exec_live(code, 1 << 16, false);
    let (frames, reply) = live_until_reply(&mut a, id);
    // Measured by the test, from before the request: at least the agent's.
    let elapsed = started.elapsed().as_millis() as u64;
    assert_eq!(reply.status, 0, "{reply:?}");
    assert!(
        reply.stdout.ends_with("last out\n"),
        "the reply holds the end"
    );
    assert!(reply.stdout_dropped > 0, "it flooded past its cap");
    // A frame of a stream at once, then one a period at most.
    let most = elapsed / LIVE_EVERY_MS + 1;
    for stream in [Stream::Stdout, Stream::Stderr] {
        let of: Vec<&Vec<u8>> = (frames.iter())
            .filter(|(s, _)| *s == stream)
            .map(|(_, bytes)| bytes)
            .collect();
        assert!(!of.is_empty(), "{stream:?} came live");
        assert!(
            of.len() as u64 <= most,
            "{} frames of {stream:?} in {elapsed} ms",
            of.len()
        );
        let (mark, last) = match stream {
            Stream::Stdout => (b'o', &b"last out\n"[..]),
            Stream::Stderr => (b'e', &b"last err\n"[..]),
        };
        for bytes in of {
            assert!(!bytes.is_empty() && bytes.len() <= LIVE_CHUNK_BYTES);
            // Its own stream's bytes only (its last line may come live).
            let body = bytes.strip_suffix(last).unwrap_or(bytes);
            assert!(
                body.iter().all(|b| [mark, b'\n'].contains(b)),
                "{stream:?}: {}",
                String::from_utf8_lossy(bytes)
            );
        }
    }
    let sent: usize = frames.iter().map(|(_, bytes)| bytes.len()).sum();
    assert!(
        sent as u64 <= 2 * most * LIVE_CHUNK_BYTES as u64,
        "{sent} bytes"
    );
    nothing_after(&mut a);
    a.close();
}

fn no_live_output_unless_asked(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Bash);
    let id = a.send_exec_capped(
        "for i in $(seq 1000); do echo line $i; done; sleep 0.6; echo end",
        4096,
    );
    let (frames, reply) = live_until_reply(&mut a, id);
    assert!(frames.is_empty(), "{frames:?}");
    assert!(
        reply.stdout.ends_with("line 1000\nend\n"),
        "{}",
        reply.stdout
    );
    a.close();
}
