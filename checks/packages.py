#!/usr/bin/env python3
"""Packages on demand end to end: the Nix-built servers of
checks/packagesServers.nix over MCP, with the real compose helper and Nix.

Run by checks/run as root, next to e2e.py, whose minimal MCP client and
test runner it uses, three times: the servers as root; as user 65534
without a Nix daemon (--as-user 65534 --unreachable); as user 65534 through
a nix-daemon this script starts as root on a socket of its own and stops
at the end (--as-user 65534 --daemon). Prints one line per test,
`ok - LABEL: packages: name`, `FAIL - ...: reason`, and exits 1 when a
test failed.

  packages.py --label root --server OUT --nobuild OUT --python OUT

--server is `packages-server` (python and shell presets; allowed: jq,
ripgrep, hello, python3Packages.*; building on), --nobuild is
`packages-nobuild` (python, any attribute, the binary cache only), --python
the python preset the servers serve. With --unreachable the user has no
Nix store it may use (no daemon): every composition must end in the
nix_unreachable line, and everything else still works. Each server runs
with a HOME of its own, so its cache of compositions starts empty.
"""

import argparse
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from e2e import DEADLINE, Failed, McpClient, Suite, check, facts

COMPOSING = "composing the environment with packages"
FROM_CACHE = "composed environment found in the cache"
JQ = "import subprocess\nprint('jq:', subprocess.run(['jq', '-n', '1+1'], capture_output=True, text=True).stdout.strip())"
RG = "import subprocess\nprint(subprocess.run(['rg', '--version'], capture_output=True, text=True).stdout.split()[0])"
WHICH = "import shutil\nprint(shutil.which('{}'))"


# How the servers run: as whom (argv prefix), with which Nix variables.
AS = {"prefix": [], "uid": None, "env": {}}


def start(server, home):
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "RUST_LOG": "info", **AS["env"]}
    if "NIX_CONFIG" in os.environ:
        env["NIX_CONFIG"] = os.environ["NIX_CONFIG"]
    if AS["uid"] is not None:
        os.chown(home, AS["uid"], AS["uid"])
    client = McpClient(AS["prefix"] + [f"{server}/bin/nix-sandbox-mcp"], env)
    client.initialize("packages.py")
    return client


def start_daemon(scratch):
    """A nix-daemon (as root) on a socket of its own under `scratch`, for
    the unprivileged servers; returns its Popen (its own process group)."""
    socket = Path(scratch) / "daemon" / "socket"
    socket.parent.mkdir()
    socket.parent.chmod(0o755)
    env = {**os.environ, "NIX_DAEMON_SOCKET_PATH": str(socket),
           "NIX_CONFIG": os.environ.get("NIX_CONFIG", "") + "\nbuild-users-group ="}
    daemon = subprocess.Popen(["nix-daemon"], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=open(Path(scratch) / "daemon.log", "w"), start_new_session=True)
    end = time.monotonic() + DEADLINE
    while not socket.exists():
        check(daemon.poll() is None and time.monotonic() < end,
              f"nix-daemon did not start: {(Path(scratch) / 'daemon.log').read_text()[-400:]}")
        time.sleep(0.05)
    socket.chmod(0o666)
    AS["env"] = {"NIX_REMOTE": "daemon", "NIX_DAEMON_SOCKET_PATH": str(socket)}
    return daemon


@contextlib.contextmanager
def served(server, home=None):
    """A started server (its client) with a HOME of its own, or `home`."""
    with contextlib.ExitStack() as stack:
        if home is None:
            home = stack.enter_context(tempfile.TemporaryDirectory(prefix="nsm-packages-"))
        client = start(server, home)
        stack.callback(client.close)
        client.home = home
        yield client


def stop_daemon(daemon):
    if daemon.pid > 1 and daemon.poll() is None:
        os.killpg(daemon.pid, signal.SIGTERM)
    daemon.wait(timeout=DEADLINE)


def call(client, arguments, meta=None):
    """(result, text, progress notifications) of one `run` call."""
    params = {"name": "run", "arguments": arguments}
    if meta:
        params["_meta"] = meta
    client.next_id += 1
    client.send({"jsonrpc": "2.0", "id": client.next_id, "method": "tools/call", "params": params})
    progress = []
    end = time.monotonic() + DEADLINE
    while True:
        try:
            line = client.lines.get(timeout=max(0.1, end - time.monotonic()))
        except queue.Empty:
            raise Failed(f"no answer to {arguments} within {DEADLINE} s") from None
        if line is None:
            raise Failed(f"the server closed stdout; stderr: {''.join(client.stderr)[-800:]}")
        message = json.loads(line)
        if message.get("method") == "notifications/progress":
            progress.append(message["params"])
        elif message.get("id") == client.next_id:
            check("error" not in message, f"tools/call failed: {message.get('error')}")
            result = message["result"]
            text = "".join(c.get("text", "") for c in result["content"] if c.get("type") == "text")
            return result, text, progress


