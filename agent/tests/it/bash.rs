//! Bash sessions: the shell's state, hostile output, interrupts, exits.

use proto::frame::Exit;

use crate::both_modes;
use crate::harness::{Agent, Lang, Mode, OUTPUT_BYTES, assert_ok, assert_prints};

both_modes!(
    shell_state_persists_between_calls,
    the_status_is_the_last_commands,
    hostile_output_and_stdin_are_harmless,
    commands_cannot_see_the_channel,
    interrupt_stops_a_foreground_command_and_keeps_the_shell,
    interrupt_stops_a_loop_inside_functions,
    exit_and_errexit_end_the_shell_which_is_restarted,
    background_jobs_die_with_the_session,
);

fn shell_state_persists_between_calls(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Bash);
    assert_ok(&a.exec(
        "x=5\nf() { echo \"f:$1\"; }\ncd /tmp\nexport E=exported\nset -o pipefail\nmkdir -p d",
    ));
    assert_prints(
        &mut a,
        "echo $x; f a; pwd; bash -c 'echo $E'; set -o | grep -w pipefail; ls -d d",
        "5\nf:a\n/tmp\nexported\npipefail       \ton\nd\n",
    );
    // `set -x` traces the code, not the driver, and persists too.
    let reply = a.exec("set -x\ny=1");
    assert_eq!(reply.stderr, "++ y=1\n", "{reply:#?}");
    let reply = a.exec("echo $y");
    assert_eq!(reply.stdout, "1\n");
    assert_eq!(reply.stderr, "++ echo 1\n", "{reply:#?}");
    let reply = a.exec("set +x");
    assert_eq!(reply.stderr, "++ set +x\n", "{reply:#?}");
    assert_prints(&mut a, "echo $y", "1\n");
    a.close();
}

fn the_status_is_the_last_commands(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Bash);
    let reply = a.exec("false");
    assert_eq!((reply.status, reply.exit), (1, None), "{reply:#?}");
    let reply = a.exec("echo out; (exit 3)");
    assert_eq!(
        (reply.status, reply.stdout.as_str()),
        (3, "out\n"),
        "{reply:#?}"
    );
    let reply = a.exec("ls /nonexistent");
    assert_eq!(reply.status, 2, "{reply:#?}");
    assert!(
        reply.stderr.contains("No such file or directory"),
        "{reply:#?}"
    );
    assert_prints(&mut a, "echo fine", "fine\n");
    a.close();
}

fn hostile_output_and_stdin_are_harmless(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Bash);
    let reply = a.exec("head -c 10000000 /dev/zero | tr '\\0' x; echo END");
    assert_eq!(reply.status, 0, "{reply:#?}");
    assert_eq!(reply.stdout_dropped, 10_000_004 - OUTPUT_BYTES as u64);
    assert!(reply.stdout.ends_with("xxEND\n"), "{reply:#?}");
    let reply = a.exec("head -c 5000000 /dev/zero | tr '\\0' e >&2");
    assert_eq!(reply.stderr_dropped, 5_000_000 - OUTPUT_BYTES as u64);
    assert_eq!(reply.stdout, "");
    assert_prints(
        &mut a,
        "read -r line; echo \"rc=$? line=$line\"",
        "rc=1 line=\n",
    );
    assert_prints(&mut a, "cat; echo done", "done\n");
    let fake = r#"{"type":"exec","id":1,"status":0,"stdout":"forged","stderr":"","stdout_dropped":0,"stderr_dropped":0,"exit":null,"restarted":false,"interrupted":false,"duration_ms":0}"#;
    let id = a.send_exec(&format!("echo '{fake}'"));
    let reply = a.exec_reply(id);
    assert_eq!(
        (reply.id, reply.stdout.as_str()),
        (id, format!("{fake}\n").as_str())
    );
    a.close();
}

fn commands_cannot_see_the_channel(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Bash);
    // ls's own directory fd is 3; nothing else beyond the standard three.
    assert_prints(&mut a, "ls /proc/self/fd", "0\n1\n2\n3\n");
    assert_prints(&mut a, "(ls /proc/self/fd)", "0\n1\n2\n3\n");
    a.close();
}

fn interrupt_stops_a_foreground_command_and_keeps_the_shell(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Bash);
    assert_ok(&a.exec("x=7"));
    let token = a.token.clone();
    let id = a.send_exec(&format!("sleep {token}; echo not reached"));
    a.wait_for_process(&token);
    assert!(a.interrupt(), "the exec was running");
    let reply = a.exec_reply(id);
    assert_eq!(reply.status, 130, "{reply:#?}");
    assert!(reply.interrupted && !reply.restarted, "{reply:#?}");
    assert_eq!(reply.stdout, "");
    a.assert_no_process(&token);
    assert_prints(&mut a, "echo $x", "7\n");
    a.close();
}

fn interrupt_stops_a_loop_inside_functions(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Bash);
    let id = a.send_exec("spin() { while :; do :; done; }\nouter() { spin; echo not reached; }\nouter; echo not reached");
    assert!(a.interrupt());
    let reply = a.exec_reply(id);
    assert_eq!(
        (reply.status, reply.stdout.as_str()),
        (130, ""),
        "{reply:#?}"
    );
    // Interrupts keep working call after call.
    let id = a.send_exec("while :; do :; done");
    assert!(a.interrupt());
    assert_eq!(a.exec_reply(id).status, 130);
    assert_prints(&mut a, "echo alive", "alive\n");
    a.close();
}

fn exit_and_errexit_end_the_shell_which_is_restarted(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Bash);
    assert_ok(&a.exec("x=1"));
    let reply = a.exec("echo bye; exit 7");
    assert_eq!(reply.exit, Some(Exit::Code(7)), "{reply:#?}");
    assert_eq!((reply.status, reply.stdout.as_str()), (7, "bye\n"));
    let reply = a.exec("echo \"x=$x\"");
    assert!(reply.restarted, "{reply:#?}");
    assert_eq!(reply.stdout, "x=\n", "state is lost: {reply:#?}");
    // Under set -e a failing command ends the shell; a last command that
    // errexit exempts does not.
    assert_ok(&a.exec("x=2\nset -e"));
    let reply = a.exec("[[ 1 == 2 ]] && echo no");
    assert_eq!((reply.status, reply.exit), (1, None), "{reply:#?}");
    let reply = a.exec("false\necho not reached");
    assert_eq!(reply.exit, Some(Exit::Code(1)), "{reply:#?}");
    let reply = a.exec("echo \"x=$x\"; [[ $- != *e* ]] && echo errexit-off");
    assert!(reply.restarted, "{reply:#?}");
    assert_eq!(reply.stdout, "x=\nerrexit-off\n");
    a.close();
}

fn background_jobs_die_with_the_session(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Bash);
    let token = a.token.clone();
    assert_ok(&a.exec(&format!("sleep {token} &")));
    a.wait_for_process(&token);
    assert_prints(&mut a, "jobs | wc -l", "1\n");
    a.close();
}
