"""What the VM tests (checks/vm/tests/*.py) share, inside the guest: the
harness's MCP clients (e2e.py's McpClient over stdio, served.py's HttpMcp
over streamable HTTP, copied beside this file by checks/vm/run), `check`
and `Failed`, and `Vm`: the run's config and small helpers for systemd."""

import pwd
import subprocess
import time
from pathlib import Path

from e2e import DEADLINE, Failed, McpClient, call_run, check, env_names, facts  # noqa: F401
from served import HttpMcp  # noqa: F401


class Skipped(Exception):
    """Raised by a test that cannot run here, with the reason."""


def info(text):
    """A fact the test found (not a pass or a failure), on the results channel."""
    for line in str(text).splitlines() or [""]:
        print(f"info - vm: {line}", flush=True)


def reprobed(call, label):
    """call() -> (result, text) of a `run`, made once more when its
    environment's start-up probe timed out. The server probes every
    environment at once when it starts; on the guest's emulated CPUs a slow
    starter (node) can miss the probe's 10 s, and the server then answers
    that environment's next call `sandbox_unavailable` once and probes it
    again at the call after (launcher/src/probe.rs). A probe made while
    the guest's 9p store is still cold can miss it again, so it is called
    up to three times. Every retry is said in an info line, never silent;
    a probe that times out a third time is the result."""
    result, text = call()
    for _ in range(2):
        if not (result.get("isError") and "sandbox_unavailable" in text and "did not finish within" in text):
            break
        info(f"{label}: the start-up probe timed out; called again: {text.strip()}")
        result, text = call()
    return result, text


# Attacks on a run's memory and process limits (python, memory_mb 1024,
# pids 32): each must end in the run's result naming that limit as a
# kernel fact (its cgroup's counters).
FOUR_BY_400_MIB = (
    "import os, time\n"
    "kids = []\n"
    "for i in range(4):\n"
    "    pid = os.fork()\n"
    "    if pid == 0:\n"
    "        block = bytearray(b'\\x01') * (400 << 20)\n"
    "        time.sleep(8)\n"
    "        os._exit(0)\n"
    "    kids.append(pid)\n"
    "print('statuses', [os.waitpid(p, 0)[1] for p in kids])\n"
)

TMPFS_THEN_900_MIB = (
    "chunk = b'\\x01' * (50 << 20)\n"
    "for path in ['/workspace/fill', '/tmp/fill']:\n"
    "    with open(path, 'wb') as f:\n"
    "        for _ in range(5):\n"
    "            f.write(chunk)\n"
    "del chunk\n"
    "print('written', flush=True)\n"
    "block = bytearray(b'\\x01') * (900 << 20)\n"
    "print('allocated', len(block) >> 20)\n"
)

FORK_BOMB = (
    "import os, time\n"
    "n = 0\n"
    "try:\n"
    "    while n < 10000:\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(3)\n"
    "            os._exit(0)\n"
    "        n += 1\n"
    "except OSError as e:\n"
    "    print('refused after', n, e.strerror)\n"
)


def call_session(client, session, code, start=None, env="shell"):
    """A `run` of `code` in `session` of `env`, started from the checkpoint
    or session `start` when given: (result, its text)."""
    args = {"env": env, "session": session, "code": code}
    if start:
        args["from"] = start
    result = client.request("tools/call", {"name": "run", "arguments": args})
    return result, "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")


def stopped_by(call, limit, label):
    """call() -> (result, text) of a run; its result must say the cgroup's
    `limit` stopped it (a kernel fact, not a guess from its messages).
    (text, facts)."""
    result, text = reprobed(call, label)
    fact = facts(result)
    info(f"{label}: {text.strip()[-300:]!r}, facts {fact}")
    check(fact.get("limit") == {"name": limit, "certain": True}, f"not stopped by the {limit} limit: {text!r} {fact}")
    return text, fact


