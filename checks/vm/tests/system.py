"""The guest itself: what the other tests take for granted."""

import os
import platform
import subprocess
from pathlib import Path

from vmlib import check, info


def test_cgroup2(vm):
    """cgroup v2 alone is mounted, at /sys/fs/cgroup (the unified hierarchy)"""
    mounts = [line.split(" - ", 1) for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    cgroups = [(before.split()[4], after.split()[0]) for before, after in mounts if after.split()[0].startswith("cgroup")]
    check(cgroups == [("/sys/fs/cgroup", "cgroup2")], f"cgroup mounts {cgroups}")
    info(f"kernel {platform.release()}; root cgroup controllers: {vm.cgroup_files('/')['cgroup.controllers']}")


def test_systemd(vm):
    """systemd is PID 1 and the system is up"""
    check(Path("/proc/1/comm").read_text().strip() == "systemd", f"PID 1 is {Path('/proc/1/comm').read_text()!r}")
    state = vm.sh(["systemctl", "is-system-running"], check_ok=False).stdout.strip()
    failed = vm.sh(["systemctl", "--failed", "--no-legend", "--plain"], check_ok=False).stdout.strip()
    check(state in ("running", "starting"), f"system state {state!r}; failed units: {failed}")
    version = vm.sh(["systemctl", "--version"]).stdout.splitlines()[0]
    info(f"{version}; system state {state}")


def test_store(vm):
    """the host's /nix/store is mounted read-only over 9p"""
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    store = [line.split() for line in mounts if line.split()[1] == "/nix/store"]
    check(len(store) == 1 and store[0][2] == "9p" and "ro" in store[0][3].split(","), f"/nix/store mounts {store}")
    check(Path(vm.config["service"]).is_file(), f"{vm.config['service']} is not in the shared store")
    check(not os.access("/nix/store", os.W_OK), "/nix/store is writable")


def test_userns(vm):
    """an unprivileged user can make a user namespace (the jails need one)"""
    vm.sh(vm.as_user(65534, ["unshare", "--user", "--map-root-user", "true"], {"PATH": "/usr/bin:/bin"}))


def test_ended_process(vm):
    """the tests' /proc readers take a process that has ended for gone, not for an error"""
    child = subprocess.Popen(["sleep", "30"])
    # Its command line can read empty for a moment after the spawn.
    vm.wait_until("sleep's command line", lambda: "sleep 30" in vm.command_line(child.pid), timeout=10)
    child.kill()
    child.wait()
    # Reaped: its /proc entry is gone, as for a process that exits between
    # a listing of /proc and the read of its command line.
    check(vm.command_line(child.pid) == "", f"an ended process reads {vm.command_line(child.pid)!r}")
