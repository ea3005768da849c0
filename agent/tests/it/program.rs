//! Program sessions (agent/drivers/program.sh): each call's code is a whole
//! source, handed to the environment's runner, which builds and runs it;
//! here a runner whose "language" is bash (harness.rs, `PROGRAM_RUNNER`).

use crate::both_modes;
use crate::harness::{Agent, Lang, Mode, assert_prints};

both_modes!(
    each_call_runs_its_own_program_and_its_status_is_the_calls,
    the_program_cannot_see_the_channel_or_read_stdin,
    interrupt_stops_the_program_and_the_driver_takes_the_next_call,
);

fn each_call_runs_its_own_program_and_its_status_is_the_calls(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Program);
    let reply = a.exec("x=5; echo out; echo err >&2; exit 3");
    assert_eq!(
        (
            reply.status,
            reply.exit,
            reply.stdout.as_str(),
            reply.stderr.as_str()
        ),
        (3, None, "out\n", "err\n"),
        "{reply:#?}"
    );
    assert!(!reply.restarted, "{reply:#?}");
    // A program of its own: nothing of the last one's state, but its files.
    assert_prints(&mut a, "echo \"x=${x-unset}\"; echo kept >f", "x=unset\n");
    assert_prints(&mut a, "cat f", "kept\n");
    a.close();
}

fn the_program_cannot_see_the_channel_or_read_stdin(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Program);
    assert_prints(
        &mut a,
        "for fd in 3 4 62 63; do [ -e /proc/self/fd/$fd ] && echo \"fd $fd open\"; done; cat; echo eof",
        "eof\n",
    );
    a.close();
}

fn interrupt_stops_the_program_and_the_driver_takes_the_next_call(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Program);
    let token = a.token.clone();
    let id = a.send_exec(&format!("sleep {token}; echo not reached"));
    a.wait_for_process(&token);
    assert!(a.interrupt(), "the exec was running");
    let reply = a.exec_reply(id);
    assert_eq!(reply.status, 130, "{reply:#?}");
    assert!(reply.interrupted && !reply.restarted, "{reply:#?}");
    assert_eq!(reply.stdout, "");
    a.assert_no_process(&token);
    assert_prints(&mut a, "echo next", "next\n");
    a.close();
}