class Vm:
    def __init__(self, config):
        # config.json (checks/vm/run): store paths of what was built for the guest.
        self.config = config
        self.state = {}  # what one test file's setup leaves for its tests

    @staticmethod
    def sh(argv, check_ok=True, timeout=DEADLINE, **kwargs):
        """Runs argv, output captured as text; a non-zero exit is Failed
        (with its output) unless check_ok is False."""
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
        if check_ok and proc.returncode != 0:
            raise Failed(f"{' '.join(argv)} exited {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-800:]}")
        return proc

    def journal(self, unit, lines=30):
        """The last lines of this boot's journal about a system unit: what
        systemd said of it and what it logged."""
        argv = ["journalctl", "-b", "--no-pager", "-o", "cat", "-n", str(lines),
                f"UNIT={unit}", "+", f"_SYSTEMD_UNIT={unit}"]
        return self.sh(argv, check_ok=False).stdout.strip()

    @classmethod
    def linger(cls, user):
        """Makes `user` (an account) linger and waits until her systemd user
        manager is up and its bus is there; her uid."""
        uid = pwd.getpwnam(user).pw_uid
        cls.sh(["loginctl", "enable-linger", user])
        manager = f"user@{uid}.service"
        cls.wait_until(f"{manager} active", lambda: cls.sh(
            ["systemctl", "is-active", manager], check_ok=False).stdout.strip() == "active", timeout=60)
        cls.wait_until(f"/run/user/{uid}/bus", lambda: Path(f"/run/user/{uid}/bus").exists(), timeout=30)
        return uid

    @staticmethod
    def wait_until(what, predicate, timeout=60, pause=0.1):
        """Polls predicate until it returns something true; returns that.
        Failed, naming `what`, after timeout seconds."""
        deadline = time.monotonic() + timeout
        while True:
            got = predicate()
            if got:
                return got
            if time.monotonic() > deadline:
                raise Failed(f"{what}: not within {timeout} s")
            time.sleep(pause)

    @staticmethod
    def cgroup_of(pid):
        """A process's cgroup v2 path (/proc/PID/cgroup's `0::` line)."""
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:]
        raise Failed(f"process {pid} has no cgroup v2 line: {Path(f'/proc/{pid}/cgroup').read_text()!r}")

    @staticmethod
    def descendants(pid):
        """The pids below pid in the process tree (children first)."""
        children = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
        found, queue = [], [pid]
        while queue:
            for child in sorted(children.get(queue.pop(0), [])):
                found.append(child)
                queue.append(child)
        return found

    @staticmethod
    def cgroup_files(path, names=("cgroup.controllers", "cgroup.subtree_control")):
        """name -> content of a cgroup's files (missing ones left out)."""
        directory = Path("/sys/fs/cgroup") / path.lstrip("/")
        got = {}
        for name in names:
            try:
                got[name] = (directory / name).read_text().strip()
            except OSError:
                pass
        return got

    @staticmethod
    def left_cgroups(path, prefix="run-"):
        """The cgroups named prefix* in the cgroup at path that hold no
        process (a run's or an ended session's, not removed)."""
        directory = Path("/sys/fs/cgroup") / path.lstrip("/")
        left = []
        for d in directory.glob(f"{prefix}*"):
            try:
                events = (d / "cgroup.events").read_text()
            except OSError:
                continue  # removed since the listing: not left
            if "populated 0" in events:
                left.append(d.name)
        return sorted(left)

    @staticmethod
    def command_line(pid):
        """The command line of pid, or "" once it has ended: a process
        listed a moment ago may exit before it is read."""
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return ""
        return raw.replace(b"\0", b" ").decode(errors="replace").strip()

    @staticmethod
    def as_user(uid, argv, env):
        """argv run as uid (its groups too) with exactly env."""
        return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--init-groups", "env", "-i",
                *[f"{k}={v}" for k, v in env.items()], *argv]
