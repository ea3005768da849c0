"""Memory of a process and its descendants, read from /proc (Linux)."""

import ctypes
import os
import time


def status_kib(pid, field):
    """A `kB` field of /proc/PID/status (VmRSS, VmHWM...), in KiB; None if gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def cpu_seconds(pid):
    """User and system CPU time of process `pid` (all its threads, not its
    children), in seconds; None if gone. Read from the process's CPU-time
    clock (clock_getcpuclockid's, which Python's time module does not
    offer: Linux's MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)), exact to the
    nanosecond, where /proc/PID/stat counts clock ticks: 10 ms, a tenth of
    what a step's stream costs the server."""
    clock = ctypes.c_int32((~pid << 3) | 2).value
    try:
        return time.clock_gettime(clock)
    except OSError:
        return None


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _stats():
    """pid -> (parent pid, command name) of every process visible in /proc."""
    stats = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name (field 2) is in parentheses and may hold spaces.
        fields = stat[stat.rindex(")") + 2:].split()
        stats[int(entry)] = (int(fields[1]), stat[stat.index("(") + 1:stat.rindex(")")])
    return stats


def descendants(pid):
    """Every process under `pid` (not itself), parents before children."""
    children = {}
    for child, (parent, _) in _stats().items():
        children.setdefault(parent, []).append(child)
    found, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop(0)
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def jails(pid):
    """The processes under server `pid` but its jails' init (pid 1 of the
    pid namespace its jails live in, a child that lives as long as the
    server): its wrappers and jails."""
    stats = _stats()
    return [p for p in descendants(pid) if not (stats.get(p) == (pid, "jails-init"))]



def comm(pid):
    """The command name of process `pid`; None if gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None
