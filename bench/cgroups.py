"""Per-run cgroups like the launcher's (launcher/src/wrapper/cgroup.rs), for
one diagnostic baseline: the wrapper run directly *with* a run cgroup, so
the report can tell the cgroup's share of the launcher's overhead from the
rest.

- cgroup v1 (hierarchies writable by this user: root here): a parent per
  controller under this process' own cgroups, one `run-N` in each per run;
  the wrapper is moved in between fork and exec, as the launcher does there.
- cgroup v2 (this process' own cgroup writable and offering the memory and
  pids controllers: a scope with `Delegate=yes`, as bench/vm.py starts it in
  the guest): this process moves into a leaf `bench` of its cgroup (a cgroup
  whose children get controllers holds no process; the servers it starts
  then ask systemd for scopes of their own, as under any client), enables
  memory and pids there and makes one `run-N` beside the leaf per run; the
  wrapper is created in it by clone3(CLONE_INTO_CGROUP), as the launcher
  creates it on v2.

`setup()` says why there are none elsewhere, and the benchmark says so.
"""

import ctypes
import os
import selectors
import signal
import struct
import subprocess
import time
from pathlib import Path

CONTROLLERS = ("pids", "memory", "cpuacct")
SYS_CLONE3, CLONE_INTO_CGROUP = 435, 0x200000000


def setup():
    """(run cgroups, None), or (None, why there are none here). On cgroup
    v2 this moves the calling process into a leaf of its cgroup: call it
    before starting anything that should be in a cgroup of its own."""
    own = Path("/proc/self/cgroup").read_text().splitlines()
    if own == [own[0]] and own[0].startswith("0::"):
        return RunCgroupsV2.setup(own[0][3:])
    return RunCgroups.setup(own)


def wait_exit(pid, deadline):
    """The exit status of child `pid` (ours); kills it past `deadline`
    (time.monotonic()) and raises TimeoutError."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            if pid > 1:
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise TimeoutError(f"child {pid} did not end in time")
        time.sleep(0.0005)


class RunCgroups:
    """cgroup v1: one parent per controller, the wrapper moved in."""

    version = "v1"

    def __init__(self, parents):
        self.parents = parents
        self.next = 0

    @classmethod
    def setup(cls, own_lines):
        """One parent per controller under this process' own cgroups; why
        not, when a controller's v1 hierarchy is missing or not writable."""
        own = {}
        for line in own_lines:
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(","):
                own[c] = path
        mounts = {}
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            before, after = line.split(" - ", 1)
            fstype, _, options = after.split(" ", 2)
            if fstype == "cgroup":
                for c in options.split(","):
                    mounts[c] = before.split()[4]
        parents = []
        for c in CONTROLLERS:
            parent = Path(mounts.get(c, "") + own.get(c, "")) / f"nsm-bench.{os.getpid()}"
            try:
                if c not in own or c not in mounts:
                    raise FileNotFoundError(f"no v1 {c} hierarchy")
                remove_stale(parent.parent)
                parent.mkdir()
            except OSError as e:
                for made in parents:
                    made.rmdir()
                return None, f"no writable cgroup v1 here ({e})"
            parents.append(parent)
        return cls(parents), None

    def create(self, limits):
        """The directories of the next run (NIX_SANDBOX_CGROUP's value is
        their paths joined by ':'), holding the memory and process limits
        of `limits` (a manifest's), as the launcher writes them."""
        self.next += 1
        dirs = [parent / f"run-{self.next}" for parent in self.parents]
        for d in dirs:
            d.mkdir()
            write_limits(d, limits)
        return dirs

    def run(self, dirs, argv, stdin, env, timeout):
        """argv with `stdin` moved into `dirs` between fork and exec, as the
        launcher moves a wrapper (the wrapper checks it is there):
        (exit status, stdout, stderr)."""
        def move():
            for d in dirs:
                with open(d / "cgroup.procs", "w") as procs:
                    procs.write("0")
        proc = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout, env=env, preexec_fn=move)
        return proc.returncode, proc.stdout, proc.stderr

    @staticmethod
    def remove(dirs):
        remove_dirs(dirs)

    def teardown(self):
        for parent in self.parents:
            try:
                parent.rmdir()
            except OSError:
                pass

    def start_costs(self, n, gap=0.05):
        """{what: seconds of each of `n` tries}: writing a fresh process'
        pid into a fresh run cgroup's cgroup.procs (the first controller's
        hierarchy), `gap` seconds after the previous one: the kernel's cost
        of moving a process, which a run pays only when the launcher cannot
        fork its wrapper inside the run's cgroups (its forking thread steps
        into them through `tasks` first, which takes no global lock). (A
        move costs an RCU grace period, about 13 ms on a default kernel,
        unless another came within about 20 ms: runs seconds apart, as a
        model makes them, would pay it every time.)"""
        return {"move (write to cgroup.procs)": move_times(self, n, gap)}


