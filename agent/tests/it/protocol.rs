//! The frames themselves: ids, busy, bad input, the agent's own lifetime.

use std::time::{Duration, Instant};

use proto::frame::{ErrorCode, MAX_FRAME_BYTES, Reply, Request};

use crate::both_modes;
use crate::harness::{Agent, DEADLINE, Lang, Mode, assert_prints};

both_modes!(
    ping_says_whether_an_exec_runs,
    a_second_exec_while_one_runs_is_busy,
    bad_frames_get_error_replies_and_the_agent_goes_on,
    closing_stdin_ends_the_agent_and_everything_it_started,
    shutdown_ends_the_agent_and_everything_it_started,
    output_written_between_calls_comes_with_the_next_reply,
);

#[test]
fn an_interpreter_that_cannot_start_is_reported_on_exec() {
    let mut a = Agent::start_program(Mode::Host, Lang::Python, "/nonexistent/python3");
    let id = a.send_exec("print(1)");
    let (code, message) = a.error(id);
    assert_eq!(code, ErrorCode::SpawnFailed);
    assert!(message.contains("/nonexistent/python3"), "{message}");
    assert!(!a.ping(), "the agent is still there");
    a.close();
}

fn ping_says_whether_an_exec_runs(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    assert!(!a.ping());
    let id = a.send_exec("while True: pass");
    assert!(a.ping());
    assert!(a.interrupt());
    assert_eq!(a.exec_reply(id).status, 130);
    assert!(!a.ping());
    assert!(!a.interrupt(), "nothing to interrupt");
    a.close();
}

fn a_second_exec_while_one_runs_is_busy(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    let first = a.send_exec("while True: pass");
    let second = a.send_exec("print('second')");
    let (code, message) = a.error(second);
    assert_eq!(code, ErrorCode::Busy);
    assert!(message.contains(&first.to_string()), "{message}");
    assert!(a.interrupt());
    let reply = a.exec_reply(first);
    assert_eq!((reply.id, reply.status), (first, 130));
    assert_prints(&mut a, "print('third')", "third\n");
    a.close();
}

fn bad_frames_get_error_replies_and_the_agent_goes_on(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    a.write_raw(b"not json\n");
    match a.next_reply() {
        Reply::Error {
            id: None,
            code: ErrorCode::BadRequest,
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    a.write_raw(b"{\"op\":\"frobnicate\",\"id\":77}\n");
    assert_eq!(a.error(77).0, ErrorCode::BadRequest);
    a.send(&Request::Exec {
        id: 78,
        code: "print(1)\0".into(),
        output_bytes: 10,
        files: vec![],
        once: false,
        live: false,
    });
    let (code, message) = a.error(78);
    assert_eq!(
        (code, message.as_str()),
        (ErrorCode::BadRequest, "the code contains a NUL byte")
    );
    let mut huge = vec![b'x'; MAX_FRAME_BYTES + 1];
    huge.push(b'\n');
    a.write_raw(&huge);
    match a.next_reply() {
        Reply::Error {
            id: None,
            code: ErrorCode::FrameTooLarge,
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    assert!(!a.ping());
    assert_prints(&mut a, "print('still here')", "still here\n");
    a.close();
}

fn closing_stdin_ends_the_agent_and_everything_it_started(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    let token = a.token.clone();
    let reply = a.exec(&format!(
        "import subprocess\np = subprocess.Popen(['sleep', '{token}'])"
    ));
    assert_eq!(reply.status, 0, "{reply:#?}");
    a.wait_for_process(&token);
    // Even with a call running.
    a.send_exec("while True: pass");
    a.close();
}

fn shutdown_ends_the_agent_and_everything_it_started(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Bash);
    let token = a.token.clone();
    assert_prints(
        &mut a,
        &format!("sleep {token} & echo started"),
        "started\n",
    );
    a.wait_for_process(&token);
    assert!(!a.shutdown());
    a.wait_gone();
}

fn output_written_between_calls_comes_with_the_next_reply(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Bash);
    let first = a.exec("{ sleep 0.2; echo late; } &");
    let deadline = Instant::now() + DEADLINE;
    let mut seen = first.stdout;
    while !seen.contains("late") {
        assert!(Instant::now() < deadline, "the late output was lost");
        std::thread::sleep(Duration::from_millis(50));
        seen += &a.exec(":").stdout;
    }
    assert_eq!(seen, "late\n");
    a.close();
}
