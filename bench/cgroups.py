"""Per-run cgroups like the launcher's (launcher/src/wrapper/cgroup.rs,
cgroup v1), for one diagnostic baseline: the wrapper run directly *with* a
run cgroup, so the report can tell the cgroup's share of the launcher's
overhead from the rest. Only cgroup v1 hierarchies writable by this user (root here); None
elsewhere, and the benchmark says so.
"""

import os
import subprocess
import time
from pathlib import Path

CONTROLLERS = ("pids", "memory", "cpuacct")


class RunCgroups:
    def __init__(self, parents):
        self.parents = parents
        self.next = 0

    @classmethod
    def setup(cls):
        """One parent per controller under this process' own cgroups; None
        when a controller's v1 hierarchy is missing or not writable."""
        own = {}
        for line in Path("/proc/self/cgroup").read_text().splitlines():
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
                    raise FileNotFoundError(c)
                remove_stale(parent.parent)
                parent.mkdir()
            except OSError:
                for made in parents:
                    made.rmdir()
                return None
            parents.append(parent)
        return cls(parents)

    def create(self, limits):
        """The directories of the next run (NIX_SANDBOX_CGROUP's value is
        their paths joined by ':'), holding the memory and process limits
        of `limits` (a manifest's), as the launcher writes them."""
        self.next += 1
        dirs = [parent / f"run-{self.next}" for parent in self.parents]
        memory = str(limits["memory_mb"] << 20)
        for d in dirs:
            d.mkdir()
            for name, value in [("pids.max", str(limits["pids"])), ("memory.limit_in_bytes", memory),
                                ("memory.memsw.limit_in_bytes", memory)]:
                if (d / name).exists():
                    (d / name).write_text(value)
        return dirs

    @staticmethod
    def enter(dirs):
        """A preexec_fn that moves the child into `dirs` before it execs,
        as the launcher moves a wrapper (the wrapper checks it is there)."""
        def move():
            for d in dirs:
                with open(d / "cgroup.procs", "w") as procs:
                    procs.write("0")
        return move

    @staticmethod
    def remove(dirs):
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

    def teardown(self):
        for parent in self.parents:
            try:
                parent.rmdir()
            except OSError:
                pass

    def migration_times(self, n, gap=0.05):
        """Seconds each of `n` writes of a fresh process' pid into a fresh
        run cgroup's cgroup.procs took (the first controller's hierarchy),
        `gap` seconds after the previous one: the kernel's cost of moving a
        process, which every run pays once when the launcher gives it a
        cgroup (it moves the wrapper in between fork and exec). (Here a
        move costs an RCU grace period, about 13 ms, unless another came
        within about 20 ms: runs seconds apart, as a model makes them, pay
        it every time.)"""
        times = []
        for _ in range(n):
            dirs = self.create({"memory_mb": 1024, "pids": 256})
            child = subprocess.Popen(["sleep", "5"])
            try:
                time.sleep(gap)
                t0 = time.perf_counter()
                (dirs[0] / "cgroup.procs").write_text(str(child.pid))
                times.append(time.perf_counter() - t0)
            finally:
                child.kill()
                child.wait()
                self.remove(dirs)
        return times


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