class RunCgroupsV2:
    """cgroup v2: runs beside this process' leaf, wrappers created in them."""

    version = "v2"

    def __init__(self, parent):
        self.parents = [parent]
        self.next = 0
        # PyDLL: the GIL stays held across clone3, so the child (a copy of
        # this thread alone) owns it.
        self.libc = ctypes.PyDLL(None, use_errno=True)
        self.libc.syscall.restype = ctypes.c_long
        self.libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]

    @classmethod
    def setup(cls, path):
        base = Path("/sys/fs/cgroup") / path.lstrip("/")
        try:
            offered = (base / "cgroup.controllers").read_text().split()
        except OSError as e:
            return None, f"cgroup v2, but {base} cannot be read ({e})"
        if not {"memory", "pids"} <= set(offered):
            return None, f"cgroup v2, but {base} offers [{' '.join(offered)}], not memory and pids"
        if not all(os.access(base / f, os.W_OK) for f in ("cgroup.procs", "cgroup.subtree_control")):
            return None, f"cgroup v2, but {base} is not writable by this user (not a delegated cgroup)"
        leaf = base / "bench"
        try:
            leaf.mkdir(exist_ok=True)
            (leaf / "cgroup.procs").write_text(str(os.getpid()))
        except OSError as e:
            return None, f"cgroup v2, but this process cannot move into {leaf} ({e})"
        try:
            (base / "cgroup.subtree_control").write_text("+memory +pids")
        except OSError as e:
            # Back where it was: others share that cgroup.
            (base / "cgroup.procs").write_text(str(os.getpid()))
            leaf.rmdir()
            return None, f"cgroup v2, but memory and pids cannot be enabled in {base} (other processes in it?): {e}"
        return cls(base), None

    def create(self, limits):
        self.next += 1
        run = self.parents[0] / f"run-{os.getpid()}-{self.next}"
        run.mkdir()
        write_limits(run, limits)
        return [run]

    def clone_into(self, directory):
        """clone3(CLONE_INTO_CGROUP): like fork, the child created in the
        cgroup `directory`. The child's pid in the parent, 0 in the child."""
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        args = struct.pack("11Q", CLONE_INTO_CGROUP, 0, 0, 0, signal.SIGCHLD, 0, 0, 0, 0, 0, fd)
        pid = self.libc.syscall(SYS_CLONE3, ctypes.create_string_buffer(args), len(args))
        if pid == 0:
            return 0
        os.close(fd)
        if pid < 0:
            raise OSError(ctypes.get_errno(), f"clone3 into {directory}: {os.strerror(ctypes.get_errno())}")
        return pid

    def run(self, dirs, argv, stdin, env, timeout):
        """argv with `stdin`, created in dirs[0] by clone3, as the launcher
        creates a wrapper on v2: (exit status, stdout, stderr)."""
        deadline = time.monotonic() + timeout
        child_in, to_child = os.pipe()
        from_out, child_out = os.pipe()
        from_err, child_err = os.pipe()
        pid = self.clone_into(dirs[0])
        if pid == 0:
            # The child: only what exec needs (a copy of one thread of a
            # threaded process; it never returns to Python's loop).
            try:
                self.libc.signal(signal.SIGPIPE, None)  # SIG_DFL, as subprocess restores it
                os.dup2(child_in, 0)
                os.dup2(child_out, 1)
                os.dup2(child_err, 2)
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        for fd in (child_in, child_out, child_err):
            os.close(fd)
        out = {from_out: b"", from_err: b""}
        try:
            os.write(to_child, stdin)
            os.close(to_child)
            with selectors.DefaultSelector() as sel:
                for fd in out:
                    sel.register(fd, selectors.EVENT_READ)
                while sel.get_map():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    for key, _ in sel.select(left):
                        chunk = os.read(key.fd, 65536)
                        if chunk:
                            out[key.fd] += chunk
                        else:
                            sel.unregister(key.fd)
        finally:
            for fd in out:
                os.close(fd)
        return wait_exit(pid, deadline), out[from_out], out[from_err]

    @staticmethod
    def remove(dirs):
        remove_dirs(dirs)

    def teardown(self):
        """Runs' cgroups are removed by their runs; the leaf stays (this
        process is in it)."""

    def start_costs(self, n, gap=0.05):
        """{what: seconds of each of `n` tries, `gap` seconds apart}: a
        process started and reaped three ways: created in a fresh run cgroup
        by clone3(CLONE_INTO_CGROUP) (what the launcher does on v2), forked
        and moving itself into one through cgroup.procs (what it does on
        v1), a plain fork (no cgroup); and the move alone, a sleeping
        process' pid written into a fresh cgroup's cgroup.procs."""
        def cloned(dirs):
            pid = self.clone_into(dirs[0])
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)

        def moved(dirs):
            pid = os.fork()
            if pid == 0:
                try:
                    with open(dirs[0] / "cgroup.procs", "w") as procs:
                        procs.write("0")
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)

        def forked(dirs):
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)

        costs = {}
        for what, start in [("clone3 into the cgroup, reaped", cloned), ("fork + move, reaped", moved),
                            ("plain fork, reaped", forked)]:
            times = []
            for _ in range(n):
                dirs = self.create({"memory_mb": 1024, "pids": 256})
                try:
                    time.sleep(gap)
                    t0 = time.perf_counter()
                    start(dirs)
                    times.append(time.perf_counter() - t0)
                finally:
                    self.remove(dirs)
            costs[what] = times
        costs["move (write to cgroup.procs)"] = move_times(self, n, gap)
        return costs


