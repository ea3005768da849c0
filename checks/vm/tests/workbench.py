"""The workbench on a real host (docs/workbench.md, docs/fork.md): a root
server's writable project, each jail's uid given the project owner's
files through an idmapped mount of the guest's ext4, and a session
forked from a checkpoint; then a server run as an unprivileged user,
whose fork is mounted over the checkpoint. A few calls each: the guest's
kernel (Debian 12's) decides whether a root server's forks are mounted
or copied, which its `forks:` line says and the fork's /workspace shows."""

import os
from pathlib import Path

from vmlib import McpClient, call_session, check, info, reprobed

ROOT = Path("/srv/nsm-workbench")
PROJECT = ROOT / "project"
OWNER = 1500  # the project's owner: no jail's uid, not the server's
NOTES = "from the host\n"


def overlay():
    """The guest's kernel has overlayfs (Debian's is a module, which the
    image's initramfs loads): the writable project and mounted forks need it."""
    check("overlay" in Path("/proc/filesystems").read_text(),
          "the guest's kernel has no overlay file system: checks/vm/image.py's MODULES loads it")


def setup(vm):
    """a project owned by another uid than the server's, with a mode-0600 file"""
    PROJECT.mkdir(parents=True)
    (PROJECT / "notes.txt").write_text(NOTES)
    os.chmod(PROJECT / "notes.txt", 0o600)
    for path in (PROJECT, PROJECT / "notes.txt"):
        os.lchown(path, OWNER, OWNER)
    home = ROOT / "nobody"
    home.mkdir()
    os.chown(home, 65534, 65534)


def server_argv(vm):
    import json
    entry = json.loads(Path(vm.config["mcp_json"]).read_text())["mcpServers"]["nix-sandbox"]
    return [entry["command"], *entry["args"]]


def forks_line(client):
    lines = [line.split("self-test:", 1)[1].strip() for line in client.stderr if "self-test: forks:" in line]
    check(len(lines) == 1, f"no forks: line: {''.join(client.stderr)[-1500:]}")
    return lines[0]


def host_unchanged():
    notes = PROJECT / "notes.txt"
    stat = notes.stat()
    check(notes.read_text() == NOTES and (stat.st_uid, stat.st_mode & 0o777) == (OWNER, 0o600),
          f"the host's project changed: {notes.read_text()!r} {stat}")
    check(sorted(p.name for p in PROJECT.iterdir()) == ["notes.txt"], f"the host's project: {list(PROJECT.iterdir())}")


def test_root_project_and_fork(vm):
    """a root server: the owner's mode-0600 file edited through the idmapped project, the host unchanged; a fork of it"""
    overlay()
    env = {"PATH": "/usr/bin:/bin", "HOME": "/root", "RUST_LOG": "info", "PROJECT_DIR": str(PROJECT),
           "NIX_SANDBOX_PROJECT_WRITABLE": "1", "NIX_SANDBOX_MAX_CHECKPOINTS": "2"}
    client = McpClient(server_argv(vm), env)
    try:
        client.initialize("nix-sandbox-mcp-vm")
        result, text = reprobed(lambda: call_session(client, "w", "echo edit >> /project/notes.txt && echo new > "
                                             "/project/new.txt && cat /project/notes.txt"), "workbench, root")
        check(text.startswith(NOTES + "edit\n") and "project: 2 files changed" in text and "checkpoint: w@1" in text,
              f"{result} {''.join(client.stderr)[-1500:]}")
        host_unchanged()
        line = forks_line(client)
        info(f"workbench, root: {line}")
        result, text = call_session(client, "f", "cat /project/notes.txt /project/new.txt; stat -f -c %T /workspace",
                            start="w@1")
        kind = "tmpfs" if line.startswith("forks: copied") else "overlayfs"
        check(text.startswith(f"{NOTES}edit\nnew\n{kind}\n") and "started from w@1" in text,
              f"{result} {''.join(client.stderr)[-1500:]}")
        result, text = call_session(client, "f", "echo f >> /project/notes.txt; cat /project/notes.txt")
        check(text.startswith(f"{NOTES}edit\nf\n"), f"{result}")
        result, text = call_session(client, "w", "cat /project/notes.txt")
        check(text.startswith(f"{NOTES}edit\n") and "\nf\n" not in text, f"the fork's write reached w: {result}")
        host_unchanged()
    finally:
        client.close()


def test_user_fork_mounted(vm):
    """a server run as an unprivileged user: a fork mounted over the checkpoint, diverging from its source"""
    overlay()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(ROOT / "nobody"), "RUST_LOG": "info",
           "NIX_SANDBOX_MAX_CHECKPOINTS": "2"}
    client = McpClient(vm.as_user(65534, server_argv(vm), env), None)
    try:
        client.initialize("nix-sandbox-mcp-vm")
        result, text = reprobed(lambda: call_session(client, "a", "echo one > f && echo ok"), "workbench, user")
        check(text.startswith("ok\n") and "checkpoint: a@1" in text, f"{result} {''.join(client.stderr)[-1500:]}")
        line = forks_line(client)
        info(f"workbench, user: {line}")
        check(not line.startswith("forks: copied"), line)
        result, text = call_session(client, "b", "stat -f -c %T /workspace; cat f; echo two > f", start="a@1")
        check(text.startswith("overlayfs\none\n"), f"{result} {''.join(client.stderr)[-1500:]}")
        result, text = call_session(client, "a", "cat f")
        check(text.startswith("one\n"), f"the fork's write reached its source: {result}")
    finally:
        client.close()
