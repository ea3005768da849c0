#!/usr/bin/env python3
"""Sessions end to end: the Nix-built server and session wrappers over MCP.

Run by checks/run (as root, then as an unprivileged user) next to e2e.py,
whose minimal MCP client and test runner it uses. Prints one line per test,
`ok - LABEL: sessions: name`, `FAIL - ...: reason` or `skip - ...`, and
exits 1 when a test failed.

  sessions.py --label root --server OUT --sandbox python=OUT --sandbox shell=OUT \
              --sandbox node=OUT --custom OUT --science OUT

--custom is a Python-with-jq environment made by lib.mkSandbox, --science a
Python with numpy (python3.withPackages). Each server gets a directory of
its own as HOME, TMPDIR and PROJECT_DIR: the wrapper binds the project
into the jail, so that directory is in bubblewrap's arguments, and the
processes of the server's jails are found by it in /proc (and when
bubblewrap is gone, so is the jail's pid 1, and with it everything in its
pid namespace).
"""

import argparse
import json
import os
import pty
import queue
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from e2e import DEADLINE, Failed, McpClient, Suite, check, facts, manifest_of, only_env, pids, waiting

SHORT_TIMEOUT = 3  # seconds: the deadline of the servers that test interrupts
KEPT = "(variables lost, /workspace files kept)"
RESET = "session reset: interpreter state and /workspace files lost"


def pids_with(needle):
    """The processes whose command line holds `needle`."""
    found = []
    for pid in pids():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if needle.encode() in cmdline:
            found.append(pid)
    return found


def eventually(predicate, limit=DEADLINE):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def assert_gone(needle, what):
    check(eventually(lambda: not pids_with(needle)), f"{what} left processes: {pids_with(needle)}")


class Server:
    """The Nix-built server over MCP stdio, with a HOME and TMPDIR of its own."""

    def __init__(self, args, scratch, env=None, manifests=()):
        self.home = tempfile.mkdtemp(dir=scratch, prefix="home-")
        # The project every jail binds: a root server's jails read it as
        # others.
        os.chmod(self.home, 0o755)
        # Warm jails off: these tests count the agents and jails their
        # sessions start (artifacts.py tests the pool, on by default).
        base = {"HOME": self.home, "TMPDIR": self.home, "PROJECT_DIR": self.home, "PATH": "/usr/bin:/bin",
                "RUST_LOG": "info", "NIX_SANDBOX_WARM_JAILS": "0"}
        argv = [args.server + "/bin/nix-sandbox-mcp", "--stdio"]
        for manifest in manifests:
            argv += ["--manifest", str(manifest)]
        self.client = McpClient(argv, {**base, **(env or {})})
        self.next_id = 1000
        init = self.client.initialize("nix-sandbox-mcp-sessions")
        check("tools" in init.get("capabilities", {}), f"initialize: {init}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.client.close()

    def call(self, env, session, code, **more):
        """Runs code in a session (`more`: from, end); (result, text, structured)."""
        result = self.client.request("tools/call", {
            "name": "run",
            "arguments": {"env": env, "session": session, "code": code, **more},
        })
        return unpack(result)

    def calls_at_once(self, calls):
        """Sends every (env, session, code) before reading any answer."""
        return self.answers(self.send_calls(calls))

    def send_calls(self, calls):
        """Sends every (env, session, code); their request ids."""
        ids = []
        for env, session, code in calls:
            self.next_id += 1
            ids.append(self.next_id)
            self.client.send({
                "jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                "params": {"name": "run", "arguments": {"env": env, "session": session, "code": code}},
            })
        return ids

    def answers(self, ids):
        """The answers to the calls sent as `ids`, in that order."""
        answers = {}
        end = time.monotonic() + DEADLINE
        while len(answers) < len(ids):
            try:
                line = self.client.lines.get(timeout=max(0.1, end - time.monotonic()))
            except queue.Empty:
                raise Failed(f"{len(ids) - len(answers)} calls unanswered within {DEADLINE} s; the server's "
                             f"stderr ends: {self.log()[-800:]}; where it waits: "
                             f"{waiting(self.client.proc.pid)}") from None
            check(line is not None, f"the server closed stdout: {self.log()[-800:]}")
            message = json.loads(line)
            if message.get("id") in ids:
                check("result" in message, f"{message}")
                answers[message["id"]] = unpack(message["result"])
        return [answers[i] for i in ids]

    def log(self):
        return "".join(self.client.stderr)


def unpack(result):
    text = "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")
    return result, text, facts(result)


def prints(server, env, session, code, want):
    result, text, _ = server.call(env, session, code)
    check(not result.get("isError") and text == want, f"{code!r}: wanted {want!r}, got {result}")


def refused(server, env, session, code, error):
    result, text, structured = server.call(env, session, code)
    check(result.get("isError") and structured.get("error", {}).get("code") == error,
          f"wanted {error}, got {result}")
    return text


def short_manifest(args, scratch):
    """The server's environments with a short deadline (and the science one)."""
    manifest = manifest_of(args.server)
    for entry in manifest["environments"].values():
        entry["limits"]["timeout_s"] = SHORT_TIMEOUT
    path = Path(scratch) / "short.json"
    path.write_text(json.dumps(manifest))
    return path


