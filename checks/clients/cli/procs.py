"""Child processes of the suite: each in a process group (a session) of its
own, killed and reaped at the end, also on failure.

Only process groups this module created are ever signalled (os.killpg with a
pgid > 1 that is the pid of a child we spawned with start_new_session, never
our own group), and single pids only when they are verified children of this
process (the suite is a child subreaper, so orphans of its descendants come
back to it).
"""

import ctypes
import os
import signal
import subprocess
import threading
import time

PR_SET_CHILD_SUBREAPER = 36

_lock = threading.Lock()
_groups = []  # Popen objects started with start_new_session=True
_stopping = False


def become_subreaper():
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def spawn(argv, **kw):
    """Popen in a new session (its own process group), remembered for cleanup."""
    kw.setdefault("stdin", subprocess.DEVNULL)
    with _lock:
        if _stopping:
            raise RuntimeError("the suite is stopping: no new process")
        p = subprocess.Popen(argv, start_new_session=True, **kw)
        _groups.append(p)
    return p


def _proc_stat(pid):
    """(state, ppid, pgid) of a pid, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    rest = s[s.rfind(")") + 2:].split()
    return rest[0], int(rest[1]), int(rest[2])


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def group_members(pgid):
    """Live (non-zombie) pids in process group `pgid`."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _proc_stat(int(name))
            if st and st[2] == pgid and st[0] != "Z":
                out.append(int(name))
    return out


def _safe_pgid(p):
    pgid = p.pid
    return pgid if pgid > 1 and pgid != os.getpgrp() else None


def signal_group(p, sig):
    pgid = _safe_pgid(p)
    if pgid is None:
        return
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_group(p, term_wait=3.0):
    """SIGTERM the group we created for `p`, then SIGKILL, and reap `p`."""
    if _safe_pgid(p) is None:
        return
    if p.poll() is None or group_members(p.pid):
        signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + term_wait
        while time.monotonic() < deadline and (p.poll() is None or group_members(p.pid)):
            time.sleep(0.05)
        signal_group(p, signal.SIGKILL)
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def wait_group_empty(pgid, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not group_members(pgid):
            return []
        time.sleep(0.05)
    return group_members(pgid)


def reap_orphans():
    """Kill and reap processes reparented to us (we are a subreaper) that are
    not children we spawned.  Returns their command lines."""
    me = os.getpid()
    with _lock:
        ours = {p.pid for p in _groups}
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        st = _proc_stat(pid)
        if not st or st[1] != me or pid in ours or pid <= 1:
            continue
        if st[0] != "Z":
            found.append(cmdline(pid) or f"pid {pid}")
            try:
                os.kill(pid, signal.SIGKILL)  # our direct child: our descendant
            except ProcessLookupError:
                pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return found


def reap_zombies():
    """Reap exited processes reparented to us (jail helpers whose parent
    died): zombies only, and never a child subprocess manages."""
    me = os.getpid()
    with _lock:
        ours = {p.pid for p in _groups}
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in ours:
                continue
            st = _proc_stat(int(name))
            if st and st[1] == me and st[0] == "Z":
                try:
                    os.waitpid(int(name), os.WNOHANG)
                except ChildProcessError:
                    pass


def start_zombie_reaper(interval=1.0):
    def loop():
        while not _stopping:
            reap_zombies()
            time.sleep(interval)

    threading.Thread(target=loop, daemon=True).start()


def cleanup_all():
    global _stopping
    with _lock:
        _stopping = True
        groups = list(_groups)
    for p in groups:
        stop_group(p, term_wait=1.0)
    return reap_orphans()
