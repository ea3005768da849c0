#!/usr/bin/env python3
"""Run an MCP stdio server as our child, then check it left no orphan.

    subreaper_wrapper.py REPORT.json -- SERVER ARGV...

The wrapper makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER),
so any process the server leaves behind (a jail whose parent died) is
reparented to the wrapper instead of to init.  It spawns the server with its
own stdin and stdout (the MCP client talks straight to the server), sends the
server's stderr to REPORT.json.stderr, forwards SIGTERM, SIGINT and SIGHUP to
the server, and waits for it.  Once the server has exited it waits a short
grace period for what the server killed to die, then lists the processes
still reparented to it: those are orphans.  Each orphan (a direct child of
this wrapper, so certainly its descendant, and never pid <= 1) is SIGKILLed
and reaped.  The report (written atomically, then the wrapper exits with the
server's status):

    {"server_pid", "exit_code", "signal", "forwarded": [signals],
     "orphans": [{"pid", "cmdline", "state"}], "reaped_late": [...], "grace_s"}

Python 3.11 standard library only.
"""

import ctypes
import json
import os
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 2.0


def children_of(pid):
    """[(pid, state, cmdline)] of the processes whose parent is `pid`."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        # pid (comm) state ppid ...; comm may hold spaces and parentheses.
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) < 2 or int(rest[1]) != pid:
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            cmd = ""
        out.append((int(name), rest[0], cmd))
    return out


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        print("usage: subreaper_wrapper.py REPORT.json -- ARGV...", file=sys.stderr)
        return 2
    report_path, argv = sys.argv[1], sys.argv[3:]
    me = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(f"subreaper_wrapper: prctl failed: errno {ctypes.get_errno()}", file=sys.stderr)
        return 2

    forwarded = []
    server = None

    def forward(signum, _frame):
        forwarded.append(signum)
        if server is not None and server.pid > 1 and server.returncode is None:
            try:
                server.send_signal(signum)
            except ProcessLookupError:
                pass

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, forward)

    with open(report_path + ".stderr", "wb") as err:
        server = subprocess.Popen(argv, stdin=0, stdout=1, stderr=err)
        while True:
            try:
                server.wait()
                break
            except InterruptedError:
                continue
    rc = server.returncode

    # Grace: what the server killed on its way out may still be dying.
    deadline = time.monotonic() + GRACE_S
    reaped_late = []
    while True:
        kids = children_of(me)
        for pid, state, cmd in kids:
            if state == "Z" and pid > 1:
                try:
                    os.waitpid(pid, os.WNOHANG)
                    reaped_late.append({"pid": pid, "cmdline": cmd})
                except ChildProcessError:
                    pass
        alive = [k for k in kids if k[1] != "Z"]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.05)

    orphans = []
    for pid, state, cmd in children_of(me):
        if state == "Z" or pid <= 1 or pid == me:
            continue
        orphans.append({"pid": pid, "cmdline": cmd, "state": state})
        # A direct child of this wrapper: our own descendant.
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for o in orphans:
        try:
            os.waitpid(o["pid"], 0)
        except ChildProcessError:
            pass

    report = {
        "server_pid": server.pid,
        "exit_code": rc if rc >= 0 else None,
        "signal": -rc if rc < 0 else None,
        "forwarded": forwarded,
        "orphans": orphans,
        "reaped_late": reaped_late,
        "grace_s": GRACE_S,
    }
    tmp = report_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f)
    os.rename(tmp, report_path)
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
