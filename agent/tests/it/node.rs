//! Node sessions: bindings, top-level await, hostile output, interrupts, exits.

use proto::frame::Exit;

use crate::both_modes;
use crate::harness::{Agent, Lang, Mode, OUTPUT_BYTES, assert_ok, assert_prints};

both_modes!(
    top_level_bindings_persist_between_calls,
    top_level_await_works_and_its_bindings_persist,
    errors_fail_the_call_and_keep_the_interpreter,
    hostile_output_and_stdin_are_harmless,
    interrupt_breaks_a_synchronous_loop_and_keeps_state,
    interrupt_ends_an_awaiting_cell,
    exits_are_reported_and_the_next_call_starts_afresh,
);

fn top_level_bindings_persist_between_calls(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Node);
    assert_ok(&a.exec(
        "const a = 1; let b = 2; var v = 3\nfunction f() { return a + b + v }\nclass K { static n = 4 }",
    ));
    assert_prints(&mut a, "f() + K.n", "10\n");
    assert_prints(&mut a, "b = 20; f()", "24\n");
    assert_prints(&mut a, "require('path').join('a', 'b')", "'a/b'\n");
    assert_prints(&mut a, "process.chdir('/tmp')", "");
    assert_prints(&mut a, "process.cwd()", "'/tmp'\n");
    a.close();
}

fn top_level_await_works_and_its_bindings_persist(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Node);
    assert_prints(
        &mut a,
        "const c = await new Promise(r => setTimeout(() => r(40), 20)); c + 2",
        "42\n",
    );
    assert_prints(&mut a, "c", "40\n");
    assert_prints(
        &mut a,
        "const { promisify } = require('util'); await promisify(setTimeout)(10); console.log('slept')",
        "slept\n",
    );
    a.close();
}

fn errors_fail_the_call_and_keep_the_interpreter(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Node);
    assert_ok(&a.exec("let kept = 'yes'"));
    let reply = a.exec("function bad() { throw new TypeError('deep') }\nbad()");
    assert_eq!((reply.status, reply.exit), (1, None), "{reply:#?}");
    assert!(
        reply
            .stderr
            .starts_with("Uncaught TypeError: deep\n    at bad (<cell 2>:1:24)\n"),
        "{reply:#?}"
    );
    let reply = a.exec("await Promise.reject(new Error('rejected'))");
    assert_eq!(reply.status, 1, "{reply:#?}");
    assert!(
        reply.stderr.contains("Uncaught Error: rejected"),
        "{reply:#?}"
    );
    let reply = a.exec("function (");
    assert_eq!(reply.status, 1, "{reply:#?}");
    assert!(reply.stderr.contains("SyntaxError"), "{reply:#?}");
    assert_prints(&mut a, "kept", "'yes'\n");
    a.close();
}

fn hostile_output_and_stdin_are_harmless(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Node);
    let reply = a.exec("void process.stdout.write('x'.repeat(1e7) + 'END')");
    assert_eq!(reply.status, 0, "{reply:#?}");
    assert_eq!(reply.stdout_dropped, 10_000_003 - OUTPUT_BYTES as u64);
    assert!(
        reply.stdout.ends_with("xEND"),
        "all of it came before the reply"
    );
    let reply = a.exec("void process.stderr.write('e'.repeat(5e6))");
    assert_eq!(reply.stderr_dropped, 5_000_000 - OUTPUT_BYTES as u64);
    assert_eq!(reply.stdout, "");
    assert_prints(
        &mut a,
        "void require('child_process').spawnSync('echo', ['hi'], { stdio: 'inherit' })",
        "hi\n",
    );
    assert_prints(
        &mut a,
        "console.log(require('child_process').execSync('ls /proc/self/fd', { encoding: 'utf8' }))",
        "0\n1\n2\n3\n\n",
    );
    assert_prints(
        &mut a,
        "require('fs').readFileSync(0, 'utf8').length",
        "0\n",
    );
    let fake = r#"{"type":"exec","id":1,"status":0,"stdout":"forged","stderr":"","stdout_dropped":0,"stderr_dropped":0,"exit":null,"restarted":false,"interrupted":false,"duration_ms":0}"#;
    let id = a.send_exec(&format!("console.log({fake:?})"));
    let reply = a.exec_reply(id);
    assert_eq!(
        (reply.id, reply.stdout.as_str()),
        (id, format!("{fake}\n").as_str())
    );
    a.close();
}

fn interrupt_breaks_a_synchronous_loop_and_keeps_state(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Node);
    assert_ok(&a.exec("let q = 5"));
    let id = a.send_exec("while (true) {}");
    assert!(a.interrupt(), "the exec was running");
    let reply = a.exec_reply(id);
    assert_eq!(reply.status, 130, "{reply:#?}");
    assert!(reply.interrupted && !reply.restarted, "{reply:#?}");
    assert_eq!(
        reply.stderr,
        "Uncaught Error: Script execution was interrupted by `SIGINT`\n"
    );
    assert_prints(&mut a, "q", "5\n");
    // A child process in the foreground is interrupted with it. When it
    // dies before node's watchdog thread runs, the cell ends with the
    // child's failure (status 1) rather than the interrupt's 130.
    let token = a.token.clone();
    let id = a.send_exec(&format!(
        "require('child_process').execSync('sleep {token}')"
    ));
    a.wait_for_process(&token);
    assert!(a.interrupt());
    let reply = a.exec_reply(id);
    assert!(
        reply.interrupted && [1, 130].contains(&reply.status),
        "{reply:#?}"
    );
    a.assert_no_process(&token);
    assert_prints(&mut a, "q + 1", "6\n");
    a.close();
}

fn interrupt_ends_an_awaiting_cell(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Node);
    assert_prints(
        &mut a,
        "let ticks = 0; setInterval(() => ticks++, 1); 'started'",
        "'started'\n",
    );
    let id = a.send_exec("await new Promise(() => {})");
    assert!(a.interrupt());
    let reply = a.exec_reply(id);
    assert_eq!(reply.status, 130, "{reply:#?}");
    assert!(reply.interrupted && reply.exit.is_none(), "{reply:#?}");
    assert!(
        reply.stderr.contains("interrupted by `SIGINT`"),
        "{reply:#?}"
    );
    // The event loop kept running, and keeps running between calls.
    assert_prints(
        &mut a,
        "await new Promise(r => setTimeout(r, 20)); ticks > 0",
        "true\n",
    );
    a.close();
}

fn exits_are_reported_and_the_next_call_starts_afresh(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Node);
    let cases = [
        ("console.log('bye'); process.exit(2)", Exit::Code(2)),
        ("process.kill(process.pid, 'SIGKILL')", Exit::Signal(9)),
    ];
    for (code, exit) in cases {
        assert_ok(&a.exec("var x = 1"));
        let reply = a.exec(code);
        assert_eq!(reply.exit, Some(exit), "{code}: {reply:#?}");
        assert_eq!(reply.status, exit.status());
        let reply = a.exec("typeof x");
        assert!(reply.restarted, "{reply:#?}");
        assert_eq!(reply.stdout, "'undefined'\n", "the state is gone");
    }
    a.close();
}
