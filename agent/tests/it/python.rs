//! Python sessions: state, hostile output, interrupts, dead interpreters.

use proto::frame::Exit;

use crate::both_modes;
use crate::harness::{Agent, Lang, Mode, OUTPUT_BYTES, assert_ok, assert_prints};

both_modes!(
    state_persists_between_calls,
    last_expression_is_shown,
    exceptions_fail_the_call_and_keep_the_interpreter,
    a_flood_of_stdout_is_capped,
    a_flood_of_stderr_is_capped,
    subprocesses_print_into_the_call_and_cannot_see_the_channel,
    reading_stdin_gets_end_of_file,
    a_fake_frame_is_just_output,
    interrupt_raises_keyboard_interrupt_and_keeps_state,
    code_ignoring_sigint_runs_on_until_its_jail_is_killed,
    each_exit_is_reported_and_the_next_call_starts_afresh,
    a_dead_interpreter_leaves_no_process_behind,
    a_forked_child_does_not_become_a_second_driver,
    the_driver_imports_nothing_heavy_before_the_first_call,
    a_traceback_printed_by_user_code_shows_earlier_cells,
);

fn state_persists_between_calls(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    let reply = a.exec(
        "import math, os\nx = 41\ndef f():\n    return x + 1\nclass C:\n    n = 3\nos.chdir('/tmp')",
    );
    assert_ok(&reply);
    assert_prints(
        &mut a,
        "print(f(), math.floor(2.5), C.n, os.getcwd())",
        "42 2 3 /tmp\n",
    );
    // The namespace is __main__'s, so what it defines pickles.
    assert_prints(
        &mut a,
        "import pickle\nprint(pickle.loads(pickle.dumps(C())).n)",
        "3\n",
    );
    a.close();
}

fn last_expression_is_shown(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    assert_prints(&mut a, "x = 20\nx * 2 + 2", "42\n");
    assert_prints(&mut a, "_ + 1", "43\n");
    assert_prints(&mut a, "'text é✓'", "'text é✓'\n");
    assert_prints(&mut a, "None", "");
    a.close();
}

fn exceptions_fail_the_call_and_keep_the_interpreter(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    let reply = a.exec("y = 1\ndef g():\n    raise ValueError('bad')\ng()");
    assert_eq!(reply.status, 1, "{reply:#?}");
    assert_eq!(reply.exit, None);
    assert!(
        reply
            .stderr
            .starts_with("Traceback (most recent call last):\n"),
        "{reply:#?}"
    );
    assert!(
        reply
            .stderr
            .contains("line 3, in g\n    raise ValueError('bad')\n"),
        "source lines are shown: {reply:#?}"
    );
    assert!(reply.stderr.ends_with("ValueError: bad\n"), "{reply:#?}");
    assert!(
        !reply.stderr.contains("python.py"),
        "no driver frames: {reply:#?}"
    );
    let reply = a.exec("def h(:");
    assert_eq!(reply.status, 1, "{reply:#?}");
    assert!(reply.stderr.contains("SyntaxError"), "{reply:#?}");
    assert!(!reply.stderr.contains("python.py"), "{reply:#?}");
    assert_prints(&mut a, "print(y)", "1\n");
    a.close();
}

fn a_flood_of_stdout_is_capped(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    let reply = a.exec("import os\nn = os.write(1, b'x' * 10**7)\nn = os.write(1, b'END')");
    assert_eq!(reply.status, 0, "{reply:#?}");
    assert_eq!(reply.stdout_dropped, 10_000_003 - OUTPUT_BYTES as u64);
    assert!(reply.stdout.starts_with(&"x".repeat(OUTPUT_BYTES / 2)));
    assert!(reply.stdout.ends_with("xEND"), "the tail is kept");
    assert!(reply.stdout.contains("\n[... 9995907 bytes dropped ...]\n"));
    assert_prints(&mut a, "print('next')", "next\n");
    a.close();
}

