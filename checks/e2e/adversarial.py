#!/usr/bin/env python3
"""The adversarial suite: attacks on the Nix-built server and jails.

Run by checks/run after e2e.py, once as root and once as an unprivileged
user, against the server package and the `tight-python` / `tight-shell`
environments of checks/flakes/environments.nix (small limits, served through
NIX_SANDBOX_DIR). Each case states what must happen and checks it; after
each, the server must still answer and no process of the run may remain
(nothing in the safety-net cgroup but this script, the server and its
jails' init, no run cgroup left). Prints `ok - LABEL: adversarial: ...`, `FAIL - ...` lines like
e2e.py and exits 1 when one failed.

SAFETY: bombs run only inside a safety net: this process must be in a
cgroup v1 pids cgroup with pids.max of at most 4096 (and, when it is root,
it makes one itself together with a memory cgroup of 4 GiB); every bomb is
bounded by the environment's timeout. Network tests use only the loopback,
an abstract Unix socket, and (as root) two network namespaces this script
makes and removes, with 10.x addresses inside them; nothing is ever sent
to any other address.

  adversarial.py --label root --server OUT --tight-python OUT --tight-shell OUT [--runs N] [--sessions N]
"""

import argparse
import ctypes
import errno
import grp
import json
import os
import pwd
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e import DEADLINE, Failed, McpClient, Suite, check, facts, manifest_of, processes  # noqa: E402
from host_sharing import c_host_reach, c_identity, c_kernel_budgets, c_socket_families, c_sysv_ipc  # noqa: E402

SAFETY_PIDS = 4096
SAFETY_MEMORY = 4 << 30
SECRET = "adversarial-secret-that-must-not-leak"
MIB = 1 << 20


# --- the safety net --------------------------------------------------------


def own_cgroup(controller):
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return None


def safety_net():
    """Puts this process in a pids (and memory) cgroup of its own when root;
    returns the pids cgroup directory, or raises when there is no net."""
    if os.geteuid() == 0:
        made = []
        for controller, limit_file, limit in [
            ("pids", "pids.max", SAFETY_PIDS),
            ("memory", "memory.limit_in_bytes", SAFETY_MEMORY),
        ]:
            base = Path(f"/sys/fs/cgroup/{controller}") / own_cgroup(controller).lstrip("/")
            net = base / f"nsm-adversarial.{os.getpid()}"
            net.mkdir()
            (net / limit_file).write_text(str(limit))
            (net / "cgroup.procs").write_text(str(os.getpid()))
            made.append(net)
        return made
    path = own_cgroup("pids")
    limit_file = Path("/sys/fs/cgroup/pids") / (path or "/").lstrip("/") / "pids.max"
    try:
        limit = int(limit_file.read_text())
    except (OSError, ValueError):
        raise SystemExit(f"adversarial.py: no safety net: {limit_file} has no pids limit; "
                         "checks/run puts the unprivileged run in one") from None
    if limit > SAFETY_PIDS:
        raise SystemExit(f"adversarial.py: the safety net allows {limit} processes, over {SAFETY_PIDS}")
    return []


def settled(walk):
    """walk() again while a cgroup it walks is removed under it (runs and
    sessions end while this looks)."""
    for _ in range(50):
        try:
            return walk()
        except FileNotFoundError:
            time.sleep(0.05)
    return walk()


def net_pids():
    """Every process in this script's pids cgroup and below it."""
    top = Path("/sys/fs/cgroup/pids") / own_cgroup("pids").lstrip("/")

    def walk():
        pids = set()
        for procs in top.rglob("cgroup.procs"):
            try:
                pids |= {int(p) for p in procs.read_text().split()}
            except OSError:
                pass
        return pids
    return settled(walk)


def remove_net(made):
    for net in made:
        (net.parent / "cgroup.procs").write_text(str(os.getpid()))
    for net in made:
        for _ in range(50):
            try:
                net.rmdir()
                break
            except OSError:
                time.sleep(0.1)


# --- the server -------------------------------------------------------------


class Server:
    def __init__(self, server, sandbox_dir, project, scratch, extra_env=None, extra_args=()):
        env = {
            "HOME": os.environ["HOME"],
            "PATH": "/usr/bin:/bin",
            "NIX_SANDBOX_DIR": str(sandbox_dir),
            "PROJECT_DIR": str(project),
            "NSM_ADVERSARIAL_SECRET": SECRET,
            "TMPDIR": str(scratch),
            # Warm jails off: each attack checks that nothing of its runs is
            # left, which an idle warm jail would be (artifacts.py attacks
            # the pool: no run sees what an earlier one left).
            "NIX_SANDBOX_WARM_JAILS": "0",
            **(extra_env or {}),
        }
        self.client = McpClient([server + "/bin/nix-sandbox-mcp", "--stdio", *extra_args], env)
        self.pid = self.client.proc.pid
        init = self.client.initialize("nix-sandbox-mcp-adversarial")
        self.instructions = init.get("instructions", "")

    def run(self, env, code):
        return self.call({"env": env, "code": code})

    def call(self, arguments):
        """`run` with `arguments`; (result, text, facts)."""
        result = self.client.request("tools/call", {"name": "run", "arguments": arguments})
        text = "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")
        return result, text, facts(result)

    def session(self, env, name, code):
        """Runs `code` in session `name`; the result and its text."""
        result = self.client.request("tools/call", {"name": "run", "arguments": {
            "env": env, "session": name, "code": code}})
        return result, "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")

    def run_many(self, env, code, count, window=4):
        """`count` calls, `window` at a time; every result."""
        results, next_id = [], self.client.next_id
        pending = {}
        sent = 0
        while sent < count or pending:
            while sent < count and len(pending) < window:
                next_id += 1
                pending[next_id] = sent
                self.client.send({"jsonrpc": "2.0", "id": next_id, "method": "tools/call",
                                  "params": {"name": "run", "arguments": {"env": env, "code": code}}})
                sent += 1
            line = self.client.lines.get(timeout=DEADLINE)
            if line is None:
                raise Failed("the server closed stdout")
            message = json.loads(line)
            if message.get("id") in pending:
                del pending[message["id"]]
                results.append(message.get("result") or message)
        self.client.next_id = next_id
        return results

    def call_all(self, calls):
        """Sends every call (arguments of `run`) before reading any answer;
        their results, in the order sent."""
        ids = {}
        for arguments in calls:
            self.client.next_id += 1
            ids[self.client.next_id] = len(ids)
            self.client.send({"jsonrpc": "2.0", "id": self.client.next_id, "method": "tools/call",
                              "params": {"name": "run", "arguments": arguments}})
        results = [None] * len(calls)
        end = time.monotonic() + DEADLINE
        while any(r is None for r in results):
            try:
                line = self.client.lines.get(timeout=max(0.1, end - time.monotonic()))
            except queue.Empty:
                raise Failed(f"{results.count(None)} of {len(calls)} calls unanswered within {DEADLINE} s") from None
            if line is None:
                raise Failed("the server closed stdout")
            message = json.loads(line)
            if message.get("id") in ids:
                results[ids[message["id"]]] = message.get("result") or message
        return results

    def own_pids(self):
        """The server and its jails' init (pid 1 of the pid namespace its
        jails live in, which lives as long as the server)."""
        return {self.pid} | jails_init(self.pid)

    def rss_kib(self):
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise Failed("no VmRSS")

    def fds(self):
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def close(self):
        self.client.close()


# --- what every case must leave behind ----------------------------------------


def jails_init(server_pid):
    """The server's child named jails-init, as a set (empty when the server
    could not give its jails a pid namespace)."""
    return {pid for pid, (parent, comm) in processes().items() if parent == server_pid and comm == "jails-init"}


def described(pids):
    """pid -> the start of its command line, for a failure message."""
    out = {}
    for p in pids:
        try:
            out[p] = Path(f"/proc/{p}/cmdline").read_bytes()[:80]
        except OSError:
            pass
    return out


def kill_left(pids):
    """SIGKILL to processes a failed case left in this script's safety net
    (its own descendants), so that the next cases start clean."""
    for p in pids:
        if p > 1:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


def run_cgroups(server_pid):
    """Run cgroups of the server still present (root, cgroup v1)."""
    def walk():
        found = []
        for controller in ("pids", "memory"):
            base = Path(f"/sys/fs/cgroup/{controller}")
            for d in base.rglob(f"nix-sandbox-mcp.{server_pid}"):
                found += [p for p in d.iterdir() if p.is_dir()]
        return found
    return settled(walk)


