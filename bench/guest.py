#!/usr/bin/env python3
"""The benchmark's driver inside the VM (bench/vm.py boots it; not a test).

The guest image's unit starts /mnt/vmtest/guest/driver.py once the system
is up (checks/vm/image.py), as root; bench/vm.py puts this file there,
beside the VM test's guest library (vmlib.py: its helpers for systemd and
users), with bench.py and its modules in /mnt/vmtest/bench/ and
config.json (the store paths, the passes). It runs bench.py once per pass
and copies its output, line by line, to its own stdout, the virtconsole
the host reads:

- root: in a transient scope of the system manager with `Delegate=yes`
  (`systemd-run --scope`), as a service with `Delegate=yes` runs it;
- user: an unprivileged user, lingering (her systemd user manager runs),
  in a scope of her manager with `Delegate=yes`, as a client started from
  her desktop session with delegation.

bench.py moves itself into a leaf of its scope (cgroups.py); every server
it starts asks that manager for a delegated scope of its own, as under any
client, and gives each run a cgroup v2 created by clone3. Each pass is
framed by `vm-bench-pass NAME: WHAT` and `vm-bench-pass-end NAME: exit N`;
the last line is `vm-driver-end`. The machine powers off when it exits.
"""

import json
import subprocess
import sys
from pathlib import Path

from vmlib import Failed, Vm

SHARE = Path(__file__).resolve().parent.parent
BENCH = SHARE / "bench" / "bench.py"
USER = "bench"


def say(line):
    print(line, flush=True)


def user_session():
    """Creates the user, lingering; the environment of a process of her
    session (her runtime directory, her manager's bus)."""
    Vm.sh(["useradd", "--create-home", "--shell", "/bin/bash", USER])
    uid = Vm.linger(USER)
    runtime = f"/run/user/{uid}"
    return uid, {"HOME": f"/home/{USER}", "USER": USER, "PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": runtime,
                 "DBUS_SESSION_BUS_ADDRESS": f"unix:path={runtime}/bus"}


def run_pass(name, what, argv):
    """Runs one pass, its output copied as it comes; its exit status."""
    say(f"vm-bench-pass {name}: {what}")
    # No time limit here: the host ends the machine at its --timeout.
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for raw in proc.stdout:
        say(raw.decode(errors="replace").rstrip("\n"))
    status = proc.wait()
    say(f"vm-bench-pass-end {name}: exit {status}")
    return status


def main():
    config = json.loads((SHARE / "config.json").read_text())
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    kernel = Path("/proc/sys/kernel/osrelease").read_text().strip()
    say(f"# vm-bench: the driver started {uptime:.1f} s after the kernel (Linux {kernel}); "
        f"cgroup controllers at the root: {Path('/sys/fs/cgroup/cgroup.controllers').read_text().strip()}")
    bench = ["/usr/bin/python3", "-u", str(BENCH), "--server", config["server"], "--launcher", config["launcher"],
             "--built-from", config["built_from"]]
    for name in config["passes"]:
        args = config["args"][name]
        context = f"{config['context']}, {config['what'][name]}"
        if name == "root":
            env = {"HOME": "/root", "PATH": "/usr/bin:/bin"}
            argv = ["systemd-run", "--scope", "--quiet", "--property=Delegate=yes", "--", "env", "-i",
                    *[f"{k}={v}" for k, v in env.items()],
                    *bench, "--work", "/root/bench-work", "--context", context, *args]
        else:
            try:
                uid, env = user_session()
            except (Failed, subprocess.SubprocessError) as e:
                say(f"vm-bench-pass {name}: {config['what'][name]}")
                say(f"vm-bench: the user's manager did not come up: {e}")
                say(f"vm-bench-pass-end {name}: exit 2")
                continue
            argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--init-groups", "env", "-i",
                    *[f"{k}={v}" for k, v in env.items()],
                    "systemd-run", "--user", "--scope", "--quiet", "--property=Delegate=yes", "--",
                    *bench, "--work", f"{env['HOME']}/bench-work", "--context", context, *args]
        run_pass(name, config["what"][name], argv)
    say("vm-driver-end")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # said on the channel the host reads, then the end
        say(f"vm-bench: the driver failed: {type(e).__name__}: {e}")
        say("vm-driver-end")
        sys.exit(1)