# --- the tests ---------------------------------------------------------------


def t_wrapper_frames(args):
    """The session wrapper alone: the agent answers an exec frame from the jail."""
    for preset, code, want in [
        ("python", "import os\nprint(os.getcwd())", "/workspace\n"),
        ("shell", "pwd", "/workspace\n"),
        ("node", "console.log(process.cwd())", "/workspace\n"),
    ]:
        out = args.sandboxes[preset]
        _, entry = only_env(out)
        check(entry["session"] == [f"{out}/bin/sandbox-{preset}-session"], f"session {entry['session']}")
        request = {"op": "exec", "id": 7, "code": code, "output_bytes": 4096}
        proc = subprocess.Popen(
            entry["session"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={"HOME": os.environ["HOME"], "PATH": "/usr/bin:/bin"},
        )
        try:
            # stdin stays open until the reply came: closing it ends the agent.
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            proc.stdin.close()
            status = proc.wait(timeout=DEADLINE)
        finally:
            proc.kill()
        stderr = proc.stderr.read()[-600:]
        check(status == 0 and line, f"{preset}: exit {status}, reply {line!r}, stderr {stderr!r}")
        reply = json.loads(line)
        check(reply.get("id") == 7 and reply.get("stdout") == want and reply.get("status") == 0,
              f"{preset}: reply {reply}")


def t_state(args, scratch):
    with Server(args, scratch) as s:
        prints(s, "python", "p", "import json, os\nx = 41\ndef f(v):\n    return v + 1\n"
               "os.chdir('/tmp')\n_ = open('/workspace/kept', 'w').write('file')", "(no output)")
        prints(s, "python", "p", "print(f(x), json.dumps([1]), os.getcwd(), open('/workspace/kept').read())",
               "42 [1] /tmp file\n")
        prints(s, "shell", "s", "x=41; f() { echo $(( $1 + 1 )); }; cd /tmp; export Y=exported; "
               "set -o pipefail; echo data > /workspace/kept", "(no output)")
        prints(s, "shell", "s", "f $x; pwd; bash -c 'echo $Y'; [[ -o pipefail ]] && echo pipefail; "
               "cat /workspace/kept", "42\n/tmp\nexported\npipefail\ndata\n")
        prints(s, "node", "n", "const fs = require('fs');\nlet x = 41;\nfunction f(v) { return v + 1; }\n"
               "process.chdir('/tmp');\nfs.writeFileSync('/workspace/kept', 'node');\nundefined", "(no output)")
        prints(s, "node", "n", "const v = await new Promise((ok) => setTimeout(() => ok(f(x)), 10));\n"
               "console.log(v, process.cwd(), fs.readFileSync('/workspace/kept', 'utf8'));", "42 /tmp node\n")
        prints(s, "python", "other", "print('x' in dir())", "False\n")


def t_own_interpreter(args, scratch):
    """A session runs the environment's own Python with its packages."""
    manifests = [Path(args.custom) / "share/nix-sandbox-mcp/manifest.json",
                 Path(args.science) / "share/nix-sandbox-mcp/manifest.json"]
    with Server(args, scratch, manifests=manifests) as s:
        code = "import subprocess, sys\nprint(subprocess.run(['jq', '-n', '6*7'], capture_output=True, " \
               "text=True).stdout.strip())\nprint(sys.executable)"
        result, text, _ = s.call("custom", "c", code)
        check(not result.get("isError") and text.startswith("42\n/nix/store/"), f"custom: {result}")
        numpy = "import numpy, sys\nprint(int(numpy.arange(7).sum() * 2))\nprint(sys.executable)"
        result, text, _ = s.call("science", "n", numpy)
        check(not result.get("isError") and text.startswith("42\n"), f"science: {result}")
        ephemeral = s.client.request("tools/call", {"name": "run", "arguments": {"env": "science", "code": numpy}})
        _, run_text, _ = unpack(ephemeral)
        check(run_text == text, f"the session's python differs from the run's: {text!r} vs {run_text!r}")


# Which files the interpreter mapped after numpy used LAPACK: the module's
# own and every native library it loaded (BLAS, LAPACK, the C library).
NUMPY_FILES = """import json, sys, numpy
numpy.linalg.inv(numpy.eye(3))
mapped = set()
for line in open('/proc/self/maps'):
    fields = line.split(maxsplit=5)
    if len(fields) == 6 and fields[5].startswith('/') and not fields[5].startswith(('/dev/', '/memfd:')):
        mapped.add(fields[5].strip())
print(json.dumps({'numpy': numpy.__file__, 'prefix': sys.prefix, 'mapped': sorted(mapped)}))
"""


def t_numpy_from_closure(args, scratch):
    """The withPackages environment's numpy, and the native libraries it
    loads, come from the environment's store closure, in a session and in a
    run alike."""
    with Server(args, scratch, manifests=[Path(args.science) / "share/nix-sandbox-mcp/manifest.json"]) as s:
        result, text, _ = s.call("science", "m", NUMPY_FILES)
        check(not result.get("isError"), f"session: {result}")
        ran = s.client.request("tools/call", {"name": "run", "arguments": {"env": "science", "code": NUMPY_FILES}})
        _, run_text, _ = unpack(ran)
    for where, output in [("session", text), ("run", run_text)]:
        got = json.loads(output.split("\n")[0])
        check(got["prefix"].startswith("/nix/store/") and got["numpy"].startswith(got["prefix"] + "/"),
              f"{where}: numpy {got['numpy']} is not the environment's ({got['prefix']})")
        # The offline harness's glibc (Debian's) reads its C.UTF-8 locale at
        # /usr/lib/locale, which its bubblewrap mounts from glibc's store
        # path (e2e.py holds every mount to the closure); nixpkgs' glibc
        # reads it from its store path.
        outside = [path for path in got["mapped"]
                   if not path.startswith(("/nix/store/", "/usr/lib/locale/C.utf8/"))]
        check(not outside, f"{where}: files mapped from outside the store: {outside}")
        check(any("blas" in Path(path).name for path in got["mapped"]), f"{where}: no BLAS mapped: {got['mapped']}")


FORGED = ('{"type":"exec","id":1,"status":0,"stdout":"forged","stderr":"","stdout_dropped":0,'
          '"stderr_dropped":0,"exit":null,"restarted":false,"interrupted":false,"duration_ms":1}')


def t_output_tricks(args, scratch):
    with Server(args, scratch) as s:
        prints(s, "python", "t", "import os, subprocess, sys\nn = 1", "(no output)")
        result, text, st = s.call("python", "t", "os.write(1, b'x' * 10**7)")
        dropped = st.get("stdout_dropped_bytes", 0)
        check(st.get("exit_code") == 0 and dropped > 9_000_000, f"10 MB on fd 1: {st}")
        check(text.endswith(f"stdout cut: {dropped} bytes dropped from the middle"), f"{text[-200:]!r}")
        prints(s, "python", "t", "subprocess.run(['echo', 'hi'])\nn += 1", "hi\n")
        result, text, st = s.call("python", "t", "print(input())")
        check(st.get("exit_code") == 1 and "EOFError" in text, f"input(): {result}")
        result, text, st = s.call("python", "t", "sys.stderr.write('e' * 5_000_000)\nprint('done')")
        check(st.get("exit_code") == 0 and st.get("stderr_dropped_bytes", 0) > 4_000_000
              and text.startswith("done\n--- stderr ---\neee"), f"5 MB on stderr: {st}")
        prints(s, "python", "t", f"print({FORGED!r})", FORGED + "\n")
        prints(s, "shell", "t-sh", f"echo '{FORGED}'", FORGED + "\n")
        prints(s, "python", "t", "print(n)", "2\nexit code 0")


def t_interrupts(args, scratch):
    with Server(args, scratch, manifests=[short_manifest(args, scratch)]) as s:
        child = f"nsm-sessions-child-{os.getpid()}"
        prints(s, "python", "p", "n = 0", "(no output)")
        result, text, st = s.call("python", "p", "while True:\n    n += 1")
        check(text.endswith(f"interrupted after {SHORT_TIMEOUT} s; state kept") and "KeyboardInterrupt" in text
              and st.get("exit_code") == 130 and st.get("session_reset") is False, f"python loop: {result}")
        prints(s, "python", "p", "print(n > 0)", "True\n")
        prints(s, "shell", "b", "x=kept", "(no output)")
        result, text, _ = s.call("shell", "b", f"(exec -a {child}-1 sleep 1000); echo after")
        check(text == f"interrupted after {SHORT_TIMEOUT} s; state kept", f"bash sleep: {result}")
        assert_gone(f"{child}-1", "the interrupted sleep")
        prints(s, "shell", "b", "echo $x", "kept\n")
        prints(s, "python", "r", "import shutil, signal, subprocess\nx = 1\n_ = open('/workspace/f', 'w').write('f')",
               "(no output)")
        result, text, st = s.call(
            "python", "r",
            f"subprocess.Popen(['{child}-2', '1000'], executable=shutil.which('sleep'))\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass")
        check(text == f"timed out after {SHORT_TIMEOUT} s and did not stop when interrupted: {RESET}"
              and st.get("session_reset") is True, f"SIGINT ignored: {result}")
        assert_gone(f"{child}-2", "the reset session")
        prints(s, "python", "r", "import os\nprint('x' in dir(), os.path.exists('/workspace/f'))", "False False\n")


def t_exits(args, scratch):
    with Server(args, scratch) as s:
        prints(s, "python", "e", "_ = open('/workspace/f', 'w').write('kept')", "(no output)")
        for env, session, code, status, note, after, want in [
            ("python", "e", "x = 1\nexit()", 0, "exited with code 0", "print('x' in dir(), open('/workspace/f').read())", "False kept"),
            ("python", "e", "x = 1\nimport sys\nsys.exit(3)", 3, "exited with code 3", "print('x' in dir())", "False"),
            ("python", "e", "x = 1\nimport ctypes\nctypes.string_at(0)", 139, "was killed by signal 11", "print('x' in dir())", "False"),
            ("shell", "b", "x=1; exit 7", 7, "exited with code 7", "echo ${x:-unset}", "unset"),
            ("shell", "b", "x=1; set -e; false; echo no", 1, "exited with code 1", "echo ${x:-unset}", "unset"),
            ("node", "n", "globalThis.x = 1; process.exit(2)", 2, "exited with code 2",
             "console.log(typeof x)", "undefined"),
        ]:
            result, text, st = s.call(env, session, code)
            check(st.get("exit_code") == status and
                  text.endswith(f"the interpreter {note}; the next call starts a fresh one {KEPT}"),
                  f"{code!r}: {result}")
            result, text, st = s.call(env, session, after)
            check(text == f"{want}\nthe interpreter had exited; this call ran in a fresh one {KEPT}"
                  and st.get("fresh_interpreter") is True, f"after {code!r}: {result}")


def t_refusals(args, scratch):
    with Server(args, scratch, env={"NIX_SANDBOX_MAX_SESSIONS": "2", "SESSION_IDLE_TIMEOUT": "77"}) as s:
        for bad in ["", "a b", "x" * 65]:
            refused(s, "python", bad, "1", "bad_session_name")
        prints(s, "python", "a", "print(1)", "1\nexit code 0")
        text = refused(s, "node", "a", "1", "session_env_mismatch")
        check("belongs to environment `python`" in text, text)
        prints(s, "shell", "b", "echo 2", "2\nexit code 0")
        text = refused(s, "shell", "c", "echo 3", "too_many_sessions")
        check("(a, b)" in text and "77 s" in text, text)


def t_fork_without_layers(args, scratch):
    """Where the server can make no layers directory (no /var/tmp, as in Nix's
    build sandbox), `from` is refused in one line saying why."""
    with Server(args, scratch, env={"NIX_SANDBOX_MAX_CHECKPOINTS": "4"}) as s:
        s.call("python", "a", "open('f', 'w').write('one')")
        result, text, structured = s.call("python", "b", "1", **{"from": "a"})
        check(result.get("isError") and structured.get("error", {}).get("code") == "unknown_checkpoint"
              and "no layers directory in /var/tmp" in text, text)


def t_fork(args, scratch):
    """Forks diverge; a rollback restores that call's tree exactly; the jail sees no checkpoint."""
    with Server(args, scratch, env={"NIX_SANDBOX_MAX_CHECKPOINTS": "4"}) as s:
        _, text, _ = s.call("python", "a", "import os\nos.makedirs('d', exist_ok=True)\n"
                            "open('d/f', 'w').write('one')\nopen('k', 'w').write('keep')\nx = 1")
        check("checkpoint: a@1" in text, text)
        _, text, _ = s.call("python", "a", "open('d/f', 'w').write('two')\nos.remove('k')\n"
                            "open('n', 'w').write('new')")
        check("checkpoint: a@2" in text, text)
        _, text, _ = s.call("python", "b", "import os\nopen('only-b', 'w').write('b')\n"
                            "print(open('d/f').read(), 'x' in dir())", **{"from": "a"})
        check(text.startswith("two False\n") and "started from a:" in text
              and "fresh interpreter" in text, text)
        _, text, _ = s.call("python", "c", "import os\nprint(sorted(os.listdir('.')))", **{"from": "a"})
        check("only-b" not in text, text)
        _, text, _ = s.call("python", "r", "import os\nprint(open('d/f').read(), open('k').read(), "
                            "os.path.exists('n'), os.path.exists('only-b'))", **{"from": "a@1"})
        check(text.startswith("one keep False False\n"), text)
        _, text, _ = s.call("shell", "h", "find / -xdev -name ckpt 2>/dev/null | wc -l")
        check(text.startswith("0\n"), text)
        result, text, structured = s.call("python", "z", "1", **{"from": "a@99"})
        check(result.get("isError") and structured.get("error", {}).get("code") == "unknown_checkpoint", text)
        # A fork of a fork, which outlives both its sources; hostile writes
        # over the files it was started from stay its own.
        _, text, _ = s.call("shell", "s", "echo base > f; echo kept > keep; mkdir d; echo x > d/x")
        check("checkpoint: s@1" in text, text)
        _, text, _ = s.call("shell", "t", "echo t > f; rm -r d; : > keep; echo n > n", **{"from": "s@1"})
        check("started from s@1" in text, text)
        _, text, _ = s.call("shell", "u", "cat f n; wc -c < keep; ls -A", **{"from": "t"})
        check(text.startswith("t\nn\n0\nf\nkeep\nn\n"), text)
        for gone in ("s", "t"):
            _, text, _ = s.call("shell", gone, "true", end=True)
            check(f"session `{gone}` ended, as asked" in text, text)
        _, text, _ = s.call("shell", "v", "cat f keep; ls d", **{"from": "s@1"})
        check("error[unknown_session]" in text, text)
        _, text, _ = s.call("shell", "u", "cat f n; echo more >> n")
        check(text.startswith("t\nn\n"), text)
        _, text, _ = s.call("python", "b", "1", end=True)
        check("session `b` ended, as asked" in text, text)


def t_busy(args, scratch):
    with Server(args, scratch) as s:
        prints(s, "python", "b", "import time\nn = 0", "(no output)")
        code = "time.sleep(2)\nn += 1\nprint('slept')"
        answers = s.calls_at_once([("python", "b", code), ("python", "b", code)])
        busy = [a for a in answers if a[2].get("error", {}).get("code") == "session_busy"]
        ran = [a for a in answers if a[1] == "slept\n"]
        check(len(busy) == 1 and len(ran) == 1, f"answers: {answers}")
        prints(s, "python", "b", "print(n)", "1\nexit code 0")


def t_thirty_two(args, scratch):
    """One client's 32 sessions at once, under the default maximum."""
    with Server(args, scratch) as s:
        answers = s.calls_at_once([("python", f"s{i}", f"x = {i}") for i in range(32)])
        check(all(not a[0].get("isError") for a in answers), f"{[a[1] for a in answers]}")
        answers = s.calls_at_once([("python", f"s{i}", "x += 100\nprint(x)") for i in range(32)])
        got = [a[1] for a in answers]
        check(got == [f"{i + 100}\nexit code 0" for i in range(32)], f"{got}")
    assert_gone(s.home, "32 sessions after the server exited")


def t_expiry(args, scratch):
    child = f"nsm-sessions-idle-{os.getpid()}"
    with Server(args, scratch, env={"SESSION_IDLE_TIMEOUT": "2"}) as s:
        prints(s, "shell", "i", f"x=1; (exec -a {child} sleep 1000) & echo started", "started\n")
        check(eventually(lambda: pids_with(child) and pids_with(s.home)), "the session's processes are not there")
        assert_gone(s.home, "an idle session")
        assert_gone(child, "an idle session's child")
        prints(s, "shell", "i", "echo ${x:-unset}",
               "unset\nnew session `i`: the earlier one ended (it was idle for 2 s); its state and "
               "/workspace files are gone")
    with Server(args, scratch, env={"SESSION_MAX_LIFETIME": "3"}) as s:
        prints(s, "python", "m", "y = 2", "(no output)")
        check(pids_with(s.home), "the session's processes are not there")
        assert_gone(s.home, "a session at its maximum lifetime")
        prints(s, "python", "m", "print('y' in dir())",
               "False\nnew session `m`: the earlier one ended (it reached the maximum lifetime of 3 s); "
               "its state and /workspace files are gone")


WEB_SERVER = """import subprocess, socket, time
open('/workspace/hello-from-the-jail.txt', 'w').write('hi')
web = subprocess.Popen(['python3', '-m', 'http.server', '8000', '--bind', '127.0.0.1',
    '--directory', '/workspace'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(200):
    try:
        socket.create_connection(('127.0.0.1', 8000)).close()
        break
    except OSError:
        time.sleep(0.05)
print('listening')
"""


def published(result, text, port):
    """The loopback address and Unix socket a result's
    `published: PORT -> http://ADDR (private: unix:PATH)` line names."""
    prefix = f"published: {port} -> http://"
    lines = [line.strip()[len(prefix):] for line in text.splitlines() if line.strip().startswith(prefix)]
    check(not result.get("isError") and len(lines) == 1 and lines[0].startswith("127.0.0.1:")
          and " (private: unix:" in lines[0], f"no {prefix!r} line with a Unix socket: {result}")
    addr, private = lines[0].split(" (private: unix:")
    return addr, private.rstrip(")")


def get_unix(path):
    """`GET /` through the Unix socket `path`: the whole answer."""
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(DEADLINE)
        conn.connect(path)
        conn.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer.decode()


def t_publish(args, scratch):
    science = Path(args.science) / "share/nix-sandbox-mcp/manifest.json"
    runtime = tempfile.mkdtemp(dir=scratch, prefix="runtime-")
    env = {"SESSION_IDLE_TIMEOUT": "5", "XDG_RUNTIME_DIR": runtime}
    with Server(args, scratch, env=env, manifests=[science]) as s:
        result = s.client.request("tools/call", {"name": "run", "arguments": {
            "env": "science", "session": "web", "code": WEB_SERVER, "publish": 8000}})
        result, text, _ = unpack(result)
        check("listening" in text, f"the server did not start: {result}")
        addr, private = published(result, text, 8000)
        with urllib.request.urlopen(f"http://{addr}/", timeout=DEADLINE) as page:
            body = page.read().decode()
        check(page.status == 200 and "hello-from-the-jail.txt" in body, f"the listing: {body[:400]}")
        modes = (os.stat(private).st_mode & 0o777, os.stat(os.path.dirname(private)).st_mode & 0o777)
        check(private.startswith(runtime) and modes == (0o600, 0o700), f"{private}: modes {modes}")
        body = get_unix(private)
        check("hello-from-the-jail.txt" in body, f"the listing through {private}: {body[:400]}")
        for arguments, want in [
            ({"env": "science", "session": "web", "code": "1", "publish": 9000}, "port 9000 is not one"),
            ({"env": "science", "code": "1", "publish": 8000}, "needs a `session`"),
            ({"env": "python", "session": "p", "code": "1", "publish": 8000}, "publishes no port"),
        ]:
            result, text, structured = unpack(s.client.request("tools/call", {"name": "run", "arguments": arguments}))
            check(result.get("isError") and structured.get("error", {}).get("code") == "port_not_allowed"
                  and want in text and len(text.splitlines()) == 1, f"{arguments}: {result}")

        def refused():
            try:
                socket.create_connection(tuple_of(addr), timeout=2).close()
                return False
            except OSError:
                return True
        check(eventually(refused), f"{addr} still open after the session ended")
        check(eventually(lambda: not os.path.exists(private)), f"{private} left after the session ended")
        result, text, _ = s.call("science", "after", "print(6 * 7)")
        check(not result.get("isError") and text.startswith("42\n"), f"after: {result}")


def sandbox_cli(args, runtime, *verb):
    """`nix-sandbox-mcp sandbox VERB...` of the built server, as this user."""
    return subprocess.run([args.server + "/bin/nix-sandbox-mcp", "sandbox", *verb],
                          env={"PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": runtime},
                          capture_output=True, text=True, timeout=DEADLINE)


def sandbox_enter(args, runtime, session, line, marker):
    """`nix-sandbox-mcp sandbox enter SESSION` of the built server on a
    pseudo-terminal, as a person types in it: the line, then `exit 3` once
    the terminal shows `marker`. Returns the exit status and what the
    terminal showed."""
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.execve(args.server + "/bin/nix-sandbox-mcp", ["nix-sandbox-mcp", "sandbox", "enter", session],
                      {"PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": runtime, "TERM": "dumb"})
        finally:
            os._exit(127)
    shown = b""
    deadline = time.monotonic() + DEADLINE

    def read_until(want):
        nonlocal shown
        while want is None or want not in shown:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return False
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the terminal's last holder is gone
                return want is None
            if not chunk:
                return want is None
            shown += chunk
        return True

    try:
        os.write(fd, line.encode())
        if read_until(marker.encode()):
            os.write(fd, b"exit 3\n")
            read_until(None)
    finally:
        if time.monotonic() >= deadline and pid > 1:
            os.kill(pid, signal.SIGKILL)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        os.close(fd)
    return status, shown.decode(errors="replace")


def t_sandbox_cli(args, scratch):
    runtime = tempfile.mkdtemp(dir=scratch, prefix="runtime-")
    online = Path(args.online) / "share/nix-sandbox-mcp/manifest.json"
    with Server(args, scratch, env={"XDG_RUNTIME_DIR": runtime}, manifests=[online]) as s:
        prints(s, "python", "made", "open('/workspace/f', 'w').write('x')\nprint('ok')", "ok\n")
        out = sandbox_cli(args, runtime, "list", "--json")
        rows = [json.loads(line) for line in out.stdout.splitlines()]
        check(out.returncode == 0 and [(r["id"], r["env"], r["calls"]) for r in rows] == [("made", "python", 1)],
              f"list --json: {out}")
        out = sandbox_cli(args, runtime, "status", "nope")
        check(out.returncode == 1 and out.stdout == "" and len(out.stderr.splitlines()) == 1
              and "no open session `nope`" in out.stderr, f"status nope: {out}")
        # exec: the built agent spawns the argv in the session's jail.
        script = "import sys; print(open('f').read(), end=''); print('err', file=sys.stderr); sys.exit(3)"
        out = sandbox_cli(args, runtime, "exec", "made", "--", "python3", "-c", script)
        check((out.returncode, out.stdout, out.stderr) == (3, "x", "err\n"), f"exec: {out}")
        script = "import sys; sys.stdout.buffer.write(bytes([97, 255]))"
        out = sandbox_cli(args, runtime, "exec", "--json", "made", "--", "python3", "-c", script)
        events = [json.loads(line) for line in out.stdout.splitlines()]
        check(out.returncode == 0 and events == [{"type": "stdout", "text": "a"},
                                                 {"type": "stdout", "base64": "/w=="},
                                                 {"type": "exit", "code": 0}], f"exec --json: {out}")
        # enter: a shell on a pseudo-terminal in the session's jail, through
        # the built agent: it sees the model's file, and its status is enter's.
        status, shown = sandbox_enter(args, runtime, "made", 'echo "[$(cat /workspace/f)]" $((6*7)); tty\n',
                                      "[x] 42")
        check(status == 3 and "[x] 42" in shown and "/dev/pts/" in shown, f"enter: {status}, {shown[-400:]!r}")
        # create: a person's session of the built environment.
        out = sandbox_cli(args, runtime, "create", "--name", "mine", "python")
        check(out.returncode == 0 and out.stdout == "mine\n", f"create: {out}")
        out = sandbox_cli(args, runtime, "exec", "mine", "--", "python3", "-c", "print(6 * 7)")
        check(out.returncode == 0 and out.stdout == "42\n", f"exec in a created session: {out}")
        out = sandbox_cli(args, runtime, "destroy", "mine")
        check(out.returncode == 0, f"destroy mine: {out}")
        sandbox_profiles(args, runtime)
        out = sandbox_cli(args, runtime, "destroy", "made")
        check(out.returncode == 0 and out.stdout.startswith("destroyed made"), f"destroy: {out}")
        out = sandbox_cli(args, runtime, "list", "--json")
        check(out.returncode == 0 and out.stdout == "", f"list after destroy: {out}")
        _, text, _ = s.call("python", "made", "import os\nprint(os.path.exists('/workspace/f'))")
        check("False" in text and "a person ended it" in text, f"the next call: {text}")


# What a profile changes, seen from inside the jail: the network interfaces
# besides the header lines, the open-files limit, whether /project is there.
PROFILE_PROBE = ("import os, resource; print(len(open('/proc/net/dev').read().splitlines()) - 2, "
                 "resource.getrlimit(resource.RLIMIT_NOFILE)[0], os.path.exists('/project'))")


def sandbox_profiles(args, runtime):
    """The built-in profiles listed; `strict` takes the host network of
    `online`, hides the project and lowers `nofile`, as the Nix-built
    wrappers hold them; `build-install` changes nothing; an unknown profile
    and `--with` under `strict` are one line. (A policy's network under a
    profile: profiles.py, at the wrapper.)"""
    out = sandbox_cli(args, runtime, "profiles", "--json")
    names = [json.loads(line)["name"] for line in out.stdout.splitlines()]
    check(out.returncode == 0 and names == ["build-install", "offline-review", "strict"], f"profiles: {out}")
    for argv, says in ((["--profile", "nope", "python"], "no profile `nope` on server"),
                       (["--profile", "strict", "--with", "jq", "python"], "profile `strict` takes no packages")):
        out = sandbox_cli(args, runtime, "create", *argv)
        check(out.returncode == 1 and out.stdout == "" and len(out.stderr.splitlines()) == 1 and says in out.stderr,
              f"create {argv}: {out}")
    for name, profile, env in (("so", "strict", "online"), ("sp", "strict", "python"), ("bo", "build-install", "online")):
        out = sandbox_cli(args, runtime, "create", "--name", name, "--profile", profile, env)
        check(out.returncode == 0 and out.stdout == f"{name}\n", f"create --profile {profile} {env}: {out}")
        out = sandbox_cli(args, runtime, "exec", name, "--", "python3", "-c", PROFILE_PROBE)
        check(out.returncode == 0, f"exec in {profile} {env}: {out}")
        interfaces, nofile, project = out.stdout.split()
        if profile == "strict":
            check((interfaces, nofile, project) == ("1", "256", "False"), f"{profile} {env}: {out.stdout}")
        else:
            # The host's network namespace: as many interfaces as this test sees.
            host = len(Path("/proc/net/dev").read_text().splitlines()) - 2
            check((int(interfaces), project) == (host, "True") and int(nofile) > 256, f"{profile} {env}: {out.stdout}")
        out = sandbox_cli(args, runtime, "status", name)
        check(out.stdout.endswith(f"profile: {profile}\n"), f"status {name}: {out}")
        check(sandbox_cli(args, runtime, "destroy", name).returncode == 0, f"destroy {name}")


def tuple_of(addr):
    host, port = addr.rsplit(":", 1)
    return host, int(port)


SIGNAL_PID_1 = """import os, signal, time
for s in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM):
    os.kill(1, s)
time.sleep(0.2)
print('alive', x)
"""


def agents_of(home):
    """The session agents of the server whose HOME (and project) is `home`:
    the processes named `agent` whose parent is one of its bubblewrap
    processes."""
    bwraps = set(pids_with(home))
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        ppid = int(next(l.split()[1] for l in status.splitlines() if l.startswith("PPid:")))
        if comm == "agent" and ppid in bwraps:
            found.append(int(entry))
    return found


def t_agent_killed(args, scratch):
    child = f"nsm-sessions-agent-{os.getpid()}"
    with Server(args, scratch) as s:
        prints(s, "python", "k", "x = 1\n_ = open('/workspace/f', 'w').write('f')", "(no output)")
        # The agent is the jail's pid 1: the kernel drops user code's signals.
        prints(s, "python", "k", SIGNAL_PID_1, "alive 1\n")
        # An agent that dies all the same (killed by this test from outside
        # the jail, during a call) is detected, and the session reset.
        [call] = s.send_calls([("python", "k", "import subprocess, sys, time\n"
                                f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1000)', '{child}'])\n"
                                "time.sleep(30)")])
        check(eventually(lambda: pids_with(child)), "the call's child did not start")
        agents = agents_of(s.home)
        check(len(agents) == 1 and agents[0] > 1, f"the session's agent: {agents}")
        os.kill(agents[0], signal.SIGKILL)
        [(result, text, st)] = s.answers([call])
        check(result.get("isError") and text.startswith("the session's sandbox failed (")
              and text.endswith(RESET) and st.get("session_reset") is True, f"{result}")
        # Every process of the jail went with its pid 1.
        assert_gone(child, "the dead agent's jail")
        prints(s, "python", "k", "import os\nprint('x' in dir(), os.path.exists('/workspace/f'))", "False False\n")