def after_each(server, expected):
    """The server answers; nothing of the run is left."""
    result, text, _ = server.run("tight-python", "print('alive')")
    check(not result.get("isError") and text == "alive\n", f"the server no longer runs code: {result}")
    deadline = time.monotonic() + 10
    while True:
        left = net_pids() - expected
        cgroups = run_cgroups(server.pid)
        if not left and not cgroups:
            return
        if time.monotonic() > deadline:
            raise Failed(f"left behind: processes {described(left)}, cgroups {cgroups}")
        time.sleep(0.1)


# --- the cases ------------------------------------------------------------------


def limit_of(structured):
    return (structured.get("limit") or {}).get("name")


def c_fork_bomb(s, tight):
    """A fork bomb is stopped at the process limit; the host is untouched."""
    for env, code in [
        # Each bombs for 4 seconds, then the program ends (and the jail with it).
        ("tight-shell", "b() { b | b & }; b; sleep 4"),
        ("tight-python", (
            "import os, sys, time\ntop, end, err = os.getpid(), time.time() + 4, None\n"
            "while time.time() < end:\n    try:\n        os.fork()\n    except OSError as e:\n        err = e\n"
            "if os.getpid() == top:\n    print(f'{type(err).__name__}: {err}', file=sys.stderr)\n"
        )),
    ]:
        result, text, st = s.run(env, code)
        check(limit_of(st) == "processes", f"{env}: not stopped by the process limit: {st} {text[-300:]}")
        check("processes" in text.splitlines()[-2] + text.splitlines()[-1],
              f"{env}: the result does not say so: {text[-300:]}")
    peak = Path("/sys/fs/cgroup/pids") / own_cgroup("pids").lstrip("/") / "pids.peak"
    if peak.exists():
        check(int(peak.read_text()) < tight["pids"] * 2 + 32,
              f"the safety net saw {peak.read_text().strip()} processes: the limit of {tight['pids']} did not hold")


def c_memory_bomb(s, tight):
    """Allocating until killed ends at the memory limit, said so."""
    code = "a = []\nwhile True:\n    a.append(bytearray(16 << 20))\n"
    result, text, st = s.run("tight-python", code)
    check(result.get("isError") and not st.get("timed_out"), f"{st} {text[-300:]}")
    check(limit_of(st) == "memory", f"not reported as the memory limit: {st} {text[-300:]}")
    check(f"memory limit" in text and str(tight["memory_mb"]) in text, f"{text[-300:]}")
    peak = st.get("peak_memory_bytes")
    check(peak is None or peak <= (tight["memory_mb"] + 16) * MIB, f"peak memory {peak} over the limit")


def c_stack_bomb(s, tight):
    """RLIMIT_DATA does not count the main thread's stack: its hard limit
    of 8 MiB holds, so `ulimit -s unlimited` cannot turn a deep recursion
    into unbounded memory."""
    code = "ulimit -s unlimited; echo raised=$?; ulimit -H -s; ulimit -H -d"
    result, text, st = s.run("tight-shell", code)
    check("raised=1" in text, f"the stack limit was raised: {text[-300:]}")
    lines = text.splitlines()
    check("8192" in lines and str(tight["memory_mb"] * 1024) in lines,
          f"hard stack and data limits are not 8 MiB and memory_mb: {text[-300:]}")


def c_big_files(s, tight):
    """10 GB into /workspace stops at file_mb, into /tmp at the tmpfs size."""
    for where, most, limit in [("/workspace", tight["file_mb"], "file_size"), ("/tmp", tight["tmp_mb"], "disk")]:
        code = f"head -c 10G /dev/zero > {where}/big; echo size=$(stat -c %s {where}/big)"
        result, text, st = s.run("tight-shell", code)
        sizes = [int(l.split("=")[1]) for l in text.splitlines() if l.startswith("size=")]
        check(sizes and sizes[0] <= most * MIB, f"{where}: {text[-300:]}")
        check(limit_of(st) == limit, f"{where}: not reported as {limit}: {st} {text[-300:]}")


# Where a jail might write: its root and /dev (bubblewrap's own tmpfs, with
# no size) and every writable mount the policy makes. Each must refuse
# (EROFS) or fill up at its size (ENOSPC), never take the host's memory.
FILL_TARGETS = ["/", "/dev", "/dev/shm", "/home/sandbox", "/tmp", "/workspace"]
# Mounts that store nothing: processes' files, terminals, message queues.
NOT_STORAGE = {"proc", "devpts", "mqueue", "sysfs", "cgroup", "cgroup2"}


def fill_code(where, total):
    """Writes `total` bytes into `where` (files of 8 MiB, under file_mb);
    prints how much went in and the error that stopped it."""
    return f"""import errno, os
where, total, block = {where!r}, {total}, b'\\0' * (1 << 20)
wrote, err = 0, None
try:
    d = os.path.join(where, '.nsm-fill')
    os.mkdir(d)
    n = 0
    while wrote < total:
        fd = os.open(os.path.join(d, str(n)), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            for _ in range(8):
                wrote += os.write(fd, block)
        finally:
            os.close(fd)
        n += 1
except OSError as e:
    err = errno.errorcode.get(e.errno, str(e.errno))
print(f'wrote={{wrote}} err={{err}}', flush=True)
"""


WRITABLE_MOUNTS = r"""import json
seen = []
for line in open('/proc/self/mountinfo'):
    f = line.split()
    dash = f.index('-')
    seen.append([f[3], f[4], f[5].split(',')[0], f[dash + 1], f[dash + 3]])
print(json.dumps(seen))
"""


def c_writable_mounts(s, tight, args, sandboxes, project, scratch):
    """Every writable mount of a jail has a size, and twice memory_mb
    written into the root, /dev and each writable mount is refused (EROFS)
    or stops at the mount's size (ENOSPC); in a session too (on a server of
    its own, which ends the session with it)."""
    _, text, _ = s.run("tight-python", WRITABLE_MOUNTS)
    try:
        mounts = json.loads(text.splitlines()[0])
    except (ValueError, IndexError):
        raise Failed(f"no mount table: {text[-300:]}") from None
    # Mount order: a later mount at a path covers the earlier one.
    problems, sizes, kinds = [], {}, {}
    for root, path, access, fstype, options in mounts:
        sizes.pop(path, None)
        if access != "rw" or fstype in NOT_STORAGE or (fstype == "devtmpfs" and root != "/"):
            continue
        size = [o for o in options.split(",") if o.startswith("size=")]
        sizes[path] = int(size[0][len("size="):].rstrip("k")) * 1024 if fstype == "tmpfs" and size else None
        kinds[path] = f"{fstype} {options}"
    problems += [f"{path} is writable ({kinds[path]}) without a size" for path, size in sizes.items() if size is None]
    total = 2 * tight["memory_mb"] * MIB
    for where in FILL_TARGETS:
        result, text, st = s.run("tight-python", fill_code(where, total))
        said = [l for l in text.splitlines() if l.startswith("wrote=")]
        if not said:
            problems.append(f"{where}: the fill did not finish (limit {limit_of(st)}): {text[-200:]!r}")
            continue
        wrote, err = said[0].split()
        wrote, err = int(wrote.split("=")[1]), err.split("=")[1]
        most = sizes.get(where) or 0
        if err != ("ENOSPC" if most else "EROFS") or wrote > most:
            problems.append(f"{where}: wrote {wrote >> 20} MiB of {total >> 20} and stopped at {err}, not at "
                            f"{'ENOSPC after at most %d MiB' % (most >> 20) if most else 'EROFS'}")
    # A session's jail has the same policy: its root is read-only as well.
    side = side_server(args, sandboxes, project, scratch, "fill")
    try:
        _, text = side.session("tight-python", "fill", fill_code("/", total))
    finally:
        side.close()
    if "wrote=0 err=EROFS" not in text:
        problems.append(f"a session's root: {text[-200:]!r}")
    declared = {"/tmp": tight["tmp_mb"], "/home/sandbox": tight["tmp_mb"], "/dev/shm": tight["tmp_mb"],
                "/workspace": tight["workspace_mb"]}
    if sizes != {p: mb * MIB for p, mb in declared.items()}:
        problems.append(f"the writable mounts are {sizes}, not {declared} MiB")
    check(not problems, "; ".join(problems))