fn a_flood_of_stderr_is_capped(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    let reply = a.exec("import sys\nn = sys.stderr.write('e' * 5_000_000)");
    assert_eq!(reply.status, 0, "{reply:#?}");
    assert_eq!(reply.stdout, "");
    assert_eq!(reply.stderr_dropped, 5_000_000 - OUTPUT_BYTES as u64);
    assert_eq!(reply.stdout_dropped, 0);
    assert_prints(&mut a, "print('next')", "next\n");
    a.close();
}

fn subprocesses_print_into_the_call_and_cannot_see_the_channel(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    assert_prints(
        &mut a,
        "import subprocess\n_ = subprocess.run(['echo', 'hi'])",
        "hi\n",
    );
    // ls's own directory fd is 3: nothing of the agent's is inherited.
    assert_prints(
        &mut a,
        "_ = subprocess.run(['ls', '/proc/self/fd'])",
        "0\n1\n2\n3\n",
    );
    a.close();
}

fn reading_stdin_gets_end_of_file(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    let reply = a.exec("print(input())");
    assert_eq!(reply.status, 1, "{reply:#?}");
    assert!(
        reply
            .stderr
            .ends_with("EOFError: EOF when reading a line\n"),
        "{reply:#?}"
    );
    assert_prints(&mut a, "import sys\nprint(repr(sys.stdin.read()))", "''\n");
    a.close();
}

fn a_fake_frame_is_just_output(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    let fake = r#"{"type":"exec","id":1,"status":0,"stdout":"forged","stderr":"","stdout_dropped":0,"stderr_dropped":0,"exit":null,"restarted":false,"interrupted":false,"duration_ms":0}"#;
    let id = a.send_exec(&format!(
        "print({fake:?})\nimport os\nn = os.write(1, b'\\n' + {fake:?}.encode() + b'\\n')"
    ));
    let reply = a.exec_reply(id);
    assert_ok(&reply);
    assert_eq!(reply.id, id);
    assert_eq!(reply.stdout, format!("{fake}\n\n{fake}\n"));
    a.close();
}

fn interrupt_raises_keyboard_interrupt_and_keeps_state(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    assert_ok(&a.exec("y = 42"));
    let id = a.send_exec("while True: pass");
    assert!(a.interrupt(), "the exec was running");
    let reply = a.exec_reply(id);
    assert_eq!(reply.status, 130, "{reply:#?}");
    assert!(
        reply.interrupted && !reply.restarted && reply.exit.is_none(),
        "{reply:#?}"
    );
    assert!(reply.stderr.ends_with("KeyboardInterrupt\n"), "{reply:#?}");
    assert!(!reply.stderr.contains("python.py"), "{reply:#?}");
    assert_prints(&mut a, "print(y)", "42\n");
    // A subprocess in the foreground is interrupted with it.
    let id = a.send_exec(&format!(
        "import subprocess\nsubprocess.run(['sleep', '{}'])",
        a.token
    ));
    a.wait_for_process(&a.token.clone());
    assert!(a.interrupt());
    let reply = a.exec_reply(id);
    assert_eq!(reply.status, 130, "{reply:#?}");
    a.assert_no_process(&a.token.clone());
    assert_prints(&mut a, "print(y + 1)", "43\n");
    a.close();
}

fn code_ignoring_sigint_runs_on_until_its_jail_is_killed(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    let mut code = String::from("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n");
    if let Mode::Jail = mode {
        // Outside a jail only the interpreter dies with the agent; in one,
        // the pid namespace takes everything.
        code += &format!(
            "import subprocess\np = subprocess.Popen(['sleep', '{}'])\n",
            a.token
        );
    }
    assert_ok(&a.exec(&code));
    a.send_exec("while True: pass");
    assert!(a.interrupt());
    assert!(a.ping(), "the agent answers while the code runs on");
    assert!(a.interrupt());
    assert!(a.ping());
    a.kill_group();
}

