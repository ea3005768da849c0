//! `once` calls: the interpreter's only call, run as the environment's run
//! wrapper runs a script, so that a run served by a warm jail reads as one
//! served by a fresh run wrapper. Each script's stdout, stderr and exit are
//! compared with the host interpreter run as the run wrapper runs it
//! (lib/interpreters.nix: `python3 -`, `bash -c 'source /dev/stdin'`,
//! `node -`, the program runner) with the script on stdin. Node's stack
//! frames below the script's own are the one difference: they name the
//! driver where node's name its internals, so frame lines outside the
//! script are left out of node's comparison.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use proto::frame::{Exit, Stream};

use crate::both_modes;
use crate::harness::{Agent, Lang, Mode, PROGRAM_RUNNER};

both_modes!(
    python_scripts_read_as_a_run_wrappers,
    bash_scripts_read_as_a_run_wrappers,
    node_scripts_read_as_a_run_wrappers,
    program_sources_read_as_a_run_wrappers,
    a_once_call_is_killed_not_interrupted,
    a_once_call_that_floods_is_stopped,
);

/// How the run wrapper's interpreter ends `script`: stdout, stderr, exit.
fn as_run_wrapper(lang: Lang, script: &str) -> (String, String, Exit) {
    let mut command = match lang {
        Lang::Python => {
            let mut c = Command::new(lang.program());
            c.arg("-");
            c
        }
        Lang::Bash => {
            let mut c = Command::new(lang.program());
            c.args(["-c", "source /dev/stdin"]);
            c
        }
        Lang::Node => {
            let mut c = Command::new(lang.program());
            c.arg("-");
            c
        }
        Lang::Program => {
            let mut c = Command::new(lang.program());
            c.args(["-c", PROGRAM_RUNNER]);
            c
        }
    };
    let mut child = command
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    use std::os::unix::process::ExitStatusExt;
    let exit = match (out.status.code(), out.status.signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(signal)) => Exit::Signal(signal),
        _ => unreachable!(),
    };
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        exit,
    )
}

/// Node's stderr without the stack frames outside the script (`[stdin]`),
/// which name node's internals or the driver, and with a warning's pid
/// (`(node:PID)`) left out.
fn script_frames(stderr: &str) -> String {
    stderr
        .split_inclusive('\n')
        .filter(|line| !line.starts_with("    at ") || line.contains("[stdin]:"))
        .map(|line| match line.strip_prefix("(node:") {
            Some(rest) => format!("(node:PID){}", &rest[rest.find(')').unwrap() + 1..]),
            None => line.to_owned(),
        })
        .collect()
}

/// Each script in a fresh agent's `once` call, against the run wrapper's
/// interpreter.
fn compare(mode: Mode, lang: Lang, scripts: &[&str]) {
    for script in scripts {
        let mut a = Agent::start(mode, lang);
        let id = a.send_exec_once(script, 1 << 16);
        let reply = a.exec_reply(id);
        let (stdout, stderr, exit) = as_run_wrapper(lang, script);
        assert_eq!(reply.stdout, stdout, "stdout of {script:?}");
        let (ours, theirs) = match lang {
            Lang::Node => (script_frames(&reply.stderr), script_frames(&stderr)),
            _ => (reply.stderr.clone(), stderr),
        };
        assert_eq!(ours, theirs, "stderr of {script:?}");
        assert_eq!(reply.exit, Some(exit), "exit of {script:?}");
        assert_eq!(reply.status, exit.status(), "status of {script:?}");
        assert_eq!(reply.flooded, None);
        a.close();
    }
}

fn python_scripts_read_as_a_run_wrappers(mode: Mode) {
    compare(
        mode,
        Lang::Python,
        &[
            "print(1)\n1 + 1\n",
            "import sys\nprint(sys.argv, __name__, __file__)\n",
            "def f():\n    raise ValueError('no')\nf()\n",
            "print('x'\n",
            "import sys\nsys.exit(3)\n",
            "raise SystemExit('bye')\n",
            "import atexit\natexit.register(print, 'at exit')\nprint('body')\n",
            "import sys\nprint(repr(sys.stdin.read()))\n",
            "import threading, time\nthreading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()\nprint('main')\n",
            "raise SystemExit(None)\n",
            "import sys\nsys.stderr.write('partial')\nsys.exit(True)\n",
        ],
    );
}

fn bash_scripts_read_as_a_run_wrappers(mode: Mode) {
    compare(
        mode,
        Lang::Bash,
        &[
            "echo one\nfalse\n",
            "echo out; echo err >&2; exit 4\n",
            "set -e\nfalse\necho never\n",
            "read -r line; echo \"read: $? ${line-}\"\n",
            "f() { return 7; }\nf\n",
        ],
    );
}

fn node_scripts_read_as_a_run_wrappers(mode: Mode) {
    compare(
        mode,
        Lang::Node,
        &[
            "console.log(1)\n1 + 1\n",
            "console.log(process.argv.slice(1), require.main, __filename, __dirname, module.id, typeof exports, typeof fs, typeof _)\n",
            "function f() { throw new Error('no') }\nf()\n",
            "let a = ;\n",
            "process.exitCode = 4\nconsole.error('err')\n",
            "process.exit(3)\n",
            "setTimeout(() => console.log('later'), 200)\nconsole.log('now')\n",
            "Promise.reject(new Error('rejected'))\n",
            "process.on('exit', (code) => console.log('exit', code))\n",
            "let input = ''\nprocess.stdin.on('data', (d) => (input += d)).on('end', () => console.log(JSON.stringify(input)))\n",
            "import('node:path').then((p) => console.log(p.basename('/a/b')))\nprocess.emitWarning('mine')\n",
            "const p = require('path')\nconsole.log(require.resolve.paths('y')[0] === p.join(process.cwd(), 'node_modules'), module.filename === p.join(process.cwd(), '[stdin]'))\n",
        ],
    );
}

fn program_sources_read_as_a_run_wrappers(mode: Mode) {
    compare(
        mode,
        Lang::Program,
        &[
            "echo built and run\n",
            "echo out; echo err >&2; exit 4\n",
            "read -r line; echo \"read: $? ${line-}\"\n",
            "no_such_command\n",
            // Past the grace the agent gives a driver that closed its
            // channel: the runner took the driver's place.
            "sleep 1; echo slept\n",
            "echo before; kill -ABRT $$\n",
        ],
    );
}

fn a_once_call_is_killed_not_interrupted(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    let id = a.send_exec_once(
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('begun', flush=True)\ntime.sleep(60)\n",
        1 << 16,
    );
    let started = Instant::now();
    // The script ignores SIGINT: only a kill ends it.
    while !a.ping() {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(a.interrupt());
    let reply = a.exec_reply(id);
    assert_eq!(reply.exit, Some(Exit::Signal(9)), "{reply:?}");
    assert_eq!(reply.stdout, "begun\n");
    assert!(started.elapsed() < Duration::from_secs(30));
    a.close();
}

fn a_once_call_that_floods_is_stopped(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Bash);
    let started = Instant::now();
    let id = a.send_exec_once("echo first; yes", 1024);
    let reply = a.exec_reply(id);
    assert_eq!(reply.flooded, Some(Stream::Stdout), "{reply:?}");
    assert_eq!(reply.exit, Some(Exit::Signal(9)));
    assert!(reply.stdout.starts_with("first\n"), "{}", reply.stdout);
    // Stopped past 1024 times the cap of 1024 bytes, of which 1024 are kept.
    assert!(
        reply.stdout_dropped >= 1024 * 1024 - 1024,
        "{}",
        reply.stdout_dropped
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    a.close();
}
