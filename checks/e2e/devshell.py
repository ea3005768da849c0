#!/usr/bin/env python3
"""The project's dev shell as the environment `project` (docs/devshell.md):
the Nix-built server with NIX_SANDBOX_PROJECT_DEVSHELL=1 over a test
project whose flake's dev shell (the stand-in's mkShell) brings gcc, a
variable and a shellHook.

Run by checks/run as root, with e2e.py's test runner and packages.py's
client, twice: the server as root, and as user 65534 through a nix-daemon
this script starts (--as-user 65534 --daemon), since the dev shell is
built by the server's own Nix. Prints one line per test, `ok - LABEL:
devshell: name`, `FAIL - ...: reason`, and exits 1 when a test failed.

  devshell.py --label root --server OUT --hostpkgs DIR --nixpkgs-lib PATH

--server is the flake's default server package, --hostpkgs the stand-in
package set's flake (checks/hostpkgs), --nixpkgs-lib the nixpkgs lib in
the store its lock names (the project's flake.lock is written with it, as
checks/run overrides it).

What it shows: `project` is offered; in it, a C program in the project is
built (in /workspace: the project is read-only here) and run, and the dev
shell's variable is seen, its secret-named and host-path variables are
not; the shellHook ran in the jail and got neither a host file, a key in
the server's home, the host's /tmp (its write lands in the jail's), a host
listener (curl's own error, `curl: (7)`, is its note) nor a name
(`curl: (6)`); a session sees the same; the environment is built once, found
in the cache by a second server, and built again at the next call after
flake.nix changes (a session made before keeps its own); with the
project writable too, the dev shell's gcc builds the project in /project
and a test of it passes, the binary is listed in the diff, the host's tree
is unchanged and the host's edit of the source is seen; a flake whose dev
shell reads a host file (refused by the pure evaluation) gets one line
naming the flake and the error, and the other environments work.
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from e2e import DEADLINE, Suite, check, env_names
from packages import AS, call, count, ok, refused, served, start_daemon, stop_daemon
from workbench import snapshot

BUILDING = "building the environment from the project's dev shell"
FROM_CACHE = "composed environment found in the cache"
MAIN_C = '#include <stdio.h>\nint main(void) { printf("built with the dev shell\\n"); return 0; }\n'
FLAKE = """{
  inputs.nixpkgs.url = "path:@HOSTPKGS@";
  outputs =
    { self, nixpkgs }:
    let
      pkgs = nixpkgs.legacyPackages.x86_64-linux;
    in
    {
      devShells.x86_64-linux.default = pkgs.mkShell {
        packages = [ pkgs.gcc pkgs.curl ];
        PROJECT_GREETING = "@GREETING@";
        API_TOKEN = "not-for-the-jail";
        HOST_FILE = "@SECRET@";
        @EXTRA@
        shellHook = ''
          export HOOK_RAN=yes
          export HOOK_FILE=$(cat @SECRET@ 2>/dev/null || echo unreadable)
          export HOOK_NET=$( (exec 3<>/dev/tcp/127.0.0.1/@PORT@) 2>/dev/null && echo reached || echo refused)
          export HOOK_HOME=$(cat @HOMESECRET@ 2>/dev/null || echo unreadable)
          echo written-by-the-hook > @HOSTTMP@ 2>/dev/null
          export HOOK_CURL=$(curl -sS -m 5 http://127.0.0.1:@PORT@/ >/dev/null 2>/tmp/curl.err && echo reached || head -c 9 /tmp/curl.err)
          export HOOK_DNS=$(curl -sS -m 5 https://example.com/ >/dev/null 2>/tmp/curl.err && echo reached || head -c 9 /tmp/curl.err)
        '';
      };
    };
}
"""
REPORT = ('cc -o /workspace/hello /project/main.c && /workspace/hello; '
          'echo "greeting=$PROJECT_GREETING token=${API_TOKEN-unset} host=${HOST_FILE-unset}"; '
          'echo "hook=${HOOK_RAN-unset} file=$HOOK_FILE net=$HOOK_NET"; '
          'echo "home=$HOOK_HOME curl=$HOOK_CURL dns=$HOOK_DNS"')


def want(greeting):
    return (f"built with the dev shell\ngreeting={greeting} token=unset host=unset\n"
            "hook=yes file=unreadable net=refused\n"
            "home=unreadable curl=curl: (7) dns=curl: (6)")


class Listener:
    """A host loopback listener that counts the connections it gets."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()


def write_project(project, args, listener, secret, greeting, extra=""):
    project.mkdir(parents=True, exist_ok=True)
    text = (FLAKE.replace("@HOSTPKGS@", args.hostpkgs).replace("@GREETING@", greeting)
            .replace("@SECRET@", str(secret)).replace("@PORT@", str(listener.port)).replace("@EXTRA@", extra)
            .replace("@HOMESECRET@", str(scratch_of(project) / "home" / ".ssh" / "id_ed25519"))
            .replace("@HOSTTMP@", str(host_tmp(project))))
    (project / "flake.nix").write_text(text)
    (project / "main.c").write_text(MAIN_C)
    lock = project / "flake.lock"
    if not lock.exists():
        subprocess.run(["nix", "--extra-experimental-features", "nix-command flakes", "flake", "lock",
                        "--override-input", "nixpkgs/nixpkgs-lib", f"path:{args.nixpkgs_lib}", str(project)],
                       check=True, capture_output=True, timeout=DEADLINE)
    for path in [project, *project.iterdir()]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)


def scratch_of(project):
    """The test's scratch directory, which holds `project`."""
    return project.parent


def host_tmp(project):
    """A path in the host's /tmp the shellHook tries to write."""
    return Path("/tmp") / f"nsm-devshell-hook-{scratch_of(project).name}"


def env_for(project):
    return {"PROJECT_DIR": str(project), "NIX_SANDBOX_PROJECT_DEVSHELL": "1"}


def t_built(args, scratch, listener, secret):
    project = scratch / "project"
    write_project(project, args, listener, secret, "first")
    home = scratch / "home"
    # The server's own home holds a key the hook tries to read (by its
    # host path: in the jail, ~ is the jail's).
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("the server's private key\n")
    for path, mode in [(home, 0o755), (home / ".ssh", 0o755), (home / ".ssh" / "id_ed25519", 0o644)]:
        os.chmod(path, mode)
    with served(args.server, home=home, env=env_for(project)) as client:
        tools = client.request("tools/list", {})["tools"]
        envs = tools[0]["inputSchema"]["properties"]["env"]
        check("project" in env_names(envs), f"`project` not offered: {envs}")
        result, text, _ = call(client, {"env": "project", "code": REPORT})
        ok(result, text, want("first"))
        check(listener.accepted == 0, f"the shellHook reached the host's listener {listener.accepted} times")
        result, text, _ = call(client, {"env": "project", "session": "dev", "code": REPORT})
        ok(result, text, want("first"))
        result, text, _ = call(client, {"env": "project", "session": "dev", "code": 'echo "again=$HOOK_RAN"'})
        ok(result, text, "again=yes")
        check(count(client, BUILDING) == 1, f"built {count(client, BUILDING)} times, wanted once")
        check(listener.accepted == 0, f"the shellHook reached the host's listener {listener.accepted} times")
        check(not host_tmp(project).exists(), f"the shellHook wrote the host's {host_tmp(project)}")
        # The dev shell changes: the next call without a session builds it
        # again; the session keeps the environment it started with.
        write_project(project, args, listener, secret, "second")
        result, text, _ = call(client, {"env": "project", "code": 'echo "greeting=$PROJECT_GREETING"'})
        ok(result, text, "greeting=second")
        result, text, _ = call(client, {"env": "project", "session": "dev", "code": 'echo "greeting=$PROJECT_GREETING"'})
        ok(result, text, "greeting=first")
        check(count(client, BUILDING) == 2, f"built {count(client, BUILDING)} times, wanted twice")
    # A new server with the same cache builds nothing.
    with served(args.server, home=home, env=env_for(project)) as client:
        result, text, _ = call(client, {"env": "project", "code": 'echo "greeting=$PROJECT_GREETING"'})
        ok(result, text, "greeting=second")
        check(count(client, BUILDING) == 0 and count(client, FROM_CACHE) == 1,
              f"a second server built again: {''.join(client.stderr)[-800:]}")


def t_workbench(args, scratch, listener, secret):
    """With the project writable too: the dev shell's compiler builds and
    tests the project in place, the diff comes back, the host's tree is
    byte for byte unchanged, and an edit on the host is seen."""
    project = scratch / "bench"
    write_project(project, args, listener, secret, "bench")
    (project / "test.sh").write_text('set -e\n[ "$(./build/hello)" = "built with the dev shell" ]\n'
                                     'echo "1 test passed"\n')
    os.chmod(project / "test.sh", 0o644)
    if AS.get("uid") is not None:
        # The project is the server's user's, as a real one is.
        subprocess.run(["chown", "-R", f"{AS['uid']}:{AS['uid']}", str(project)], check=True)
    before = snapshot(project)
    env = {**env_for(project), "NIX_SANDBOX_PROJECT_WRITABLE": "1"}
    with served(args.server, env=env) as client:
        result, text, _ = call(client, {"env": "project", "session": "b", "code":
                                        "cd /project && mkdir -p build && cc -o build/hello main.c && sh test.sh"})
        check(not result.get("isError") and text.startswith("1 test passed\n"), f"not built and tested: {text!r}")
        check("project: 1 file changed, +0 -0 (diff: sandbox://b/project.diff)" in text, f"no project line: {text!r}")
        read = client.request("resources/read", {"uri": "sandbox://b/project.diff"})
        d = read["contents"][0]["text"]
        check(d.startswith("# project: 1 file changed") and "Binary or special files" in d
              and "b/build/hello" in d, f"the binary is not listed: {d[:600]!r}")
        check(snapshot(project) == before, "the host's project changed")
        # The person edits the source on the host: the next call builds it.
        (project / "main.c").write_text(MAIN_C.replace("built with", "rebuilt with"))
        before = snapshot(project)
        result, text, _ = call(client, {"env": "project", "session": "b", "code":
                                        "cd /project && cc -o build/hello main.c && ./build/hello"})
        check(text.startswith("rebuilt with the dev shell\n"), f"the host's edit is not seen: {text!r}")
        check(snapshot(project) == before, "the host's project changed")


def t_broken(args, scratch, listener, secret):
    project = scratch / "broken"
    write_project(project, args, listener, secret, "broken",
                  extra=f'STOLEN = builtins.readFile "{secret}";')
    with served(args.server, env=env_for(project)) as client:
        _, text, _ = call(client, {"env": "project", "code": "echo never"})
        refused(text, "dev_shell_failed", f"flake {project}:", "pure")
        check("never" not in text and "the host's secret" not in text, f"leaked: {text!r}")
        result, text, _ = call(client, {"env": "shell", "code": "echo up"})
        ok(result, text, "up")
        # Remembered, not built again at once.
        _, text, _ = call(client, {"env": "project", "code": "echo never"})
        refused(text, "dev_shell_failed", f"flake {project}:")
        check(count(client, BUILDING) == 1, f"built {count(client, BUILDING)} times, wanted once")


def t_off(args, scratch, listener, secret):
    project = scratch / "project"
    with served(args.server, env={"PROJECT_DIR": str(project)}) as client:
        envs = client.request("tools/list", {})["tools"][0]["inputSchema"]["properties"]["env"]
        check("project" not in env_names(envs), f"`project` offered with the setting off: {envs}")
        _, text, _ = call(client, {"env": "project", "code": "echo never"})
        refused(text, "unknown_env")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", default=os.environ.get("USER") or str(os.getuid()))
    parser.add_argument("--server", required=True)
    parser.add_argument("--hostpkgs", required=True)
    parser.add_argument("--nixpkgs-lib", required=True)
    parser.add_argument("--as-user", type=int, metavar="UID")
    args = parser.parse_args()
    suite = Suite(f"{args.label}: devshell")
    scratch = Path(tempfile.mkdtemp(prefix="nsm-devshell-"))
    os.chmod(scratch, 0o755)
    daemon = None
    if args.as_user is not None:
        uid = str(args.as_user)
        AS["prefix"] = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        AS["uid"] = args.as_user
        daemon = start_daemon(scratch)
    secret = scratch / "host-secret"
    secret.write_text("the host's secret\n")
    secret.chmod(0o644)
    listener = Listener()
    try:
        suite.test("the dev shell's gcc builds and runs a C program, its variable is seen (not a secret or a "
                   "host path), its shellHook ran in the jail without the host's files or network; built once, "
                   "cached across servers, built again when flake.nix changes; a session keeps its own",
                   t_built, args, scratch, listener, secret)
        suite.test("with the project writable too, the dev shell's compiler builds and tests it in /project: "
                   "the binary in the diff, the host's tree unchanged, the host's edit seen by the next call",
                   t_workbench, args, scratch, listener, secret)
        suite.test("a dev shell that reads a host file fails the pure evaluation: one line naming the flake, "
                   "remembered, the other environments work", t_broken, args, scratch, listener, secret)
        suite.test("with the setting off there is no `project`", t_off, args, scratch, listener, secret)
    finally:
        if daemon is not None:
            stop_daemon(daemon)
        subprocess.run(["rm", "-rf", str(scratch)], check=False)
    sys.exit(1 if suite.failed else 0)


if __name__ == "__main__":
    main()
