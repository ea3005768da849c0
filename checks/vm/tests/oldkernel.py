"""A root server on Debian 11's Linux 5.10 (the guest booted by
`checks/vm/run --kernel old`), a kernel without what newer ones give a
jail's setup: no mount_setattr (5.12), so the store view is made
read-only mount by mount; System V limits of an IPC namespace that no
user namespace may write (6.1), so the jail gets no System V IPC at all;
no overlay in a user namespace (5.11), so a project cannot be shown;
RLIMIT_NPROC counted for every process of a uid (5.14 counts it per user
namespace), so the jails leave it alone and a run's cgroup bounds its
processes. The
default boot leaves it out; asked for there (`--only oldkernel`), each
test says it is skipped."""

import ctypes
import errno
import json
import os
from pathlib import Path

from vmlib import (FORK_BOMB, FOUR_BY_400_MIB, Failed, McpClient, Skipped, call_run, call_session, check, info,
                   reprobed, stopped_by)

STATE = {}


def release():
    return tuple(int(part) for part in os.uname().release.split("-")[0].split(".")[:2])


def old_only():
    if release() >= (6, 1):
        raise Skipped(f"the guest runs Linux {os.uname().release}: `checks/vm/run --kernel old` boots 5.10")


def server(vm, extra_env=None, uid=None):
    """The harness's launcher with its manifest (home-manager's mcp.json
    entry), over stdio, as root (or as `uid`, with exactly that env),
    without the entry's project unless extra_env names one."""
    entry = json.loads(Path(vm.config["mcp_json"]).read_text())["mcpServers"]["nix-sandbox"]
    argv = [entry["command"], *entry["args"]]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/root", **(extra_env or {})}
    client = McpClient(argv, env) if uid is None else McpClient(vm.as_user(uid, argv, env), None)
    client.initialize("nix-sandbox-mcp-vm")
    return client


def setup(vm):
    """the guest runs Linux before 5.12, whose mount_setattr is missing (or is the default boot)"""
    if release() >= (6, 1):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    done = libc.syscall(442, -100, b"/", 0, None, 0)  # mount_setattr (x86_64)
    info(f"oldkernel: Linux {os.uname().release}; mount_setattr: "
         f"{'ENOSYS' if done == -1 and ctypes.get_errno() == errno.ENOSYS else f'returned {done}'}")
    check(done == -1 and ctypes.get_errno() == errno.ENOSYS, "this kernel has mount_setattr: not the old boot")


# In a jail: System V's three makers, POSIX shared memory, and the store:
# its mounts' options, a write there, how many paths it shows.
PROBE = r"""
import ctypes, errno, os
from multiprocessing import shared_memory
libc = ctypes.CDLL(None, use_errno=True)
for name, call in (("shmget", lambda: libc.shmget(0, 4096, 0o600)), ("msgget", lambda: libc.msgget(0, 0o600)),
                   ("semget", lambda: libc.semget(0, 1, 0o600))):
    done = call()
    print(name, errno.errorcode.get(ctypes.get_errno(), done) if done == -1 else "made")
block = shared_memory.SharedMemory(create=True, size=4096)
block.buf[0] = 42
print("posix-shm", block.buf[0])
block.close()
block.unlink()
flags = set()
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    if fields[4] == "/nix/store" or fields[4].startswith("/nix/store/"):
        options = fields[5].split(",")
        flags.add(",".join(o for o in ("ro", "nosuid", "nodev") if o in options))
print("store-mounts", " ".join(sorted(flags)))
try:
    open("/nix/store/new", "w")
    print("store-write made")
except OSError as e:
    print("store-write", errno.errorcode[e.errno])
print("store-paths", len(os.listdir("/nix/store")))
"""


def test_a_jail_runs(vm):
    """a root server's python jail starts and answers print(1) (every jail failed at its System V limits before)"""
    old_only()
    client = server(vm)
    STATE["client"] = client
    result, text = reprobed(lambda: call_run(client, "python", "print(1)"), "oldkernel")
    check(not result.get("isError") and text.startswith("1\n"), f"{result}")
    said = [line.split("self-test: ", 1)[1].strip() for line in client.stderr if "self-test: System V IPC" in line]
    check(said and said[0].startswith("System V IPC: none in the jails"), f"{''.join(client.stderr)[-1500:]}")
    info(f"oldkernel: {said[0]}")


def test_no_system_v_ipc(vm):
    """System V's shmget, msgget and semget fail with ENOSYS in a jail; POSIX shared memory works"""
    old_only()
    client = STATE.get("client") or server(vm)
    result, text = call_run(client, "python", PROBE)
    check(not result.get("isError"), f"{result}")
    lines = text.splitlines()
    for name in ("shmget", "msgget", "semget"):
        check(f"{name} ENOSYS" in lines, f"{name}: {text!r}")
    check("posix-shm 42" in lines, f"{text!r}")
    STATE["probe"] = lines