def ok(result, text, want):
    check(not result.get("isError") and text.strip() == want,
          f"wanted {want!r}, got isError={result.get('isError')} {text[-600:]!r}")


def refused(text, code, *parts):
    check(text.startswith(f"error[{code}]: "), f"wanted error[{code}], got {text[-600:]!r}")
    for part in parts:
        check(part in text, f"wanted {part!r} in {text!r}")
    check("\n" not in text.strip(), f"a refusal is one line: {text!r}")


def count(client, line):
    return sum(line in l for l in client.stderr)


def t_offered(server):
    with served(server) as client:
        tools = client.request("tools/list", {})["tools"]
        schema = tools[0]["inputSchema"]["properties"]
        check(schema.get("packages", {}).get("type") == "array", f"no `packages` in {schema}")


def t_jq(server, python, unreachable):
    with served(server) as client:
        result, text, _ = call(client, {"code": WHICH.format("jq")})
        ok(result, text, "None")
        result, text, _ = call(client, {"code": JQ, "packages": ["jq"]})
        if unreachable:
            refused(text, "nix_unreachable", "Nix daemon")
            result, text, _ = call(client, {"code": "print('up')"})
            ok(result, text, "up")
            return
        ok(result, text, "jq: 2")
        composed = facts(result).get("store_path", "")
        base = json.loads((Path(python) / "share/nix-sandbox-mcp/manifest.json").read_text())
        base = base["environments"]["python"]["store_path"]
        check(composed.startswith("/nix/store/") and composed.endswith("-sandbox-python")
              and composed != base, f"the receipt names {composed!r}, not a composed python (base {base})")
        result, text, _ = call(client, {"code": "import numpy\nprint(numpy.__file__.startswith('/nix/store/'))",
                                        "packages": ["python3Packages.numpy"]})
        ok(result, text, "True")


def t_refused_before_evaluation(server):
    with served(server) as client:
        for name in ["jq; rm -rf /", "${builtins.readFile}", "../x", "a..b", ".jq", "jq\n"]:
            _, text, _ = call(client, {"code": "print(1)", "packages": [name]})
            refused(text, "bad_package_name", "not a nixpkgs attribute name")
        _, text, _ = call(client, {"code": "print(1)", "packages": ["ffmpeg"]})
        refused(text, "packages_not_allowed", "`ffmpeg`", "allowed: jq, ripgrep, hello, python3Packages.*")
        _, text, _ = call(client, {"code": "print(1)", "packages": [f"p{i}" for i in range(17)]})
        refused(text, "bad_package_name", "17 packages")
        _, text, _ = call(client, {"code": "print(1)", "env": "shell", "packages": ["python3Packages"]})
        refused(text, "packages_not_allowed", "`python3Packages`")
        check(count(client, COMPOSING) == 0 and not list(Path(client.home).rglob("*.request.json")),
              f"a refused name reached the compose helper: {''.join(client.stderr)[-800:]}")
        result, text, _ = call(client, {"code": "print('up')"})
        ok(result, text, "up")


def t_unknown(server):
    with served(server) as client:
        _, text, _ = call(client, {"code": "print(1)", "packages": ["python3Packages.numpyy"]})
        refused(text, "unknown_package", "python3Packages.numpyy", "close: python3Packages.numpy")
        result, text, _ = call(client, {"code": "print('up')"})
        ok(result, text, "up")


def t_not_cached(nobuild):
    with served(nobuild) as client:
        _, text, _ = call(client, {"code": "print(1)", "packages": ["hello"]})
        refused(text, "package_not_cached", "hello-2.12.1", "packagesOnDemand.build")


def t_session(server):
    with served(server) as client:
        result, text, _ = call(client, {"code": "x = 41\n" + JQ, "session": "s", "packages": ["jq"]})
        ok(result, text, "jq: 2")
        result, text, _ = call(client, {"code": "x += 1\nprint(f'x={x}')\n" + JQ, "session": "s"})
        ok(result, text, "x=42\njq: 2")
        result, text, _ = call(client, {"code": "print(f'x={x}')", "session": "s", "env": "python"})
        ok(result, text, "x=42")
        _, text, _ = call(client, {"code": "print(x)", "session": "s", "packages": ["ripgrep"]})
        refused(text, "session_packages_mismatch", "session `s`", "jq", "ripgrep")
        call(client, {"code": "1", "session": "plain"})
        _, text, _ = call(client, {"code": "1", "session": "plain", "packages": ["jq"]})
        refused(text, "session_packages_mismatch", "packages none")


