"""The language presets on cgroup v2: checks/e2e/languages.py, the harness's own
cases (for go, rust, java, c and cpp: hello world, a compile error, a
panic or exception, an allocation past the memory limit, a timeout, a
session's second build reusing the first's cache; then network-tools),
run inside the guest against configurations.nix's `languages` server (the
presets turned on through the home-manager module, with limits for the
emulated CPU):

- as root, started by this driver (a system service without delegation):
  the server asks the system manager for a delegated scope, and each run
  gets a cgroup v2 of its own;
- as an unprivileged user, from a scope of her systemd user manager
  without delegation, as a client started from her desktop session: the
  server asks her manager for a delegated scope.

The script's lines are relayed as they come (`ok - vm: languages, root:
languages: go: hello world`, and its `info` lines: where the server found
its runs' limits, how each allocation past the limit ended, the session's
build times); each pass is one test of its own besides, failed when the
script failed or did not finish."""

import subprocess
import time
from pathlib import Path

from vmlib import Vm, check, info

USER = "dev"
SCRIPT = Path(__file__).resolve().parent.parent / "guest" / "languages.py"
# Each pass takes 10 to 16 minutes under TCG here; both together stay within
# checks/vm/run's --timeout for this file (ON_REQUEST there).
PASS_TIMEOUT = 1500


def setup(vm):
    """dev, an unprivileged user, lingers (her user manager runs)"""
    vm.sh(["useradd", "--create-home", "--shell", "/bin/bash", USER])
    vm.state["languages_uid"] = vm.linger(USER)


def relayed(argv, label):
    """Runs argv (checks/e2e/languages.py), its lines printed as they come."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    failed = 0
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            failed += line.startswith("FAIL - ")
            print(line if line.startswith(("ok - ", "FAIL - ", "skip - ", "info - ")) else f"    {line}", flush=True)
            check(time.monotonic() - started < PASS_TIMEOUT, f"{label}: not finished within {PASS_TIMEOUT} s")
        status = proc.wait(timeout=60)
    finally:
        if proc.poll() is None and proc.pid > 1:
            proc.kill()
            proc.wait()
    info(f"languages, {label}: {time.monotonic() - started:.0f} s")
    check(status == 0 and not failed, f"checks/e2e/languages.py exited {status}, {failed} failed")


def arguments(vm, label):
    return ["/usr/bin/python3", "-u", str(SCRIPT), "--server", vm.config["languages"], "--label", f"vm: languages, {label}"]


def test_root(vm):
    """as root: checks/e2e/languages.py against the server, each run in a cgroup v2 of its own"""
    relayed(["env", "-i", "HOME=/root", "PATH=/usr/bin:/bin", *arguments(vm, "root")], "root")


def test_user(vm):
    """as a user under her systemd manager: checks/e2e/languages.py from a scope of hers"""
    uid = vm.state["languages_uid"]
    runtime = f"/run/user/{uid}"
    env = {"HOME": f"/home/{USER}", "USER": USER, "PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": runtime,
           "DBUS_SESSION_BUS_ADDRESS": f"unix:path={runtime}/bus"}
    argv = Vm.as_user(uid, ["systemd-run", "--user", "--scope", "--quiet", "--", *arguments(vm, "user")], env)
    relayed(argv, "user")