def c_cpu_threads(s, tight):
    """Four threads spinning end at the CPU time limit, not the deadline."""
    code = (
        "import threading\n"
        "def spin():\n    while True:\n        pass\n"
        "for _ in range(4):\n    threading.Thread(target=spin, daemon=True).start()\n"
        "threading.Event().wait()\n"
    )
    result, text, st = s.run("tight-python", code)
    check(result.get("isError") and not st.get("timed_out"), f"{st} {text[-300:]}")
    check(limit_of(st) == "cpu" and f"CPU time limit {tight['cpu_s']} s" in text, f"{st} {text[-300:]}")
    if os.geteuid() == 0:
        # Root here has cgroups: the result reports the jail's CPU time.
        check(st.get("cpu_ms") is not None and st["cpu_ms"] >= tight["cpu_s"] * 1000 * 0.9,
              f"CPU {st.get('cpu_ms')} ms")
    else:
        # Without a cgroup the launcher cannot see the jail's usage and says nothing.
        check(st.get("cpu_ms") is None and "used:" not in text, f"{st} {text[-200:]}")


def c_timeout_on_request(s, tight):
    """A call may ask for more than `timeout_s`, up to `max_timeout_s`: a
    sleep past the default finishes, in bash and in Python (sessions: the
    launcher tests, launcher/tests/it/timeout.rs); an ask past
    the ceiling is cut to it, stopped there, and said; a CPU spin given
    more time still ends at `cpu_s`. Sent at once, so they take one
    ceiling's time."""
    default, ceiling = tight["timeout_s"], tight["max_timeout_s"]
    late = default + 2
    results = s.call_all([
        {"env": "tight-shell", "code": f"sleep {late}; echo done", "timeout_s": ceiling},
        {"env": "tight-python", "timeout_s": ceiling,
         "code": f"import time\ntime.sleep({late})\nprint('slept')"},
        {"env": "tight-shell", "code": "echo started; sleep 600", "timeout_s": 100000},
        {"env": "tight-python", "code": "while True: pass", "timeout_s": ceiling},
    ])
    texts = ["".join(c.get("text", "") for c in r.get("content", []) if c.get("type") == "text") for r in results]
    check(not results[0].get("isError") and texts[0] == "done\n", f"a run given {ceiling} s: {results[0]}")
    check(not results[1].get("isError") and texts[1] == "slept\n", f"a python run given {ceiling} s: {results[1]}")
    cut = facts(results[2])
    check(texts[2] == f"started\ntimed out after {ceiling} s; the process tree was killed\n"
                     f"timeout_s 100000 cut to {ceiling} s, the most this environment allows",
          f"an ask past the ceiling: {texts[2]!r}")
    check(cut.get("timed_out") and ceiling * 1000 <= cut.get("duration_ms", 0) < (ceiling + 10) * 1000, f"{cut}")
    spin = facts(results[3])
    check(limit_of(spin) == "cpu" and not spin.get("timed_out"),
          f"a CPU spin given {ceiling} s did not end at cpu_s {tight['cpu_s']}: {spin} {texts[3][-200:]}")


def c_flood(s, tight):
    """50 MB on stdout and on stderr: capped, stopped once a stream passes
    1024 times output_bytes (16 MiB here), the server's memory flat; and a
    `yes` with no end is stopped there too, not read to the deadline."""
    before = s.rss_kib()
    stop = 1024 * tight["output_bytes"]
    code = "import sys\nchunk = 'x' * 65536 + '\\n'\nfor _ in range(800):\n    sys.stdout.write(chunk)\n    sys.stderr.write(chunk)\n"
    result, text, st = s.run("tight-python", code)
    dropped = max(st.get("stdout_dropped_bytes", 0), st.get("stderr_dropped_bytes", 0))
    check(st.get("flooded") in ("stdout", "stderr") and stop - 4 * tight["output_bytes"] < dropped <= stop,
          f"{st}")
    check(result.get("isError") and not st.get("timed_out"), f"{st}")
    check(f"passed {stop >> 20} MiB (1024 times output_bytes" in text, text[-400:])
    check(len(text) < 4 * tight["output_bytes"] + 1024, f"the result is {len(text)} characters")
    result, text, st = s.run("tight-shell", "yes")
    check(st.get("flooded") == "stdout" and not st.get("timed_out")
          and st.get("duration_ms", 0) < tight["timeout_s"] * 1000, f"{st}")
    check(text.startswith("y\ny\n") and "the process tree was killed" in text, text[-400:])
    check(s.rss_kib() - before < 16 * 1024, f"the server grew from {before} to {s.rss_kib()} KiB")


def c_open_files(s, tight):
    """10,000 open files stop at nofile."""
    code = (
        "files = []\n"
        "try:\n    for _ in range(10000):\n        files.append(open('/dev/null'))\n"
        "except OSError as e:\n    print(len(files), e.errno)\n    raise\n"
    )
    result, text, st = s.run("tight-python", code)
    first = text.splitlines()[0].split()
    check(int(first[0]) < tight["nofile"] and int(first[1]) == errno.EMFILE, text[-300:])
    check(limit_of(st) == "open_files", f"{st}")


def c_recursion(s, tight):
    """A deep recursion crashes the program, not the server."""
    code = "import sys\nsys.setrecursionlimit(10**9)\ndef f(n):\n    return f(n + 1) + 1\nf(0)\n"
    result, text, st = s.run("tight-python", code)
    check(result.get("isError") and not st.get("timed_out"), f"{st} {text[-300:]}")
    result, text, st = s.run("tight-shell", "f() { f; }; f")
    check(result.get("isError") and not st.get("timed_out"), f"shell: {st} {text[-300:]}")


HOST_FILES = r"""
import json, os, sys
seen = {}
for p in sys.argv[1:]:
    try:
        if os.path.isdir(p):
            seen[p] = sorted(os.listdir(p))
        else:
            seen[p] = open(p, 'rb').read(200).decode('latin1')
    except OSError as e:
        seen[p] = 'errno %d' % e.errno
procs = [p for p in os.listdir('/proc') if p.isdigit()]
environs = ''
for p in procs:
    try:
        environs += open('/proc/%s/environ' % p, 'rb').read().decode('latin1')
        environs += open('/proc/%s/cmdline' % p, 'rb').read().decode('latin1')
    except OSError:
        pass
print(json.dumps({'seen': seen, 'procs': procs, 'environs': environs}))
"""


def c_host_files(s, secret_file):
    """/etc/shadow, /root, /home/*, the server's environment and the host's
    processes are out of sight."""
    paths = ["/etc/shadow", "/root", "/home", str(secret_file), f"/proc/{s.pid}/environ", "/proc/1/environ"]
    code = HOST_FILES.replace("sys.argv[1:]", repr(paths))
    result, text, _ = s.run("tight-python", code)
    got = json.loads(text)
    seen = got["seen"]
    check(seen["/etc/shadow"].startswith("errno"), f"/etc/shadow: {seen['/etc/shadow'][:60]!r}")
    check(seen["/root"] in ([], "errno 2"), f"/root: {seen['/root']}")
    check(set(seen["/home"]) <= {"sandbox", Path(os.environ["HOME"]).name}, f"/home: {seen['/home']}")
    check(seen[str(secret_file)].startswith("errno"), "a host file outside the jail was read")
    check(SECRET not in json.dumps(got), "the server's secret environment reached the jail")
    check(len(got["procs"]) < 10, f"the jail sees {len(got['procs'])} processes: {got['procs']}")
    check("--stdio" not in got["environs"], "the server's process is visible in the jail")
    # bwrap is the jail's pid 1: its environment must not carry the wrapper's.
    pid1 = seen["/proc/1/environ"]
    check(not any(v in pid1 for v in ("HOME=", "PROJECT_DIR=", "NIX_SANDBOX_CGROUP=", "PATH=")),
          f"the wrapper's environment shows in /proc/1/environ: {pid1!r}")


def c_signal_host(s, runner_pid):
    """Signalling a host process fails; the host process gets nothing."""
    received = []
    old = signal.signal(signal.SIGUSR1, lambda *_: received.append(1))
    try:
        code = f"import os\ntry:\n    os.kill({runner_pid}, 10)\n    print('sent')\nexcept OSError as e:\n    print('errno', e.errno)\n"
        _, text, _ = s.run("tight-python", code)
        time.sleep(0.2)
        check(text.strip() == f"errno {errno.ESRCH}", f"kill of a host pid: {text!r}")
        check(not received, "the host process got the signal")
    finally:
        signal.signal(signal.SIGUSR1, old)


