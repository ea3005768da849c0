//! The agent as the jail's pid 1 (a child subreaper outside a jail): the
//! orphans of user code come to it and are collected when they exit, never
//! left as zombies, while the interpreter's own exit status still reaches
//! the reply; and in a jail, user code's signals do not reach it.

use proto::frame::Exit;

use crate::both_modes;
use crate::harness::{Agent, Lang, Mode, assert_ok, assert_prints};

both_modes!(
    orphans_come_to_the_agent_and_are_collected,
    the_interpreters_exit_status_survives_orphans_dying_around_it,
);

/// Python: `n` orphans (double fork, new session) that each run
/// `sleep TOKEN`-like for `secs` seconds and exit; prints nothing.
fn orphans(n: u32, secs: f64) -> String {
    format!(
        "import os, time\n\
         for _ in range({n}):\n    \
             child = os.fork()\n    \
             if child == 0:\n        \
                 os.setsid()\n        \
                 if os.fork() == 0:\n            \
                     time.sleep({secs})\n            \
                     os._exit(0)\n        \
                 os._exit(0)\n    \
             os.waitpid(child, 0)\n"
    )
}

/// Python defining `find(needle)`: the pids whose command line holds
/// `needle` (processes that end while it looks are skipped).
const FIND: &str = "import os\n\
    def find(needle):\n    \
        found = []\n    \
        for pid in os.listdir('/proc'):\n        \
            try:\n            \
                if pid.isdigit() and needle in open(f'/proc/{pid}/cmdline', 'rb').read():\n                \
                    found.append(int(pid))\n        \
            except OSError:\n            \
                pass\n    \
        return found\n";

/// Python that prints the zombies whose parent is the interpreter's parent
/// (the agent), after waiting up to 10 s for the agent's children to be only
/// the interpreter and `sleep` processes. Waiting for the zombies alone to
/// be gone would race an orphan that has not yet exited: none found, then
/// one printed. A zombie the agent fails to collect keeps the wait going and
/// is printed at the end.
const ZOMBIES_OF_THE_AGENT: &str = "import os, time\n\
    def children():\n    \
        found = {}\n    \
        for pid in filter(str.isdigit, os.listdir('/proc')):\n        \
            try:\n            \
                status = dict(l.split(':\\t', 1) for l in open(f'/proc/{pid}/status').read().splitlines() if ':\\t' in l)\n        \
            except (OSError, ValueError):\n            \
                continue\n        \
            if int(status['PPid']) == os.getppid() and int(pid) != os.getpid():\n            \
                found[int(pid)] = status\n    \
        return found\n\
    for _ in range(200):\n    \
        if all(s['Name'].strip() == 'sleep' for s in children().values()):\n        \
            break\n    \
        time.sleep(0.05)\n\
    print(sorted(p for p, s in children().items() if s['State'].startswith('Z')))";

fn orphans_come_to_the_agent_and_are_collected(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    let token = a.token.clone();
    // A long-lived orphan: its parent is the agent now.
    let reply = a.exec(&format!(
        "import os, subprocess\n\
         child = os.fork()\n\
         if child == 0:\n    \
             os.setsid()\n    \
             subprocess.Popen(['sleep', '{token}'])\n    \
             os._exit(0)\n\
         os.waitpid(child, 0)\n"
    ));
    assert_ok(&reply);
    a.wait_for_process(&token);
    assert_prints(
        &mut a,
        &format!(
            "{FIND}import os\n\
             orphan = find(b'{token}')\n\
             ppid = [l for l in open(f'/proc/{{orphan[0]}}/status') if l.startswith('PPid:')]\n\
             print(len(orphan), int(ppid[0].split()[1]) == os.getppid())"
        ),
        "1 True\n",
    );
    // Orphans that exit at once, during the call.
    assert_ok(&a.exec(&orphans(20, 0.0)));
    assert_prints(&mut a, ZOMBIES_OF_THE_AGENT, "[]\n");
    // Orphans that exit between calls, while the agent waits for a request:
    // collected then (SIGCHLD wakes it), not at the next call.
    assert_ok(&a.exec(&orphans(10, 0.2)));
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_prints(&mut a, ZOMBIES_OF_THE_AGENT, "[]\n");
    // The long-lived one, killed: collected too, gone from /proc.
    assert_prints(
        &mut a,
        &format!(
            "{FIND}import os, signal, time\n\
             orphan = find(b'{token}')[0]\n\
             os.kill(orphan, signal.SIGKILL)\n\
             for _ in range(200):\n    \
                 if not os.path.exists(f'/proc/{{orphan}}'):\n        \
                     break\n    \
                 time.sleep(0.05)\n\
             print(os.path.exists(f'/proc/{{orphan}}'))"
        ),
        "False\n",
    );
    a.close();
}

fn the_interpreters_exit_status_survives_orphans_dying_around_it(mode: Mode) {
    let mut a = Agent::start(mode, Lang::Python);
    for round in 0..5 {
        // Orphans dying while the interpreter dies: the reaper must leave
        // the interpreter to the session, which reports its exit.
        let reply = a.exec(&format!("{}os._exit(7)", orphans(30, 0.0)));
        assert_eq!(reply.exit, Some(Exit::Code(7)), "round {round}: {reply:#?}");
        assert_eq!(reply.status, 7, "round {round}: {reply:#?}");
        let reply = a.exec(&format!(
            "{}import time\ntime.sleep(0.05)\nraise SystemExit(3)",
            orphans(10, 0.05)
        ));
        assert_eq!(reply.exit, Some(Exit::Code(3)), "round {round}: {reply:#?}");
        // The next call runs in a fresh interpreter, told so.
        let reply = a.exec("print('fresh')");
        assert!(reply.restarted, "round {round}: {reply:#?}");
        assert_eq!(reply.stdout, "fresh\n", "round {round}: {reply:#?}");
        // An exception is not a death: status 1, same interpreter.
        let reply = a.exec("y = 1\nraise ValueError('no')");
        assert_eq!((reply.status, reply.exit), (1, None), "{reply:#?}");
        assert_prints(&mut a, "print(y)", "1\n");
    }
    assert_prints(&mut a, ZOMBIES_OF_THE_AGENT, "[]\n");
    a.close();
}

/// In a jail the agent is pid 1 and handles no signal, so the kernel drops
/// every signal user code sends it: SIGSTOP, SIGKILL, SIGTERM, SIGSEGV...
#[test]
fn in_a_jail_user_code_cannot_signal_the_agent() {
    let mut a = Agent::start(Mode::Jail, Lang::Python);
    assert_prints(
        &mut a,
        "import os, signal, time\n\
         def status():\n    \
             return dict(l.split(':\\t', 1) for l in open('/proc/1/status').read().splitlines() if ':\\t' in l)\n\
         print(os.getppid(), status()['Name'].strip(), int(status()['SigCgt'], 16))\n\
         for s in (signal.SIGSTOP, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGSEGV, \
                   signal.SIGBUS, signal.SIGKILL):\n    \
             os.kill(1, s)\n\
         time.sleep(0.2)\n\
         print(status()['State'].split()[0])",
        "1 agent 0\nS\n",
    );
    assert_prints(&mut a, "print('alive')", "alive\n");
    a.close();
}