def test_store_view_read_only(vm):
    """without mount_setattr, the jail's store is still its closure alone, every mount read-only, nosuid and nodev"""
    old_only()
    lines = STATE.get("probe")
    if lines is None:
        raise Failed("no probe output (an earlier test failed)")
    check("store-mounts ro,nosuid,nodev" in lines, f"{lines}")
    check("store-write EROFS" in lines, f"{lines}")
    shown = next((int(line.split()[1]) for line in lines if line.startswith("store-paths ")), None)
    on_host = len(os.listdir("/nix/store"))
    info(f"oldkernel: the python jail shows {shown} store paths of the guest's {on_host}")
    check(shown is not None and 0 < shown < 100 < on_host, f"{lines}")


# Eight children at once, each waited for.
FORKS = (
    "import os\n"
    "kids = [os.fork() or os._exit(0) for _ in range(8)]\n"
    "print('forked', sum(os.waitpid(k, 0)[1] == 0 for k in kids))\n"
)


def test_attacks(vm):
    """a root server's run forks; four processes of 400 MiB stop at the run's 1024 MiB, a fork bomb at its pids.max"""
    old_only()
    client = STATE.get("client") or server(vm)
    result, text = call_run(client, "python", FORKS)
    check(text.startswith("forked 8\n"), f"{result}")
    text, _ = stopped_by(lambda: call_run(client, "python", FOUR_BY_400_MIB), "memory", "oldkernel, 4 x 400 MiB")
    check("killed: memory limit 1024 MiB" in text, f"the note does not say so: {text!r}")
    text, _ = stopped_by(lambda: call_run(client, "python", FORK_BOMB), "processes", "oldkernel, fork bomb")
    check("refused after" in text, f"{text!r}")


def test_shared_uid_forks(vm):
    """a server as uid 65534, whose jails share its uid: a run forks eight children (the uid's other processes do not count against it); a session forked from a checkpoint gets a copy (no mount_setattr to mount one read-only)"""
    old_only()
    home = Path("/run/nsm-oldkernel-nobody")
    home.mkdir(exist_ok=True)
    os.chown(home, 65534, 65534)
    client = server(vm, {"HOME": str(home), "NIX_SANDBOX_MAX_CHECKPOINTS": "2"}, uid=65534)
    try:
        result, text = reprobed(lambda: call_run(client, "python", FORKS), "oldkernel, uid 65534")
        check(text.startswith("forked 8\n"), f"{result} {''.join(client.stderr)[-1500:]}")
        limits = [line.split("self-test: ", 1)[1].strip() for line in client.stderr if "self-test: limits:" in line]
        check(limits, f"no limits line: {''.join(client.stderr)[-1500:]}")
        info(f"oldkernel, uid 65534: {limits[0]}")
        check("processes by cgroup pids.max" in limits[0] or "processes NOT bounded per run" in limits[0],
              f"the limits line claims a bound the kernel does not give: {limits[0]}")
        check(any("self-test: System V IPC: none in the jails" in line for line in client.stderr),
              f"no System V line: {''.join(client.stderr)[-1500:]}")
        forks = [line.split("self-test: ", 1)[1].strip() for line in client.stderr if "self-test: forks:" in line]
        check(forks and forks[0].startswith("forks: copied") and "mount_setattr" in forks[0], f"{forks}")
        result, text = call_session(client, "a", "echo one > f && echo ok")
        check(text.startswith("ok\n") and "checkpoint: a@1" in text, f"{result}")
        result, text = call_session(client, "b", "cat f; echo two > f", start="a@1")
        check(text.startswith("one\n"), f"{result}")
        result, text = call_session(client, "a", "cat f")
        check(text.startswith("one\n"), f"the fork's write reached its source: {result}")
    finally:
        client.close()


def test_session(vm):
    """a session keeps its state between calls (its layer, a tmpfs in the jail's namespace)"""
    old_only()
    client = STATE.get("client") or server(vm)
    try:
        first, _ = call_session(client, "old", "x = 41", env="python")
        check(not first.get("isError"), f"{first}")
        second, text = call_session(client, "old", "print(x + 1)", env="python")
        check(not second.get("isError") and text.startswith("42"), f"{second}")
    finally:
        STATE.pop("client", None)
        client.close()


def test_project_says_why(vm):
    """a jail with a project fails with one line naming Linux 5.11 (an overlay in a user namespace)"""
    old_only()
    project = Path("/run/nsm-oldkernel-project")
    project.mkdir(exist_ok=True)
    (project / "README").write_text("hello\n")
    client = server(vm, {"PROJECT_DIR": str(project)})
    try:
        result, text = call_run(client, "python", "print(1)")
        check(result.get("isError") and "Linux 5.11" in text, f"{result}")
        info("oldkernel: with a project: " + text.strip().splitlines()[0][:300])
    finally:
        client.close()