def c_project(s, project, outside):
    """The project mount is read-only; a symlink planted in it does not lead out."""
    code = (
        "import os\n"
        "for p in ['/project/new.txt', '/project/readme.txt']:\n"
        "    try:\n        open(p, 'a').write('x')\n        print('wrote', p)\n"
        "    except OSError as e:\n        print('errno', e.errno)\n"
        "for p in ['/project/escape/secret.txt', '/project/etc-link/shadow']:\n"
        "    try:\n        print('read', open(p).read()[:40])\n"
        "    except OSError as e:\n        print('errno', e.errno)\n"
    )
    _, text, _ = s.run("tight-python", code)
    lines = text.splitlines()
    check(lines[:2] == [f"errno {errno.EROFS}"] * 2, f"writing into the project: {lines[:2]}")
    check(all(l.startswith("errno") for l in lines[2:4]), f"a symlink led out of the project: {lines[2:4]}")
    check(not (project / "new.txt").exists() and (project / "readme.txt").read_text() == "readme",
          "the host's project changed")
    check(SECRET not in text, "the secret behind the symlink was read")


NET_PROBE = r"""
import json, socket, errno
out = {}
def attempt(name, fn):
    try:
        out[name] = fn()
    except OSError as e:
        out[name] = 'errno %s' % e.errno
    except Exception as e:
        out[name] = type(e).__name__
def tcp(addr):
    s = socket.socket(); s.settimeout(3); s.connect(addr); return s.recv(16).decode()
def udp(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1)
    s.sendto(b'ping', addr); return s.recv(16).decode()
def abstract(name):
    s = socket.socket(socket.AF_UNIX); s.connect(name); return s.recv(16).decode()
attempt('tcp_loopback', lambda: tcp(('127.0.0.1', TCP_PORT)))
attempt('udp_loopback', lambda: udp(('127.0.0.1', UDP_PORT)))
attempt('tcp_netns', lambda: tcp(('NETNS_ADDR', NETNS_PORT)))
attempt('dns', lambda: socket.getaddrinfo('example.com', 80))
attempt('raw', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP) and 'opened')
attempt('packet', lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW) and 'opened')
attempt('abstract', lambda: abstract(ABSTRACT))
attempt('interfaces', lambda: sorted(n for _, n in socket.if_nameindex()))
print(json.dumps(out))
"""


class Listeners:
    """TCP and UDP on the host's loopback, an abstract Unix socket, and (as
    root) a TCP listener in a network namespace of this script's own."""

    def __init__(self, label):
        self.hits = []
        self.stop = threading.Event()
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(8)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.abstract_name = f"\0nsm-adversarial-{os.getpid()}"
        self.unix = socket.socket(socket.AF_UNIX)
        self.unix.bind(self.abstract_name)
        self.unix.listen(8)
        for sock in (self.tcp, self.udp, self.unix):
            sock.settimeout(0.2)
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()
        self.netns = None
        if os.geteuid() == 0 and subprocess.run(["which", "ip"], capture_output=True).returncode == 0:
            self._netns()

    def _serve(self, sock):
        while not self.stop.is_set():
            try:
                if sock.type == socket.SOCK_DGRAM:
                    data, peer = sock.recvfrom(16)
                    self.hits.append(("udp", data))
                    sock.sendto(b"pong", peer)
                else:
                    conn, _ = sock.accept()
                    self.hits.append(("stream", sock.family))
                    with conn:
                        conn.sendall(b"hello")
            except OSError:
                continue

    def _netns(self):
        """Two namespaces of our own joined by a veth pair (10.77.0.1 and
        .2, only inside them); a listener on .1, reachable from the other."""
        tag = os.getpid() % 100000
        self.netns = (f"nsm-adv-a{tag}", f"nsm-adv-b{tag}")
        a, b = self.netns
        run = lambda *cmd: subprocess.run(cmd, check=True, capture_output=True)
        run("ip", "netns", "add", a)
        run("ip", "netns", "add", b)
        run("ip", "-n", a, "link", "add", "veth-a", "type", "veth", "peer", "name", "veth-b", "netns", b)
        run("ip", "-n", a, "addr", "add", "10.77.0.1/30", "dev", "veth-a")
        run("ip", "-n", b, "addr", "add", "10.77.0.2/30", "dev", "veth-b")
        for ns, dev in [(a, "veth-a"), (b, "veth-b")]:
            run("ip", "-n", ns, "link", "set", dev, "up")
            run("ip", "-n", ns, "link", "set", "lo", "up")
        server = ("import socket\ns = socket.socket(); s.bind(('10.77.0.1', 7777)); s.listen(8)\n"
                  "while True:\n    c, _ = s.accept(); c.sendall(b'hello'); c.close()\n")
        self.netns_server = subprocess.Popen(["ip", "netns", "exec", a, "/usr/bin/python3", "-c", server])
        # The listener works: reachable from the other namespace of ours.
        probe = ("import socket, time\nfor _ in range(50):\n    try:\n"
                 "        s = socket.create_connection(('10.77.0.1', 7777), timeout=2); print(s.recv(16).decode()); break\n"
                 "    except OSError:\n        time.sleep(0.1)\n")
        got = subprocess.run(["ip", "netns", "exec", b, "/usr/bin/python3", "-c", probe],
                             capture_output=True, text=True, timeout=30)
        check(got.stdout.strip() == "hello", f"the netns listener is not reachable even from its peer: {got}")

    def close(self):
        self.stop.set()
        for sock in (self.tcp, self.udp, self.unix):
            sock.close()
        if self.netns:
            self.netns_server.kill()
            self.netns_server.wait()
            for ns in self.netns:
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def c_network(s, listeners):
    """TCP and UDP to the host's loopback and to a network namespace of ours,
    DNS, raw and packet sockets, an abstract Unix socket: none gets through."""
    code = (NET_PROBE.replace("TCP_PORT", str(listeners.tcp.getsockname()[1]))
            .replace("UDP_PORT", str(listeners.udp.getsockname()[1]))
            .replace("NETNS_ADDR", "10.77.0.1").replace("NETNS_PORT", "7777")
            .replace("ABSTRACT", repr(listeners.abstract_name)))
    before = len(listeners.hits)
    _, text, _ = s.run("tight-python", code)
    got = json.loads(text)
    for name in ["tcp_loopback", "udp_loopback", "tcp_netns", "raw", "packet", "abstract"]:
        check(str(got[name]).startswith("errno") or got[name] == "timeout", f"{name}: {got[name]}")
    check(got["dns"] in ("gaierror",) or str(got["dns"]).startswith("errno"), f"dns: {got['dns']}")
    check(got["interfaces"] == ["lo"], f"interfaces {got['interfaces']}")
    time.sleep(0.3)
    check(len(listeners.hits) == before, f"a host listener was reached: {listeners.hits[before:]}")


ESCAPES = r"""
import ctypes, json, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def sys_(name, nr, *args):
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    out[name] = 0 if r != -1 else ctypes.get_errno()
out = {}
sys_('unshare_user', 272, 0x10000000)
sys_('unshare_mount', 272, 0x20000)
sys_('unshare_net', 272, 0x40000000)
sys_('mount', 165, 0, 0, 0, 0, 0)
r = libc.mount(b'none', b'/tmp', b'tmpfs', 0, None); out['mount_tmpfs'] = 0 if r == 0 else ctypes.get_errno()
sys_('ptrace_attach', 101, 16, 1, 0, 0)
sys_('ptrace_traceme', 101, 0, 0, 0, 0)
r = libc.sethostname(b'pwned', 5); out['sethostname'] = 0 if r == 0 else ctypes.get_errno()
sys_('keyctl_user', 250, 0, -4, 0)
sys_('add_key', 248, 0, 0, 0, 0, 0)
try:
    out['proc_keys'] = open('/proc/keys').read()
except OSError as e:
    out['proc_keys'] = 'errno %d' % e.errno
devs = {}
for name in os.listdir('/dev'):
    st = os.lstat('/dev/' + name)
    import stat
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        devs[name] = 'block' if stat.S_ISBLK(st.st_mode) else 'char'
out['devices'] = devs
out['caps'] = {l.split(':')[0]: l.split()[1] for l in open('/proc/self/status') if l.startswith('Cap')}
try:
    open('/dev/mem', 'rb'); out['dev_mem'] = 'opened'
except OSError as e:
    out['dev_mem'] = e.errno
print(json.dumps(out))
"""

ALLOWED_DEVICES = {"null", "zero", "full", "random", "urandom", "tty", "ptmx", "console"}


def c_escapes(s, key_description):
    """New user namespaces, mounts, ptrace, unshare, the hostname, devices
    beyond the harmless ones, the kernel keyring: all refused; the code holds
    no capability at all, even when root started the server."""
    _, text, _ = s.run("tight-python", ESCAPES)
    got = json.loads(text)
    for name in ["unshare_user", "unshare_mount", "unshare_net", "mount", "mount_tmpfs",
                 "ptrace_attach", "ptrace_traceme", "sethostname", "keyctl_user", "add_key"]:
        check(got[name] in (errno.EPERM, errno.EACCES, errno.EINVAL, errno.ENOSYS), f"{name}: {got[name]}")
    check(set(got["devices"]) <= ALLOWED_DEVICES and "block" not in got["devices"].values(),
          f"devices {got['devices']}")
    check(got["dev_mem"] == errno.ENOENT, f"/dev/mem: {got['dev_mem']}")
    check(all(int(v, 16) == 0 for v in got["caps"].values()), f"capabilities in the jail: {got['caps']}")
    check(key_description not in got["proc_keys"], "the host's keyring is visible in the jail")


