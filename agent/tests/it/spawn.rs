//! `spawn`: an argv run beside the interpreter (the sandbox command line's
//! `exec`), its output streamed as it comes, its status reported, the
//! interpreter's state untouched; `stop` kills it; bad argvs are refused.

use proto::frame::{ErrorCode, Exit};

use crate::both_modes;
use crate::harness::{Agent, Lang, Mode, assert_ok, assert_prints};

both_modes!(
    a_spawn_streams_bytes_and_keeps_the_interpreters_state,
    stop_kills_a_spawn_and_another_waits_its_turn,
    bad_argvs_are_refused,
);

fn a_spawn_streams_bytes_and_keeps_the_interpreters_state(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Bash);
    assert_ok(&a.exec("x=5; echo kept > f"));
    // No shell unless asked for; cwd the workspace; bytes as they are.
    let (out, err, status, exit) = a
        .spawn(&[
            "bash",
            "-c",
            "echo \"$x\" \"$1\"; cat f; printf '\\377\\n'; echo err >&2; exit 3",
            "sh",
            "a b;c",
        ])
        .unwrap();
    assert_eq!(out, b" a b;c\nkept\n\xff\n", "{}", a.log());
    assert_eq!(err, b"err\n");
    assert_eq!((status, exit), (3, Exit::Code(3)));
    // A large output comes whole, in chunks.
    let (out, _, status, _) = a.spawn(&["head", "-c", "300000", "/dev/zero"]).unwrap();
    assert_eq!((out.len(), status), (300_000, 0));
    assert_prints(&mut a, "echo $x", "5\n");
    a.close();
}

fn stop_kills_a_spawn_and_another_waits_its_turn(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Bash);
    // A sleep of its own mode's: the host and jail tests run at once. Its
    // seconds come as `$0`, so that the shell's own command line does not
    // hold `sleep SECONDS` and only the sleep is found below.
    let (seconds, sleep) = match mode {
        Mode::Host => ("100.1", "sleep 100.1"),
        Mode::Jail => ("100.2", "sleep 100.2"),
    };
    let id = a.send_spawn(&["sh", "-c", "echo started; exec sleep \"$0\"", seconds]);
    let second = a.send_spawn(&["true"]);
    let (code, message) = a.spawn_end(second).unwrap_err();
    assert_eq!(code, ErrorCode::Busy, "{message}");
    // The interpreter answers while the spawn runs.
    assert_prints(&mut a, "echo busy-free", "busy-free\n");
    // Stopped once it has written its line and become `sleep`: a stop
    // before the shell ran `echo` would have no line to show.
    a.wait_for_process(sleep);
    assert!(a.stop(id));
    let (out, _, status, exit) = a.spawn_end(id).unwrap();
    assert_eq!(out, b"started\n");
    assert_eq!((status, exit), (137, Exit::Signal(9)));
    assert!(!a.stop(id), "a stop of an ended spawn finds none");
    a.assert_no_process(sleep);
    a.close();
}

fn bad_argvs_are_refused(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Bash);
    for (argv, code) in [
        (&[][..], ErrorCode::BadRequest),
        (&[""][..], ErrorCode::BadRequest),
        (&["echo", "a\0b"][..], ErrorCode::BadRequest),
        (&["/no/such/program"][..], ErrorCode::SpawnFailed),
    ] {
        let (got, message) = a.spawn(argv).unwrap_err();
        assert_eq!(got, code, "{argv:?}: {message}");
    }
    assert_prints(&mut a, "echo alive", "alive\n");
    a.close();
}
