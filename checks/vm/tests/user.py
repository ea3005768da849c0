"""home-manager's programs.nix-sandbox-mcp under a systemd user manager: an
unprivileged user (alice, lingering, so her manager runs without a login)
has ~/.config/mcp/mcp.json as home-manager writes it for the README's
home-manager snippet, and starts the server it names over stdio the way a
client launched from a desktop session is: in a `systemd-run --user
--scope` of her manager."""

import json
import os
import pwd
from pathlib import Path

from vmlib import Failed, McpClient, call_run, check, info, reprobed

USER = "alice"
PROJECT = Path("/home/alice/src/project")  # the snippet's projectDir
STATE = {}


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


def scoped(vm, argv, env, *properties):
    """argv as alice, in a new scope of her manager (systemd-run --scope
    execs it: its stdin and stdout stay this process' pipes)."""
    extra = [f"--property={p}" for p in properties]
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
    vm.sh(["loginctl", "enable-linger", USER])
    manager = f"user@{uid()}.service"
    vm.wait_until(f"{manager} active", lambda: vm.sh(
        ["systemctl", "is-active", manager], check_ok=False).stdout.strip() == "active", timeout=60)
    vm.wait_until(f"/run/user/{uid()}/bus", lambda: Path(f"/run/user/{uid()}/bus").exists(), timeout=30)


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
    client = McpClient(scoped(vm, [server["command"], *server["args"]], server.get("env", {})), None)
    STATE["client"] = client
    init = client.initialize("nix-sandbox-mcp-vm")
    check("- data-science:" in init.get("instructions", ""), f"instructions {init.get('instructions')!r}")
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
    check(any(line.startswith("cgroups: cgroup v2 (delegated)") for line in lines), f"{lines}")