# What a jail tries against /proc (a script of its own, which the cargo
# tests run too).
PROC_ATTACKS = Path(__file__).with_name("proc_attacks.py").read_text()


def c_proc(s):
    """Global sysctls (the same value written back), /proc/sysrq-trigger and
    /proc/kpageflags are out of reach, /proc/sys and its like are read-only
    mounts, and /proc/sys still shows the jail's own namespaces."""
    _, text, _ = s.run("tight-python", PROC_ATTACKS)
    got = json.loads(text)
    refused = ("EROFS", "EACCES", "EPERM")
    check(got["sysctl"] in refused, f"fs.lease-break-time written back: {got}")
    check(got["core_pattern"] in refused, f"kernel.core_pattern written back: {got}")
    check(got["sysrq"] in refused + ("ENOENT",), f"/proc/sysrq-trigger opened for writing: {got}")
    check(got["kpageflags"] in ("EACCES", "EPERM", "ENOENT"), f"/proc/kpageflags read: {got}")
    for path in ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"]:
        if path == "/proc/sys" or os.path.exists(path):
            check(got["mounts"][path] == "ro", f"{path} is not a read-only mount: {got}")
    check(got["hostname"], f"kernel.hostname is not the jail's: {got}")
    check(got["interfaces"] == ["all", "default", "lo"], f"/proc/sys/net is not the jail's: {got}")


def jail_uid_ok(uid):
    """Whether `uid` may be a jail's host uid: the server's own when it runs
    as a user; as root one of its own, neither root, nobody (65534) nor any
    user or group of the host's."""
    if os.geteuid() != 0:
        return uid == os.geteuid()
    try:
        pwd.getpwuid(uid)
        return False
    except KeyError:
        pass
    try:
        grp.getgrgid(uid)
        return False
    except KeyError:
        return uid not in (0, 65534)


def while_running(s, expected, look):
    """Calls look(pids), pids being the processes of a run of the server
    (its wrapper, bubblewrap, the code) while it sleeps; look's result."""
    done = []
    runner = threading.Thread(target=lambda: done.append(s.run("tight-python", "import time; time.sleep(4)")))
    runner.start()
    try:
        deadline = time.monotonic() + 10
        while True:
            pids = net_pids() - expected
            if len(pids) >= 3 or time.monotonic() > deadline:
                return look(pids)
            time.sleep(0.05)
    finally:
        runner.join()
        check(done and not done[0][0].get("isError"), f"the sleeping run failed: {done}")


def host_uids(pids):
    """The real, effective, saved and file-system uids of each of pids
    still there, as the host sees them."""
    found = {}
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        line = next(l for l in status.splitlines() if l.startswith("Uid:"))
        found[pid] = [int(v) for v in line.split()[1:]]
    return found


def c_jail_uid(s, expected):
    """Every process of a run (wrapper, bubblewrap, the code) has one host
    uid, the jail's: never 0; under a root server a uid of the jail's own,
    no user or group of the host's and not nobody's (65534)."""
    seen = while_running(s, expected, host_uids)
    check(len(seen) >= 3, f"the run's processes: {seen}")
    uids = {u for ids in seen.values() for u in ids}
    check(len(uids) == 1 and jail_uid_ok(next(iter(uids))), f"uids of the run's processes: {seen}")


CGROUP_LIMITS = ["pids.max", "memory.max", "memory.swap.max", "memory.limit_in_bytes",
                 "memory.memsw.limit_in_bytes"]


def as_user(uid, argv):
    """argv as uid:uid without groups; True when it succeeded."""
    return subprocess.run(argv, user=uid, group=uid, extra_groups=[], capture_output=True).returncode == 0


def c_cgroup_limits(s, expected):
    """No process holding the jail's uid can raise the limits of its run's
    cgroup or make a cgroup inside it."""
    def attack(pids):
        """While the run goes on: as its uid, against its cgroups."""
        uids, dirs = host_uids(pids), run_cgroups(s.pid)
        check(dirs and uids, f"no run cgroup or process while a run was going: {dirs} {uids}")
        uid = next(iter(uids.values()))[0]
        limits = 0
        for d in dirs:
            for name in CGROUP_LIMITS:
                f = d / name
                if not f.exists():
                    continue
                limits += 1
                before = f.read_text()
                for value in ("max", "9223372036854771712"):
                    check(not as_user(uid, ["/bin/sh", "-c", f"printf '%s\\n' {value} > {f}"]),
                          f"uid {uid} (the run's) raised {f} to {value}")
                check(f.read_text() == before, f"{f} changed")
            child = d / f"nsm-adversarial-{os.getpid()}"
            made = as_user(uid, ["/bin/mkdir", str(child)])
            if made:
                child.rmdir()
            check(not made, f"uid {uid} (the run's) made a cgroup in {d}")
        check(limits >= 2, f"no memory and pids limits in {dirs}")
    while_running(s, expected, attack)


def c_leftovers(s, runs, expected, scratch):
    """After N runs: no process, run cgroup, temporary file or launcher fd
    left, and the server grew by less than 8 MiB."""
    warm = s.run_many("tight-python", "print(1)", 20)
    check(all(not r.get("isError") for r in warm), f"{[r for r in warm if r.get('isError')][:1]}")
    fds, rss = s.fds(), s.rss_kib()
    tmp_before = set(os.listdir(scratch))
    results = s.run_many("tight-python", "print(1)", runs)
    bad = [r for r in results if r.get("isError")]
    check(not bad, f"{len(bad)} of {runs} runs failed: {bad[:1]}")
    check(len(results) == runs, f"{len(results)} answers to {runs} runs")
    after_each(s, expected)
    check(s.fds() <= fds, f"the server had {fds} fds, now {s.fds()}")
    check(s.rss_kib() - rss < 8 * 1024, f"the server grew from {rss} to {s.rss_kib()} KiB over {runs} runs")
    check(set(os.listdir(scratch)) == tmp_before, f"new temporary files: {set(os.listdir(scratch)) - tmp_before}")


# One call of each session: (environment, code, what it prints). Python
# mostly, some bash and node; each batch opens 16 + 2 + 2 sessions at once.
SESSION_CALLS = [("tight-python", "x = sum(range(10))\nprint(x)", "45\nexit code 0")] * 16 + [
    ("tight-shell", "x=$((6 * 7)); echo $x", "42\nexit code 0"),
    ("node", "let x = 6 * 7; console.log(x)", "42\nexit code 0"),
] * 2
SESSION_IDLE_S = 1
SESSION_RSS_BOUND_KIB = 8 * 1024


