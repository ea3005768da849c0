"""home-manager's programs.nix-sandbox-mcp under a systemd user manager: an
unprivileged user (alice, lingering, so her manager runs without a login)
has ~/.config/mcp/mcp.json as home-manager writes it for the docs'
home-manager snippet, and starts the server it names over stdio the way a
client launched from a desktop session is: in a `systemd-run --user
--scope` of her manager."""

import json
import os
import pwd
import time
from pathlib import Path

from vmlib import FORK_BOMB, FOUR_BY_400_MIB, TMPFS_THEN_900_MIB, Failed, McpClient, call_run, check, env_names, info, reprobed, stopped_by

USER = "alice"
PROJECT = Path("/home/alice/src/project")  # the snippet's projectDir
STATE = {}
CLIENT_SCOPE = "nsm-vm-client.scope"  # the scope the client starts the server in (no Delegate)


def uid():
    return pwd.getpwnam(USER).pw_uid


def session_env():
    """What a process of alice's desktop session has: her runtime
    directory and her manager's bus."""
    runtime = f"/run/user/{uid()}"
    return {
        "HOME": f"/home/{USER}",
        "USER": USER,
        "PATH": "/usr/bin:/bin",
        "XDG_RUNTIME_DIR": runtime,
        "DBUS_SESSION_BUS_ADDRESS": f"unix:path={runtime}/bus",
    }


def as_alice(vm, argv, check_ok=True):
    return vm.sh(vm.as_user(uid(), argv, session_env()), check_ok=check_ok)


def entry():
    servers = json.loads(Path(f"/home/{USER}/.config/mcp/mcp.json").read_text())["mcpServers"]
    check("nix-sandbox" in servers, f"mcp.json servers {sorted(servers)}")
    return servers["nix-sandbox"]


def scoped(vm, argv, env, *properties, unit=None):
    """argv as alice, in a new scope of her manager (systemd-run --scope
    execs it: its stdin and stdout stay this process' pipes), named unit
    when given."""
    extra = [f"--property={p}" for p in properties] + ([f"--unit={unit}"] if unit else [])
    return vm.as_user(uid(), ["systemd-run", "--user", "--scope", "--quiet", *extra, "--", *argv],
                      {**session_env(), **env})


def setup(vm):
    """alice lingers (her user manager runs) and has home-manager's mcp.json and the snippet's project"""
    vm.sh(["useradd", "--create-home", "--shell", "/bin/bash", USER])
    PROJECT.mkdir(parents=True)
    (PROJECT / "notes.txt").write_text("from the project\n")
    config = Path(f"/home/{USER}/.config/mcp")
    config.mkdir(parents=True)
    # home-manager links the file from the store.
    (config / "mcp.json").symlink_to(vm.config["mcp_json"])
    for path in [Path(f"/home/{USER}/.config"), config, Path(f"/home/{USER}/src"), PROJECT, PROJECT / "notes.txt"]:
        os.lchown(path, uid(), uid())
    vm.linger(USER)


def test_manager(vm):
    """systemctl --user answers: alice's manager is up"""
    state = as_alice(vm, ["systemctl", "--user", "is-system-running"], check_ok=False).stdout.strip()
    check(state in ("running", "degraded"), f"alice's manager is {state!r}")
    manager = f"/user.slice/user-{uid()}.slice/user@{uid()}.service"
    files = vm.cgroup_files(manager)
    info(f"user: alice's manager ({state}) at {manager}: {files}")
    delegated = set(files.get("cgroup.controllers", "").split())
    info("user: her manager is delegated " + ", ".join(
        f"{c} {'yes' if c in delegated else 'NO'}" for c in ["memory", "pids", "cpu", "io"]))


def test_mcp_json(vm):
    """mcp.json names the server as a stdio command, with the snippet's env"""
    server = entry()
    check(server.get("type") == "stdio" and server["args"] == ["--stdio"], f"entry {server}")
    check(Path(server["command"]).is_file(), f"{server['command']} is not in the store")
    check(server.get("env", {}).get("PROJECT_DIR") == str(PROJECT), f"env {server.get('env')}")