def t_cached(server):
    with tempfile.TemporaryDirectory(prefix="nsm-packages-") as home:
        with served(server, home) as client:
            result, text, _ = call(client, {"code": JQ, "packages": ["jq"]})
            ok(result, text, "jq: 2")
            result, text, _ = call(client, {"code": JQ, "packages": ["jq", "jq"]})
            ok(result, text, "jq: 2")
            check(count(client, COMPOSING) == 1, "the second call composed again")
        # A new server finds the composition on disk: nothing is evaluated.
        with served(server, home) as client:
            result, text, _ = call(client, {"code": JQ, "packages": ["jq"]})
            ok(result, text, "jq: 2")
            check(count(client, COMPOSING) == 0 and count(client, FROM_CACHE) == 1,
                  f"a new server did not find the composition on disk: {''.join(client.stderr)[-800:]}")


def t_not_blocking(server):
    """One composition in flight: a plain call is answered first, two calls
    for one set share one realisation, and progress is notified."""
    with served(server) as client:
        answers = {}
        first = client.next_id + 1
        for offset, (arguments, meta) in enumerate([
            ({"code": RG, "packages": ["ripgrep"]}, {"progressToken": "p1"}),
            ({"code": RG, "packages": ["ripgrep"]}, None),
            ({"code": "print('plain')"}, None),
        ]):
            params = {"name": "run", "arguments": arguments}
            if meta:
                params["_meta"] = meta
            client.send({"jsonrpc": "2.0", "id": first + offset, "method": "tools/call", "params": params})
        client.next_id = first + 2
        order, progress = [], []
        end = time.monotonic() + DEADLINE
        while len(answers) < 3:
            line = client.lines.get(timeout=max(0.1, end - time.monotonic()))
            check(line is not None, "the server closed stdout")
            message = json.loads(line)
            if message.get("method") == "notifications/progress":
                progress.append(message["params"])
            elif "id" in message:
                answers[message["id"]] = message["result"]
                order.append(message["id"])
        check(order[0] == first + 2, f"the plain call waited for the composition (answers in order {order})")
        for i in (first, first + 1):
            text = "".join(c.get("text", "") for c in answers[i]["content"])
            check(text.strip() == "ripgrep", f"call {i}: {text!r}")
        check(count(client, COMPOSING) == 1, "two calls for one set composed twice")
        check(progress and all(p["progressToken"] == "p1" for p in progress)
              and "ripgrep" in progress[0].get("message", ""),
              f"progress notifications: {progress}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", default=os.environ.get("USER") or str(os.getuid()))
    parser.add_argument("--server", required=True)
    parser.add_argument("--nobuild", required=True)
    parser.add_argument("--python", required=True)
    parser.add_argument("--unreachable", action="store_true")
    parser.add_argument("--as-user", type=int, metavar="UID")
    parser.add_argument("--daemon", action="store_true")
    args = parser.parse_args()
    if args.as_user is not None:
        uid = str(args.as_user)
        AS["prefix"] = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        AS["uid"] = args.as_user

    suite = Suite(f"{args.label}: packages")
    daemon = None
    if args.daemon:
        scratch = tempfile.mkdtemp(prefix="nsm-packages-daemon-")
        os.chmod(scratch, 0o755)
        daemon = start_daemon(scratch)
    try:
        tests(suite, args)
    finally:
        if daemon is not None:
            stop_daemon(daemon)
    sys.exit(1 if suite.failed else 0)


def tests(suite, args):
    suite.test("tools/list offers `packages`", t_offered, args.server)
    if args.unreachable:
        suite.test("without a Nix store it may use, `packages` gets nix_unreachable and the server goes on",
                   t_jq, args.server, args.python, True)
    else:
        suite.test("python with packages=[jq] runs jq, python3Packages.numpy imports, the receipt names "
                   "the composed store path", t_jq, args.server, args.python, False)
    suite.test("shell or Nix syntax, an unlisted name, too many names: refused, nothing evaluated",
               t_refused_before_evaluation, args.server)
    if not args.unreachable:
        suite.test("an unknown attribute is named with close names", t_unknown, args.server)
        suite.test("from the binary cache only, an unbuilt package gets package_not_cached", t_not_cached,
                   args.nobuild)
        suite.test("a session made with packages keeps them; other packages for it are refused",
                   t_session, args.server)
        suite.test("a second call, and a new server, reuse the composition without evaluating", t_cached,
                   args.server)
        suite.test("a composition blocks no other call, is shared by two calls, notifies progress",
                   t_not_blocking, args.server)


if __name__ == "__main__":
    main()