def t_server_exit(args, scratch, how):
    child = f"nsm-sessions-exit-{how}-{os.getpid()}"
    s = Server(args, scratch)
    try:
        for env, code in [("python", "1"), ("node", "1")]:
            result, _, _ = s.call(env, env, code)
            check(not result.get("isError"), f"{env}: {result}")
        prints(s, "shell", "bg", f"(exec -a {child} sleep 1000) & echo started", "started\n")
        # One call still running when the server goes.
        s.client.send({"jsonrpc": "2.0", "id": 999, "method": "tools/call", "params": {
            "name": "run", "arguments": {"env": "shell", "session": "busy", "code": f"exec -a {child} sleep 1000"}}})
        check(eventually(lambda: len(pids_with(child)) == 2), f"the sleeps did not start: {pids_with(child)}")
        if how == "eof":
            s.client.proc.stdin.close()
            status = s.client.proc.wait(timeout=DEADLINE)
            check(status == 0, f"the server exited with {status}")
        else:
            os.kill(s.client.proc.pid, signal.SIGKILL)
            s.client.proc.wait(timeout=DEADLINE)
        assert_gone(s.home, "the server's sessions")
        assert_gone(child, "the sessions' children")
    finally:
        s.client.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", default=os.environ.get("USER") or str(os.getuid()))
    parser.add_argument("--server", required=True)
    parser.add_argument("--sandbox", action="append", default=[], metavar="PRESET=OUT")
    parser.add_argument("--custom", required=True)
    parser.add_argument("--science", required=True)
    parser.add_argument("--online", required=True, help="a network = true sandbox (Python)")
    args = parser.parse_args()
    args.sandboxes = dict(s.split("=", 1) for s in args.sandbox)
    missing = {"python", "shell", "node"} - args.sandboxes.keys()
    if missing:
        parser.error(f"--sandbox missing for {sorted(missing)}")

    suite = Suite(f"{args.label}: sessions")
    with tempfile.TemporaryDirectory(prefix="nsm-sessions-") as scratch:
        os.chmod(scratch, 0o755)
        suite.test("each preset's session wrapper runs the agent in its jail (frames on stdin/stdout)",
                   t_wrapper_frames, args)
        suite.test("state persists in python, bash and node (variables, imports, functions, cwd, "
                   "/workspace files; node top-level await)", t_state, args, scratch)
        suite.test("a session runs the environment's own python and packages (jq, numpy)",
                   t_own_interpreter, args, scratch)
        suite.test("numpy of a withPackages environment, and BLAS and LAPACK, load from its store closure",
                   t_numpy_from_closure, args, scratch)
        suite.test("10 MB on fd 1, a subprocess, input(), 5 MB on stderr, a forged frame: each its own "
                   "result, and the session goes on", t_output_tricks, args, scratch)
        suite.test("a python loop and a bash sleep are interrupted at the deadline with state kept; "
                   "code ignoring SIGINT gets the session reset", t_interrupts, args, scratch)
        suite.test("exit(), sys.exit(3), a segfault, bash exit 7, set -e, process.exit(2): told, "
                   "restarted, files kept", t_exits, args, scratch)
        suite.test("bad names, another environment, too many sessions are refused", t_refusals, args, scratch)
        suite.test("two calls at once on one session: exactly one session_busy", t_busy, args, scratch)
        if os.path.isdir("/var/tmp"):
            suite.test("sessions forked from one diverge; a rollback restores that call's tree; the jail "
                       "sees no checkpoint; a call ends a session", t_fork, args, scratch)
        else:
            suite.test("without /var/tmp (Nix's build sandbox) a fork is refused in one line saying why",
                       t_fork_without_layers, args, scratch)
        suite.test("32 sessions of one client at once, by default, keep separate state", t_thirty_two, args, scratch)
        suite.test("idle expiry and maximum lifetime end sessions and leave no process", t_expiry, args, scratch)
        suite.test("a session's http.server on port 8000, published, answers the host's GET with its "
                   "listing, through loopback and the private Unix socket; ports not published are refused "
                   "with one line; the addresses close with the session", t_publish, args, scratch)
        suite.test("user code cannot signal the agent (the jail's pid 1); an agent killed from outside "
                   "is detected and the session reset, its jail gone", t_agent_killed, args, scratch)
        suite.test("`nix-sandbox-mcp sandbox` lists the session, refuses an unknown one in one line, "
                   "runs commands in it (streamed, --json), enters it on a terminal, creates one of its own, "
                   "makes sessions under profiles (strict: no network, no project, nofile lowered), "
                   "destroys it; the model's next call is told why", t_sandbox_cli, args, scratch)
        suite.test("no session process survives the client going away (stdin closed)",
                   t_server_exit, args, scratch, "eof")
        suite.test("no session process survives a killed server", t_server_exit, args, scratch, "kill")
    sys.exit(1 if suite.failed else 0)


if __name__ == "__main__":
    main()