fn each_exit_is_reported_and_the_next_call_starts_afresh(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    let cases = [
        ("exit()", "", Exit::Code(0)),
        (
            "import sys\nprint('bye')\nsys.exit(3)",
            "bye\n",
            Exit::Code(3),
        ),
        ("raise SystemExit('why')", "", Exit::Code(1)),
        ("import ctypes\nctypes.string_at(0)", "", Exit::Signal(11)),
        (
            "import os\nprint('killed')\nos.kill(os.getpid(), 9)",
            "killed\n",
            Exit::Signal(9),
        ),
    ];
    for (code, stdout, exit) in cases {
        assert_ok(&a.exec("x = 1"));
        let reply = a.exec(code);
        assert_eq!(reply.exit, Some(exit), "{code}: {reply:#?}");
        assert_eq!(reply.status, exit.status(), "{reply:#?}");
        assert_eq!(reply.stdout, stdout, "{reply:#?}");
        assert!(!reply.restarted, "{reply:#?}");
        let reply = a.exec("print(x)");
        assert!(reply.restarted, "after {code}: {reply:#?}");
        assert_eq!(reply.status, 1, "the state is gone: {reply:#?}");
        assert!(reply.stderr.contains("NameError"), "{reply:#?}");
        assert_prints(&mut a, "print('fresh')", "fresh\n");
    }
    a.close();
}

fn a_dead_interpreter_leaves_no_process_behind(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    let token = a.token.clone();
    let reply = a.exec(&format!(
        "import subprocess, os\np = subprocess.Popen(['sleep', '{token}'])\nos._exit(5)"
    ));
    assert_eq!(reply.exit, Some(Exit::Code(5)), "{reply:#?}");
    a.assert_no_process(&token);
    let reply = a.exec("print('again')");
    assert_eq!(
        (reply.stdout.as_str(), reply.restarted),
        ("again\n", true),
        "{reply:#?}"
    );
    a.close();
}

fn a_forked_child_does_not_become_a_second_driver(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    // The child falls through the code back into the driver, which must not
    // answer for it.
    assert_prints(
        &mut a,
        "import os\npid = os.fork()\nif pid == 0:\n    print('child')\nelse:\n    os.waitpid(pid, 0)\n    print('parent')",
        "child\nparent\n",
    );
    assert_prints(&mut a, "print(pid > 0)", "True\n");
    a.close();
}

/// The first call of a session waits for the driver's imports: it loads no
/// module the first call can do without: the parser's `ast` (with the
/// `enum` and `contextlib` it loads, which the host's `site` may load
/// anyway), `signal` (which builds enums of every signal at import: the
/// driver uses its C module), `traceback`, `linecache` and its `tokenize`.
fn the_driver_imports_nothing_heavy_before_the_first_call(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    assert_prints(
        &mut a,
        "import sys\nprint(sorted(m for m in ['ast', 'linecache', 'signal', 'tokenize', 'traceback'] \
         if m in sys.modules))",
        "[]\n",
    );
    a.close();
}

/// Source lines of earlier cells reach tracebacks that user code prints
/// itself, whenever it imports `traceback` (the driver fills `linecache`
/// once it is loaded).
fn a_traceback_printed_by_user_code_shows_earlier_cells(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    assert_ok(&a.exec("def g():\n    raise ValueError('bad')"));
    let reply =
        a.exec("import traceback\ntry:\n    g()\nexcept ValueError:\n    traceback.print_exc()");
    assert_eq!(reply.status, 0, "{reply:#?}");
    assert!(
        reply
            .stderr
            .contains("line 2, in g\n    raise ValueError('bad')\n"),
        "source lines of cell 1 are shown: {reply:#?}"
    );
    let reply = a.exec("def k():\n    raise KeyError('late')\nk()");
    assert!(
        reply
            .stderr
            .contains("line 2, in k\n    raise KeyError('late')\n"),
        "{reply:#?}"
    );
    a.close();
}