def write_limits(directory, limits):
    """The memory and process limits of `limits` (a manifest's) in a run's
    cgroup, as the launcher writes them (v2: memory.max, no swap; v1:
    memory.limit_in_bytes, memory+swap the same)."""
    memory = str(limits["memory_mb"] << 20)
    for name, value in [("pids.max", str(limits["pids"])), ("memory.max", memory), ("memory.swap.max", "0"),
                        ("memory.limit_in_bytes", memory), ("memory.memsw.limit_in_bytes", memory)]:
        if (directory / name).exists():
            (directory / name).write_text(value)


def move_times(cgroups, n, gap):
    """Seconds each of `n` writes of a sleeping process' pid into a fresh
    run cgroup's cgroup.procs took, `gap` seconds after the previous one."""
    times = []
    for _ in range(n):
        dirs = cgroups.create({"memory_mb": 1024, "pids": 256})
        child = subprocess.Popen(["sleep", "5"])
        try:
            time.sleep(gap)
            t0 = time.perf_counter()
            (dirs[0] / "cgroup.procs").write_text(str(child.pid))
            times.append(time.perf_counter() - t0)
        finally:
            child.kill()
            child.wait()
            remove_dirs(dirs)
    return times


def remove_dirs(dirs):
    """Removes a run's directories once its processes are gone (as the
    launcher does: retry while busy, at most 5 s)."""
    deadline = time.monotonic() + 5
    for d in dirs:
        while True:
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.0005)


def remove_stale(where):
    """Removes what an interrupted benchmark left in `where` (its pid gone)."""
    for stale in where.glob("nsm-bench.*"):
        pid = stale.name.split(".", 1)[1]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        try:
            for run in stale.glob("run-*"):
                run.rmdir()
            stale.rmdir()
        except OSError:
            pass