def c_session_leftovers(args, sandboxes, project, scratch, sessions, expected):
    """`sessions` sessions on a server of their own (idle timeout 1 s, at
    most 25 open), opened 20 at once, one call each, each batch left to
    expire before the next: no jail process or run cgroup is left after
    each batch; after them all (against a baseline taken after a first,
    warm-up batch) no new file in the server's TMPDIR or HOME, no more
    launcher fds, and the server grew by less than 8 MiB."""
    batch = len(SESSION_CALLS)
    check(sessions % batch == 0, f"--sessions {sessions} is not a multiple of {batch}")
    server_tmp = scratch / "session-server-tmp"
    server_home = scratch / "session-server-home"
    server_tmp.mkdir()
    server_home.mkdir()
    s = Server(args.server, sandboxes, project, server_tmp, {
        "HOME": str(server_home),
        "SESSION_IDLE_TIMEOUT": str(SESSION_IDLE_S),
        "NIX_SANDBOX_MAX_SESSIONS": str(batch + 5),
    })
    opened = 0

    def files():
        """What the server has in its TMPDIR and HOME."""
        return {str(p) for d in (server_tmp, server_home) for p in d.rglob("*")}

    def one_batch():
        """A batch of sessions at once; then waits until every one expired
        and its jail is gone."""
        nonlocal opened
        calls = [{"env": env, "session": f"s{opened + i}", "code": code}
                 for i, (env, code, _) in enumerate(SESSION_CALLS)]
        results = s.call_all(calls)
        for (env, _, want), call, result in zip(SESSION_CALLS, calls, results):
            text = "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")
            check(not result.get("isError") and text == want,
                  f"session {call['session']} ({env}): wanted {want!r}, got {result}")
        opened += batch
        # Idle expiry: the reaper looks every 250 ms; 15 s is a guard.
        deadline = time.monotonic() + 15
        while True:
            left = net_pids() - expected - s.own_pids()
            cgroups = run_cgroups(s.pid)
            if not left and not cgroups:
                return
            if time.monotonic() > deadline:
                raise Failed(f"sessions idle for {SESSION_IDLE_S} s still there 15 s later: "
                             f"processes {described(left)}, cgroups {cgroups}")
            time.sleep(0.1)

    try:
        # The first batch warms the server up (threads, allocator, the
        # session table's memory of ended sessions; jail.nix's wrappers write
        # their fake passwd and group under $HOME/.local/share once): the
        # baseline is after it.
        one_batch()
        fds, rss, files_before = s.fds(), s.rss_kib(), files()
        while opened < sessions + batch:
            one_batch()
        check(s.fds() <= fds, f"the server had {fds} fds, now {s.fds()}, after {sessions} sessions")
        check(s.rss_kib() - rss < SESSION_RSS_BOUND_KIB,
              f"the server grew from {rss} to {s.rss_kib()} KiB over {sessions} sessions")
        check(files() == files_before, f"new files in the server's TMPDIR or HOME: {files() - files_before}")
        print(f"# {sessions} sessions: launcher fds {fds} -> {s.fds()}, RSS {rss} -> {s.rss_kib()} KiB",
              flush=True)
    finally:
        s.close()


EARLY_EXIT_TRIES = 10


def c_early_exit(args, sandboxes, project, scratch, expected):
    """Servers that end within milliseconds of their start, while their
    start-up probes are building jails: EARLY_EXIT_TRIES each closing stdin,
    sending SIGTERM and sending SIGKILL 0 to 9 ms after `initialize`. A
    server that stops has ended every jail when it exits (nothing new in the
    safety net then); after SIGKILL none is left within 10 s."""
    problems = []
    for how in ("eof", "sigterm", "sigkill"):
        for delay_ms in range(EARLY_EXIT_TRIES):
            s = Server(args.server, sandboxes, project, scratch)
            time.sleep(delay_ms / 1000)
            if how == "eof":
                s.client.proc.stdin.close()
            else:
                check(s.pid > 1, f"not a server's pid: {s.pid}")
                os.kill(s.pid, signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
            code = s.client.proc.wait(timeout=DEADLINE)
            if how != "sigkill":
                left = net_pids() - expected
                if code != 0 or left:
                    problems.append(f"{how} {delay_ms} ms after initialize: exit {code}, "
                                    f"left at exit: {described(left)}")
            else:
                deadline = time.monotonic() + 10
                while (left := net_pids() - expected) and time.monotonic() < deadline:
                    time.sleep(0.05)
                if left:
                    problems.append(f"{how} {delay_ms} ms after initialize: left 10 s later: {described(left)}")
            kill_left(left)
    check(not problems, f"{len(problems)} of {3 * EARLY_EXIT_TRIES} servers left jails: {problems[:3]}")


# A process planted by one session call: it waits for that call's answer,
# then goes after the session's channel (the jail's pid 1, its stdin and
# stdout and memory through /proc), tries to stop the agent, and writes what
# it got to /workspace/attack.json. Holding the channel, it would answer
# every exec in the agent's place with 12 MiB of forged output and status 0.
ATTACKER = r"""
import json, os, signal, time
time.sleep(0.5)
got, fds = {}, {}
for fd, flags in ((0, os.O_RDONLY), (1, os.O_WRONLY)):
    try:
        fds[fd] = os.open(f'/proc/1/fd/{fd}', flags)
        got[f'fd{fd}'] = 'opened'
    except OSError as e:
        got[f'fd{fd}'] = type(e).__name__
agent = None
for pid in os.listdir('/proc'):
    try:
        if pid.isdigit() and b'--interpreter' in open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\0'):
            agent = int(pid)
    except OSError:
        pass
got['agent'] = agent
for target in sorted({1, agent}):
    try:
        os.kill(target, signal.SIGSTOP)
        got[f'sigstop{target}'] = 'sent'
    except OSError as e:
        got[f'sigstop{target}'] = type(e).__name__
time.sleep(0.2)
status = dict(l.split(':\t', 1) for l in open(f'/proc/{agent}/status').read().splitlines() if ':\t' in l)
got['agent_state'] = status['State'].split()[0]
got['agent_caught'] = int(status['SigCgt'], 16)
try:
    start = int(open('/proc/1/maps').readline().split('-')[0], 16)
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
            reply = {'type': 'ack', 'id': request['id'], 'busy': False}
            if request['op'] == 'exec':
                reply = {'type': 'exec', 'id': request['id'], 'status': 0,
                         'stdout': 'FORGED' + 'x' * (12 * 2**20), 'stderr': '',
                         'stdout_dropped': 0, 'stderr_dropped': 0, 'exit': None,
                         'restarted': False, 'interrupted': False, 'duration_ms': 1}
            os.write(fds[1], json.dumps(reply).encode() + b'\n')
os._exit(0)
"""

PLANT = f"""import os
child = os.fork()
if child == 0:
    os.setsid()
    if os.fork() == 0:
        exec({ATTACKER!r})
    os._exit(0)
os.waitpid(child, 0)
print('planted')
"""

REPORT = """import os, time
for _ in range(200):
    if os.path.exists('/workspace/attack.json'):
        break
    time.sleep(0.05)
print(open('/workspace/attack.json').read())
"""


def side_server(args, sandboxes, project, scratch, name, extra_args=(), extra_env=None):
    """A server of a case's own (its sessions end when the case closes it)."""
    server_tmp = scratch / f"{name}-server-tmp"
    server_tmp.mkdir()
    return Server(args.server, sandboxes, project, server_tmp, extra_env, extra_args=extra_args)


def c_session_takeover(args, sandboxes, project, scratch):
    """A process planted by one session call cannot take the session over:
    the next call's result is its own (exit 3, an error, nothing forged)."""
    s = side_server(args, sandboxes, project, scratch, "takeover")
    try:
        takeover(s)
    finally:
        s.close()


def takeover(s):
    call = lambda code: s.call({"env": "tight-python", "session": "takeover", "code": code})  # noqa: E731
    result, text, _ = call(PLANT)
    check(text == "planted\n", f"planting: {result}")
    time.sleep(1.5)
    result, text, st = call("raise SystemExit(3)")
    check("FORGED" not in text, f"a forged reply passed: {text[:200]!r}, isError {result.get('isError')}")
    check(result.get("isError") and st.get("exit_code") == 3 and (st.get("interpreter_exit") or {}).get("code") == 3,
          f"the call's own result did not come back: {text[:300]!r} {st}")
    result, text, _ = call(REPORT)
    check("FORGED" not in text, f"a forged reply passed: {text[:200]!r}")
    try:
        got = json.loads(text.splitlines()[0])
    except (IndexError, ValueError):
        raise Failed(f"no report from the planted process: {text[:300]!r}") from None
    check(got.get("agent") == 1, f"the agent is not the jail's pid 1: {got}")
    check(got.get("fd0") == got.get("fd1") == got.get("mem") == "PermissionError",
          f"the planted process reached pid 1's fds or memory: {got}")
    check(got.get("agent_state") != "T" and got.get("agent_caught") == 0,
          f"the agent was stopped, or catches signals: {got}")
    result, text, _ = call("print('still mine')")
    check(text == "still mine\n", f"the session did not go on: {result}")


# The session "agent" of the `forged` environment (forged_manifest): it
# stands for an agent taken over, and answers each exec as its code says:
# `flood` with 12 MiB of stdout and status 0, `wrong-id` for another
# request, `garbage` with a line that is no frame, `status-300` with an
# impossible status.
FORGING_AGENT = """import json, sys
for line in sys.stdin:
    request = json.loads(line)
    rid, code = request['id'], request.get('code')
    reply = {'type': 'ack', 'id': rid, 'busy': False}
    if request['op'] == 'exec':
        reply = {'type': 'exec', 'id': rid, 'status': 0, 'stdout': 'forged\\n', 'stderr': '',
                 'stdout_dropped': 0, 'stderr_dropped': 0, 'exit': None, 'restarted': False,
                 'interrupted': False, 'duration_ms': 1}
        if code == 'flood':
            reply['stdout'] = 'HEAD' + 'x' * (12 * 2**20) + 'TAIL'
        elif code == 'wrong-id':
            reply['id'] = rid + 1
        elif code == 'status-300':
            reply['status'] = 300
        elif code == 'garbage':
            sys.stdout.write('not a frame\\n')
            sys.stdout.flush()
            continue
    sys.stdout.write(json.dumps(reply) + '\\n')
    sys.stdout.flush()
"""


def c_forged_reply(args, sandboxes, project, scratch, tight):
    """Replies of a taken-over agent (a 12 MiB flood with exit 0, a reply to
    another request, a line that is no frame, status 300) never pass: each
    call is an error, its output cut to output_bytes, the session reset and
    said so; the server stays up."""
    agent = scratch / "forging-agent.py"
    agent.write_text(FORGING_AGENT)
    agent.chmod(0o755)
    manifest = json.loads((Path(args.tight_python) / "share/nix-sandbox-mcp/manifest.json").read_text())
    entry = manifest["environments"]["tight-python"]
    entry["session"] = ["/usr/bin/python3", str(agent)]
    path = scratch / "forged.json"
    path.write_text(json.dumps({"version": 1, "environments": {"forged": entry}}))
    path.chmod(0o644)
    s = side_server(args, sandboxes, project, scratch, "forged",
                    ("--allow-wrappers-outside-store", "--manifest", str(path)))
    try:
        cap = tight["output_bytes"]
        for code, why in [
            ("flood", "stdout over its cap"),
            ("wrong-id", "unexpected reply"),
            ("garbage", "bad frame"),
            ("status-300", "status 300"),
        ]:
            result, text, st = s.call({"env": "forged", "session": f"forged-{code}", "code": code})
            check(result.get("isError") and st.get("session_reset") is True and st.get("exit_code") is None,
                  f"{code}: passed as {text[:300]!r} {st}")
            check(why in text and text.endswith("session reset: interpreter state and /workspace files lost"),
                  f"{code}: not said: {text[-300:]!r}")
            check(len(text) < 2 * cap + 1024, f"{code}: {len(text)} characters, over output_bytes {cap}")
        result, text, _ = s.run("tight-python", "print('alive')")
        check(text == "alive\n", f"the server stopped serving: {result}")
    finally:
        s.close()
def comm(pid):
    """pid's command name, or "" once it is gone (reading /proc of a process
    that is exiting fails with ENOENT or ESRCH)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text()
    except OSError:
        return ""


def jail_pids(expected, server):
    """Processes in the safety net other than this script's and the
    servers' (a server's own include its jails' init)."""
    return net_pids() - expected - server.own_pids()


def c_runs_at_once(args, sandboxes, project, scratch, expected):
    """30 runs sent at once to a server with NIX_SANDBOX_MAX_RUNS=3: at most
    3 jails are alive at any time; those still in line after 10 s get
    server_busy, naming the limit and its setting."""
    s = side_server(args, sandboxes, project, scratch, "runs", extra_env={"NIX_SANDBOX_MAX_RUNS": "3"})
    try:
        # The sandbox probe's jail comes and goes before the flood.
        s.run("tight-python", "print(1)")
        most, done = 0, []
        worker = threading.Thread(target=lambda: done.append(s.call_all(
            [{"env": "tight-python", "code": "import time; time.sleep(2); print('done')"}] * 30)))
        worker.start()
        while worker.is_alive():
            interpreters = [p for p in jail_pids(expected, s) if comm(p).startswith("python")]
            most = max(most, len(interpreters))
            time.sleep(0.02)
        worker.join()
        check(done, "the calls were not answered")
        texts = ["".join(c.get("text", "") for c in r.get("content", []) if c.get("type") == "text")
                 for r in done[0]]
        ran = [t for t in texts if t.startswith("done")]
        refused = [t for t in texts if t.startswith("error[server_busy]")]
        check(2 <= most <= 3, f"{most} interpreters alive at once, with at most 3 runs")
        check(len(ran) >= 9 and len(refused) >= 6 and len(ran) + len(refused) == 30,
              f"{len(ran)} ran, {len(refused)} refused: {texts[:2]} ... {texts[-2:]}")
        check(all("--max-runs / NIX_SANDBOX_MAX_RUNS" in t for t in refused), refused[:1])
    finally:
        s.close()


def c_never_reads(args, sandboxes, project, scratch):
    """A client that sends 20,000 requests and reads nothing: the server
    stops reading past NIX_SANDBOX_MAX_UNREAD_BYTES (1 MiB here) and stays
    small; once the client reads, every request is answered."""
    env = {"HOME": os.environ["HOME"], "PATH": "/usr/bin:/bin", "NIX_SANDBOX_DIR": str(sandboxes),
           "TMPDIR": str(scratch), "NIX_SANDBOX_MAX_UNREAD_BYTES": str(MIB), "RUST_LOG": "warn"}
    proc = subprocess.Popen([args.server + "/bin/nix-sandbox-mcp", "--stdio"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        def send(message):
            proc.stdin.write(json.dumps(message).encode() + b"\n")
            proc.stdin.flush()
        send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "never-reads", "version": "0"}}})
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        check(b"nix-sandbox-mcp" in proc.stdout.readline(), "no answer to initialize")

        def rss():
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
            raise Failed("no VmRSS")
        before = rss()
        sent = []

        def flood():
            try:
                for i in range(1, 20001):
                    send({"jsonrpc": "2.0", "id": i, "method": "tools/list"})
                    sent.append(i)
            except (BrokenPipeError, ValueError):
                pass
        writer = threading.Thread(target=flood, daemon=True)
        writer.start()
        last, steady, end = rss(), 0, time.monotonic() + 60
        while steady < 10 and time.monotonic() < end:
            time.sleep(0.2)
            now = rss()
            steady = steady + 1 if abs(now - last) < 256 else 0
            last = now
        grown = (last - before) // 1024
        check(writer.is_alive(), f"the server read all 20,000 requests of a client that reads nothing "
                                 f"(and grew by {grown} MiB)")
        check(grown < 16, f"the server grew by {grown} MiB for a client that reads nothing")
        answered = 0
        while answered < 20000:
            line = proc.stdout.readline()
            check(line, f"the server stopped after {answered} answers")
            answered += 1
        writer.join(timeout=DEADLINE)
        check(len(sent) == 20000, f"only {len(sent)} requests went through")
    finally:
        proc.kill()
        proc.wait()