def test_runs(vm):
    """the server from mcp.json, in alice's systemd-run --user --scope, runs data-science code"""
    server = entry()
    client = McpClient(scoped(vm, [server["command"], *server["args"]], server.get("env", {}), unit=CLIENT_SCOPE),
                       None)
    STATE["client"] = client
    init = client.initialize("nix-sandbox-mcp-vm")
    STATE["client_scope"] = as_alice(vm, ["systemctl", "--user", "show", "-P", "ControlGroup", CLIENT_SCOPE]).stdout.strip()
    check("Limits per run:" in init.get("instructions", ""), f"instructions {init.get('instructions')!r}")
    tools = client.request("tools/list", {})["tools"]
    env = tools[0]["inputSchema"]["properties"]["env"]
    check("data-science" in env_names(env), f"env description {env.get('description')!r}")
    code = "import numpy, pandas, os\nprint(int(pandas.Series(numpy.arange(7)).sum() * 2), os.getuid())"
    result, text = reprobed(lambda: call_run(client, "data-science", code), "user, data-science")
    check(not result.get("isError") and text.strip() == "42 1000", f"{result}")
    for line in client.stderr:
        if "self-test:" in line:
            info("user: " + line.split("self-test:", 1)[1].strip())


def running():
    if "client" not in STATE:
        raise Failed("no server (an earlier test failed)")
    return STATE["client"]


def test_project(vm):
    """the project directory is read-only at /project"""
    code = "cat /project/notes.txt; touch /project/x 2>/dev/null || echo read-only"
    result, text = reprobed(lambda: call_run(running(), "shell", code), "user, shell")
    check(text.strip() == "from the project\nread-only", f"{result}")


MIB = 1024 * 1024
CGROUP_ROOT = Path("/sys/fs/cgroup")


def xattr(path, name):
    try:
        return os.getxattr(path, name).decode(errors="replace")
    except OSError:
        return None


def unit_of(cgroup):
    """The systemd unit a cgroup path belongs to (its last .scope or .service)."""
    parts = [p for p in cgroup.split("/") if p.endswith((".scope", ".service"))]
    return parts[-1] if parts else None


def delegated_base(vm):
    """The cgroup the running server makes its runs' cgroups in: the parent
    of the leaf it moved itself into."""
    server = vm.cgroup_of(running().proc.pid)
    check(server.endswith("/server"), f"the server is in {server}, not in a leaf `server` of a cgroup of its own")
    return server.rsplit("/", 1)[0]


def test_delegated(vm):
    """the server's runs' cgroups are in a cgroup systemd delegated to it (Delegate=yes), not in the client's scope"""
    base = delegated_base(vm)
    unit = unit_of(base)
    check(unit is not None, f"{base} belongs to no scope or service")
    shown = as_alice(vm, ["systemctl", "--user", "show", "-P", "Delegate", unit], check_ok=False).stdout.strip()
    info(f"user: the server's cgroup {base}, unit {unit}: Delegate={shown}, "
         f"user.delegate={xattr(CGROUP_ROOT / base.lstrip('/'), 'user.delegate')!r}, "
         f"files {vm.cgroup_files(base)}")
    check(shown == "yes", f"the server makes cgroups in {base}, whose unit {unit} has Delegate={shown!r}")
    lines = [line.split("self-test:", 1)[1].strip() for line in running().stderr if "self-test:" in line]
    # The client's scope has no Delegate=yes: the server asked for one.
    check(any(line.startswith("cgroups: cgroup v2 (delegated: ") and "a scope systemd made for it" in line
              for line in lines), f"self-test: {lines}")
    check(any("memory by cgroup, per run" in line for line in lines), f"self-test: {lines}")


def test_memory_per_run(vm):
    """four processes of one run allocating 400 MiB each, memory_mb 1024: the run is OOM-killed and told so"""
    text, fact = stopped_by(lambda: call_run(running(), "python", FOUR_BY_400_MIB), "memory", "user, 4 x 400 MiB")
    peak = fact.get("peak_memory_bytes")
    check("killed: memory limit 1024 MiB" in text, f"the note does not say so: {text!r}")
    check(peak is not None and peak <= 1024 * MIB, f"peak memory {peak}")


def test_tmpfs_counted(vm):
    """500 MiB written to /workspace and /tmp, then a 900 MiB allocation, memory_mb 1024: stopped, the files counted"""
    text, _ = stopped_by(lambda: call_run(running(), "python", TMPFS_THEN_900_MIB), "memory", "user, 500 MiB tmpfs + 900 MiB")
    check("written" in text and "allocated" not in text, f"{text!r}")


