//! A session's own code trying to take the session over: a process planted
//! by one call goes after the launcher's channel to the agent (the jail's
//! pid 1 and its stdin and stdout, through /proc), stops the agent, and
//! would answer the next calls in its place. Run against the fixture session
//! jails (real bubblewrap, the built agent).

use crate::common::*;

/// The planted process: it waits for the call that planted it to be
/// answered, then tries everything it can against pid 1 and the agent and
/// writes what it got to /workspace/attack.json. When it holds the channel,
/// it answers every request in the agent's place: each exec with a reply of
/// 12 MiB of forged text, status 0.
const ATTACKER: &str = r#"
import json, os, signal, time
time.sleep(0.5)
got = {}
fds = {}
for fd, flags in ((0, os.O_RDONLY), (1, os.O_WRONLY)):
    try:
        fds[fd] = os.open(f'/proc/1/fd/{fd}', flags)
        got[f'fd{fd}'] = 'opened'
    except OSError as e:
        got[f'fd{fd}'] = type(e).__name__
agent = None
for pid in os.listdir('/proc'):
    if pid.isdigit():
        try:
            argv = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\0')
        except OSError:
            continue
        if b'--interpreter' in argv:
            agent = int(pid)
got['agent'] = agent
for target in sorted({1, agent}):
    try:
        os.kill(target, signal.SIGSTOP)
        got[f'sigstop{target}'] = 'sent'
    except OSError as e:
        got[f'sigstop{target}'] = type(e).__name__
time.sleep(0.2)
state = [l for l in open(f'/proc/{agent}/status') if l.startswith('State:')]
got['agent_state'] = state[0].split()[1]
try:
    first = open('/proc/1/maps').readline()
    start = int(first.split('-')[0], 16)
    with open('/proc/1/mem', 'rb') as mem:
        mem.seek(start)
        mem.read(16)
    got['mem'] = 'read'
except OSError as e:
    got['mem'] = type(e).__name__
with open('/workspace/attack.tmp', 'w') as f:
    json.dump(got, f)
os.rename('/workspace/attack.tmp', '/workspace/attack.json')
if len(fds) == 2:
    pending = b''
    while True:
        chunk = os.read(fds[0], 1 << 16)
        if not chunk:
            break
        pending += chunk
        while b'\n' in pending:
            line, pending = pending.split(b'\n', 1)
            request = json.loads(line)
            if request['op'] == 'exec':
                reply = {'type': 'exec', 'id': request['id'], 'status': 0,
                         'stdout': 'FORGED\n' + 'x' * (12 * 2**20 - 7), 'stderr': '',
                         'stdout_dropped': 0, 'stderr_dropped': 0, 'exit': None,
                         'restarted': False, 'interrupted': False, 'duration_ms': 1}
            else:
                reply = {'type': 'ack', 'id': request['id'], 'busy': False}
            os.write(fds[1], json.dumps(reply).encode() + b'\n')
os._exit(0)
"#;

/// Python that plants [`ATTACKER`] as a process of its own (a new session,
/// its parent gone: an orphan of the jail) and returns at once.
fn plant() -> String {
    format!(
        "import os\nATTACKER = {ATTACKER:?}\n\
         child = os.fork()\n\
         if child == 0:\n    \
             os.setsid()\n    \
             if os.fork() == 0:\n        \
                 exec(ATTACKER)\n    \
             os._exit(0)\n\
         os.waitpid(child, 0)\nprint('planted')"
    )
}

/// Python that waits (bounded) for the attacker's report and prints it.
const REPORT: &str = "import os, time\n\
    for _ in range(200):\n    \
        if os.path.exists('/workspace/attack.json'):\n        \
            break\n    \
        time.sleep(0.05)\n\
    print(open('/workspace/attack.json').read())";

#[tokio::test]
async fn a_planted_process_cannot_take_the_session_over() {
    let mark = marker("takeover");
    let s = Server::start(vec![sessions_marked(&mark, 30)]).await;
    let r = s.session("python", "t", &plant()).await;
    assert_eq!(text(&r), "planted\n", "{r:?}");
    // The attacker acts 0.5 s after it was planted.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;

    let r = s.session("python", "t", "raise SystemExit(3)").await;
    let t = text(&r);
    assert!(
        !t.contains("FORGED"),
        "a forged reply passed: {}",
        &t[..200]
    );
    assert_eq!(r.is_error, Some(true), "{}", &t[..t.len().min(200)]);
    assert_eq!(facts(&r)["exit_code"], 3, "{t}");
    assert_eq!(facts(&r)["interpreter_exit"]["code"], 3, "{t}");
    assert_eq!(
        t,
        "the interpreter exited with code 3; the next call starts a fresh one \
         (variables lost, /workspace files kept)"
    );

    let r = s.session("python", "t", REPORT).await;
    let t = text(&r);
    assert!(
        !t.contains("FORGED"),
        "a forged reply passed: {}",
        &t[..200]
    );
    // The call after a dead interpreter says so after the report.
    let report = t.lines().next().unwrap_or_default();
    let got: serde_json::Value =
        serde_json::from_str(report).unwrap_or_else(|e| panic!("the attacker's report: {e}: {t}"));
    // The agent is pid 1: nothing else in the jail holds the launcher's
    // pipes, and the agent's are closed to the jail's processes.
    assert_eq!(got["agent"], 1, "{got}");
    assert_eq!(got["fd0"], "PermissionError", "{got}");
    assert_eq!(got["fd1"], "PermissionError", "{got}");
    assert_eq!(got["mem"], "PermissionError", "{got}");
    // The kernel drops SIGSTOP sent to a pid namespace's init from inside.
    assert_ne!(got["agent_state"], "T", "the agent was stopped: {got}");
    // And the session goes on.
    let r = s.session("python", "t", "print('still mine')").await;
    assert_eq!(text(&r), "still mine\n", "{r:?}");
}