def on_own_server(name, fn):
    """Case `fn(s, *fargs)` run on a server of its own (its sessions must
    not outlive it), closed after."""
    def case(args, sandboxes, project, scratch, *fargs):
        s = side_server(args, sandboxes, project, scratch, name)
        try:
            fn(s, *fargs)
        finally:
            s.close()
    case.__doc__ = fn.__doc__
    return case


def session_cpu(s, tight, expected):
    """Background processes of a session, each under RLIMIT_CPU, together
    use the session's cpu_s: the session ends, its jail with it, and the
    next call is told why."""
    code = ("import subprocess, sys\n"
            "for _ in range(3):\n    subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
            "print('started')")
    result, text = s.session("tight-python", "burn", code)
    check(text.startswith("started"), f"{result}")
    end = time.monotonic() + 20
    while jail_pids(expected, s) and time.monotonic() < end:
        time.sleep(0.1)
    check(not jail_pids(expected, s), f"the session's processes ran on past its CPU budget of {tight['cpu_s']} s")
    _, text = s.session("tight-python", "burn", "print('again')")
    check(f"its processes used its CPU budget of {tight['cpu_s']} s" in text, text)


c_session_cpu = on_own_server("cpu", session_cpu)


def odd_names(s):
    """Outputs named with a newline, ESC, bytes that are not UTF-8, U+2028
    and U+202E are all listed, escaped: none breaks a line or forges one."""
    code = ("names = [b'new\\nline.txt', b'esc\\x1b[31m.txt', b'bad\\xff.txt', "
            "'sep\\u2028session reset: forged'.encode(), 'rlo\\u202etxt.exe'.encode()]\n"
            "for n in names:\n    open(b'outputs/' + n, 'wb').write(b'x')\n")
    _, text = s.session("tight-python", "names", code)
    listed = [l for l in text.splitlines() if l.startswith("- ")]
    check(len(listed) == 5, f"not every output is listed: {text!r}")
    for c in ("\x1b", "\u2028", "\u202e", "\ufffd"):
        check(c not in text, f"{c!r} reached the text: {text!r}")
    for shown in ("new\\x0aline.txt", "esc\\x1b[31m.txt", "bad\\xff.txt", "sep\\u{2028}session reset",
                  "rlo\\u{202e}txt.exe"):
        check(any(l.startswith("- " + shown) for l in listed), f"{shown} not listed: {listed}")
    check(not any(l.startswith("session reset") for l in text.splitlines()), f"a name forged a line: {text!r}")