def test_fork_bomb(vm):
    """a fork bomb stops at the run's pids and is told so"""
    text, _ = stopped_by(lambda: call_run(running(), "python", FORK_BOMB), "processes", "user, fork bomb")
    check("refused after" in text, f"{text!r}")


def test_session_cpu(vm):
    """a session's background chain of processes is stopped at the session's cpu_s (4 s), across calls"""
    chain = (
        "import os, time\n"
        "while True:\n"
        "    start = time.process_time()\n"
        "    while time.process_time() - start < 1.5:\n"
        "        pass\n"
        "    if os.fork():\n"
        "        os._exit(0)\n"
    )
    code = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', {chain!r}, 'nsm-cpu-chain'], start_new_session=True)\n"
        "print('started')\n"
    )
    client = running()
    result = client.request("tools/call", {"name": "run", "arguments": {"env": "tight", "session": "budget", "code": code}})
    text = "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")
    check(text.strip() == "started", f"{result}")

    def chain_pids():
        return [p for p in vm.descendants(client.proc.pid) if "nsm-cpu-chain" in vm.command_line(p)]

    check(chain_pids(), "the chain is not running after the call")
    started = time.monotonic()
    def stopped():
        # Gone in two looks a second apart: a walk of /proc can miss the
        # chain while one link exits and its child goes on.
        if chain_pids():
            return False
        time.sleep(1)
        return not chain_pids()

    vm.wait_until("the chain stopped", stopped, timeout=40, pause=0.5)
    info(f"user, session cpu_s 4: the chain stopped {time.monotonic() - started:.1f} s after the call")
    result = client.request("tools/call", {"name": "run", "arguments": {"env": "tight", "session": "budget", "code": "print('again')"}})
    text = "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")
    info(f"user, the next call: {text.strip()!r}")
    check("CPU budget of 4 s" in text, f"the next call is not told why the session ended: {text!r}")


def test_cgroups_removed(vm):
    """no run's cgroup is left after its run, and the server wrote nothing outside its delegated cgroup"""
    base = delegated_base(vm)
    vm.wait_until("the runs' cgroups removed", lambda: not vm.left_cgroups(base), timeout=10)
    manager = CGROUP_ROOT / f"user.slice/user-{uid()}.slice/user@{uid()}.service"
    ours = CGROUP_ROOT / base.lstrip("/")
    outside = []
    for directory, subdirs, _ in os.walk(manager):
        here = Path(directory)
        if here == ours or ours in here.parents:
            continue
        for name in subdirs:
            if name == "server" or name == "init" or name.startswith(("run-", "session-")):
                outside.append(str(here / name))
    check(not outside, f"cgroups the server made outside {base}: {outside}")
    client_scope = STATE.get("client_scope")
    if client_scope:
        files = vm.cgroup_files(client_scope, ("cgroup.subtree_control",))
        check(files.get("cgroup.subtree_control", "") == "", f"the client's scope {client_scope} was changed: {files}")


def test_cgroups(vm):
    """the server and a session's jail are inside alice's scope, in her manager's subtree"""
    client = running()
    result = client.request("tools/call", {"name": "run", "arguments": {
        "env": "python", "session": "cgroup", "code": "print('alive')"}})
    server = client.proc.pid
    server_cgroup = vm.cgroup_of(server)
    manager = f"/user.slice/user-{uid()}.slice/user@{uid()}.service/"
    check(server_cgroup.startswith(manager), f"the server is in {server_cgroup}, not under {manager}")
    scope = server_cgroup.split("/")
    scope = "/".join(scope[: next(i for i, part in enumerate(scope) if part.endswith(".scope")) + 1])
    jail = {p: vm.cgroup_of(p) for p in vm.descendants(server)}
    check(jail, f"the server has no child processes with a session open: {result}")
    for p, cgroup in jail.items():
        check(cgroup.startswith(scope), f"process {p} ({vm.command_line(p)[:120]}) is in {cgroup}, not in {scope}")
    info(f"user: the server in {server_cgroup}; jail processes in {sorted(set(jail.values()))}")
    info(f"user: the scope {scope}: {vm.cgroup_files(scope)}")
    for cgroup in sorted(set(jail.values())):
        info(f"user: {cgroup}: {vm.cgroup_files(cgroup, ('cgroup.controllers', 'memory.max', 'pids.max'))}")
    client.close()
    STATE.pop("client")


def test_check_delegated(vm):
    """--check in a scope with Delegate=yes: the launcher finds a delegated cgroup v2"""
    server = entry()
    argv = scoped(vm, [server["command"], "--check"], server.get("env", {}), "Delegate=yes")
    proc = vm.sh(argv, check_ok=False)
    lines = proc.stdout.splitlines()
    for line in lines:
        if line.startswith(("cgroups:", "limits:")):
            info(f"user, Delegate=yes: {line}")
    check(proc.returncode == 0, f"--check exited {proc.returncode}: {proc.stdout[-600:]} {proc.stderr[-600:]}")
    check(any(line.startswith("cgroups: cgroup v2 (delegated: ") for line in lines), f"{lines}")


def test_check_without_manager(vm):
    """--check with no user manager to ask and no delegated cgroup: memory is said to be per process"""
    server = entry()
    env = {k: v for k, v in session_env().items() if k not in ("XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS")}
    proc = vm.sh(vm.as_user(uid(), [server["command"], "--check"], {**env, **server.get("env", {})}), check_ok=False)
    lines = proc.stdout.splitlines()
    for line in lines:
        if line.startswith(("cgroups:", "limits:")):
            info(f"user, no manager: {line}")
    check(any(line.startswith("cgroups: none usable") for line in lines), f"{lines}")
    check(any("memory PER PROCESS" in line and "pids x memory_mb" in line for line in lines), f"{lines}")



# As alice, in a scope with Delegate=yes: the cost of starting a process in
# a new cgroup, created there by clone3(CLONE_INTO_CGROUP) or forked and
# moved in through cgroup.procs, next to a plain fork; ms per run.
MIGRATION_COST = r"""
import ctypes, os, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
SYS_CLONE3, CLONE_INTO_CGROUP, SIGCHLD, RUNS = 435, 0x200000000, 17, 40
own = open("/proc/self/cgroup").read().split("0::", 1)[1].strip()
base = "/sys/fs/cgroup" + own
# No processes in a cgroup whose children get controllers: this one to a leaf.
os.mkdir(base + "/self")
open(base + "/self/cgroup.procs", "w").write(str(os.getpid()))
open(base + "/cgroup.subtree_control", "w").write("+memory +pids")


def cloned(fd, path):
    args = struct.pack("11Q", CLONE_INTO_CGROUP, 0, 0, 0, SIGCHLD, 0, 0, 0, 0, 0, fd)
    pid = libc.syscall(SYS_CLONE3, ctypes.create_string_buffer(args), len(args))
    if pid == 0:
        os._exit(0)
    if pid < 0:
        sys.exit(f"clone3: errno {ctypes.get_errno()}")
    return pid


def moved(fd, path):
    pid = os.fork()
    if pid == 0:
        with open(path + "/cgroup.procs", "w") as f:
            f.write("0")
        os._exit(0)
    return pid


def forked(fd, path):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    return pid


def per_run(start):
    took = 0.0
    for n in range(RUNS):
        path = f"{base}/run-{n}"
        os.mkdir(path)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        t = time.perf_counter()
        os.waitpid(start(fd, path), 0)
        took += time.perf_counter() - t
        os.close(fd)
        os.rmdir(path)
    return took / RUNS * 1000


print(f"{per_run(forked):.2f} {per_run(cloned):.2f} {per_run(moved):.2f}")
"""


def test_migration_cost(vm):
    """clone3(CLONE_INTO_CGROUP) and a move into a cgroup work in a delegated scope (their cost said, not judged)"""
    argv = scoped(vm, ["python3", "-c", MIGRATION_COST], {}, "Delegate=yes")
    proc = vm.sh(argv, check_ok=False)
    check(proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-600:]}")
    fork, clone, move = (float(x) for x in proc.stdout.split())
    info(f"user: a process started in a new cgroup, ms a run: plain fork {fork:.2f}, "
         f"clone3(CLONE_INTO_CGROUP) {clone:.2f}, fork and a write to cgroup.procs {move:.2f}")
    # Timings are the benchmark's to compare, never a test's: this checks
    # that each way ran and was measured.
    check(min(fork, clone, move) > 0, f"a way was not measured: {proc.stdout!r}")