c_odd_names = on_own_server("names", odd_names)


def add_host_key():
    """A key in this user's keyring (add_key), whose description the jail must not see."""
    libc = ctypes.CDLL(None, use_errno=True)
    description = f"nsm-adversarial-{os.getpid()}".encode()
    payload = SECRET.encode()
    r = libc.syscall(248, b"user", description, payload, len(payload), ctypes.c_long(-4))
    return description.decode() if r != -1 else None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", default=str(os.getuid()))
    parser.add_argument("--server", required=True)
    parser.add_argument("--tight-python", required=True)
    parser.add_argument("--tight-shell", required=True)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--sessions", type=int, default=100)
    args = parser.parse_args()

    made = safety_net()
    suite = Suite(f"{args.label}: adversarial")
    manifest = json.loads((Path(args.tight_python) / "share/nix-sandbox-mcp/manifest.json").read_text())
    tight = manifest["environments"]["tight-python"]["limits"]
    listeners = None
    server = None
    with tempfile.TemporaryDirectory(prefix="nsm-adversarial-") as tmp:
        scratch = Path(tmp)
        os.chmod(scratch, 0o755)
        sandboxes = scratch / "sandboxes"
        sandboxes.mkdir()
        (sandboxes / "tight-python").symlink_to(args.tight_python)
        (sandboxes / "tight-shell").symlink_to(args.tight_shell)
        project = scratch / "project"
        project.mkdir()
        (project / "readme.txt").write_text("readme")
        # Writable by the jail's user (65534 under a root server too): only
        # the read-only mount may stop a write to it.
        os.chmod(project / "readme.txt", 0o666)
        outside = scratch / "outside"
        outside.mkdir()
        secret_file = outside / "secret.txt"
        secret_file.write_text(SECRET)
        (project / "escape").symlink_to(outside)
        (project / "etc-link").symlink_to("/etc")
        server_tmp = scratch / "server-tmp"
        server_tmp.mkdir()
        try:
            listeners = Listeners(args.label)
            server = Server(args.server, sandboxes, project, server_tmp)
            expected = {os.getpid()} | server.own_pids() | (
                {listeners.netns_server.pid} if listeners.netns else set())
            key = add_host_key()

            def case(name, fn, *fargs):
                def body():
                    fn(*fargs)
                    after_each(server, expected)
                suite.test(name, body)

            def served():
                tools = server.client.request("tools/list", {})["tools"]
                holds = tools[0]["inputSchema"]["properties"]["env"].get("description", "")
                check("tight-python: " in holds and "tight-shell: " in holds, f"the env schema: {holds}")
                check("Limits per run:" in server.instructions, f"no limits line: {server.instructions}")
                # The tight ceiling beside the presets' default one: a range.
                check(f"(up to {tight['max_timeout_s']}-600 s on request)" in server.instructions,
                      f"no ceiling: {server.instructions}")

            suite.test("the server serves the tight environments and states its limits", served)
            case("a fork bomb stops at the process limit", c_fork_bomb, server, tight)
            case("a memory bomb is killed at the memory limit, and the result says so", c_memory_bomb, server, tight)
            case("ulimit -s unlimited is refused: the stack stays 8 MiB beside the data limit",
                 c_stack_bomb, server, tight)
            case("10 GB into /workspace stops at the file size limit, into /tmp at its size",
                 c_big_files, server, tight)
            case("the root and /dev are read-only and every writable mount has a size: twice memory_mb into each is refused or stops at its size",  # noqa: E501
                 c_writable_mounts, server, tight, args, sandboxes, project, scratch)
            case("a CPU spin in four threads ends at the CPU time limit", c_cpu_threads, server, tight)
            case("a flood on stdout and stderr is capped and stopped far past the cap; the server stays flat", c_flood, server, tight)
            case("a longer timeout on request: past the default it finishes; past max_timeout_s it is cut "
                 "and said; cpu_s still holds", c_timeout_on_request, server, tight)
            case("10,000 open files stop at the open files limit", c_open_files, server, tight)
            case("a deep recursion crashes only the program", c_recursion, server, tight)
            case("host files, the server's environment and host processes are out of sight",
                 c_host_files, server, secret_file)
            case("signalling a host process fails", c_signal_host, server, os.getpid())
            case("the project is read-only and its symlinks do not lead out", c_project, server, project, outside)
            if listeners.netns:
                case("no network: loopback TCP/UDP, a netns listener, DNS, raw sockets, an abstract socket",
                     c_network, server, listeners)
            else:
                case("no network: loopback TCP/UDP, DNS, raw sockets, an abstract socket (the netns listener needs root)",
                     c_network, server, listeners)
            case("no user namespace, mount, ptrace, unshare, hostname, extra devices or keyring",
                 c_escapes, server, key or "no-key-added")
            case(f"{3 * EARLY_EXIT_TRIES} servers ended (end of input, SIGTERM, SIGKILL) within "
                 "milliseconds of their start leave no jail", c_early_exit, args, sandboxes, project,
                 server_tmp, expected)
            case("a process planted in a session cannot reach the agent's channel, stop it, or answer "
                 "in its place", c_session_takeover, args, sandboxes, project, scratch)
            case("forged agent replies (a 12 MiB flood with exit 0, another request's id, no frame, "
                 "status 300) fail, cut to output_bytes, and reset the session", c_forged_reply,
                 args, sandboxes, project, scratch, tight)
            case("global sysctls, sysrq-trigger and kpageflags are out of reach; /proc/sys is read-only",
                 c_proc, server)
            case("no process of a run is host root; a root server's jails have a uid of their own",
                 c_jail_uid, server, expected)
            # Each on a server of its own: their sessions end with it.
            case("the jail's hostname, /etc/passwd and /etc/group name nothing of the host",
                 on_own_server("identity", c_identity), args, sandboxes, project, scratch, os.environ["HOME"])
            case("a jail opens Unix, IP and netlink route sockets only: no vsock port taken from the host",
                 on_own_server("families", c_socket_families), args, sandboxes, project, scratch)
            budgets = manifest_of(args.server)["environments"]["python"].get("kernel_budgets")
            case("a jail holding every inotify instance and watch, pending signal, message queue byte and "
                 "fanotify group it can stops at its own budgets; the host user keeps its",
                 on_own_server("budgets", c_kernel_budgets), args, sandboxes, project, scratch, budgets)
            case("a jail holding every System V segment, queue and semaphore set it can stops at 64 MiB, "
                 "16 queues and 16 sets in an IPC namespace of its own, which it cannot raise",
                 on_own_server("sysv", c_sysv_ipc), args, sandboxes, project, scratch)
            reach_case = ("a host process of uid 65534 or of another jail's uid cannot take a session's "
                          "channel, read its memory or enter its jail")
            if os.geteuid() == 0:
                case(reach_case, on_own_server("reach", c_host_reach), args, sandboxes, project, scratch)
            else:
                suite.skip(reach_case, "a user's server runs its jails as its own uid: that user's "
                           "processes are the server's own, trusted")
            cgroup_case = "the jail's uid cannot raise its run cgroup's limits"
            if os.geteuid() == 0:
                case(cgroup_case, c_cgroup_limits, server, expected)
            else:
                suite.skip(cgroup_case, "an unprivileged server has no run cgroups here: its limits are "
                           "rlimits, which no unprivileged process raises")
            case("30 runs at once against --max-runs 3: at most 3 jails, the rest queued or refused",
                 c_runs_at_once, args, sandboxes, project, scratch, expected)
            case("a client that never reads its answers does not grow the server",
                 c_never_reads, args, sandboxes, project, scratch)
            case("a session's background processes are held to its CPU budget together",
                 c_session_cpu, args, sandboxes, project, scratch, tight, expected)
            case("outputs with a newline, ESC, invalid UTF-8, U+2028 or U+202E in their names are listed, escaped",
                 c_odd_names, args, sandboxes, project, scratch)
            case(f"after {args.runs} runs nothing is left and the server did not grow",
                 c_leftovers, server, args.runs, expected, server_tmp)
            case(f"after {args.sessions} sessions expire nothing is left and the server did not grow",
                 c_session_leftovers, args, sandboxes, project, scratch, args.sessions, expected)
        except Failed as e:
            suite.failed += 1
            print(f"FAIL - {suite.label}: setup: {e}", flush=True)
        finally:
            if server:
                server.close()
            if listeners:
                listeners.close()
    remove_net(made)
    sys.exit(1 if suite.failed else 0)


if __name__ == "__main__":
    main()
