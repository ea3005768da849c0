#!/usr/bin/env python3
"""Packages on demand end to end: the Nix-built servers of
checks/flakes/packagesServers.nix over MCP, with the real compose helper and Nix.

Run by checks/run as root, next to e2e.py, whose minimal MCP client and
test runner it uses, three times: the servers as root; as user 65534
without a Nix daemon (--as-user 65534 --unreachable); as user 65534 through
a nix-daemon this script starts as root on a socket of its own and stops
at the end (--as-user 65534 --daemon). Prints one line per test,
`ok - LABEL: packages: name`, `FAIL - ...: reason`, and exits 1 when a
test failed.

  packages.py --label root --server OUT --nobuild OUT --python OUT

--server is `packages-server` (python and shell presets; allowed: jq,
ripgrep, hello, slowBuild, python3Packages.*; building on), --nobuild is
`packages-nobuild` (python, any attribute, the binary cache only), --python
the python preset the servers serve. With --unreachable the user has no
Nix store it may use (no daemon): every composition must end in the
nix_unreachable line, and everything else still works. Each server runs
with a HOME of its own, so its cache of compositions starts empty, and a
HOSTPKGS_TEST_RUN of its own, which the stand-in's `hello` and
`slowBuild` carry: their derivations are new in each server's run, so no
test depends on what the store already holds.
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
import uuid
from pathlib import Path

from e2e import DEADLINE, Failed, McpClient, Suite, check, descendants, facts, pids, processes

COMPOSING = "composing the environment with packages"
FROM_CACHE = "composed environment found in the cache"
JQ = "import subprocess\nprint('jq:', subprocess.run(['jq', '-n', '1+1'], capture_output=True, text=True).stdout.strip())"
RG = "import subprocess\nprint(subprocess.run(['rg', '--version'], capture_output=True, text=True).stdout.split()[0])"
WHICH = "import shutil\nprint(shutil.which('{}'))"
PLANTED = "the-planted-wrapper-ran"


# How the servers run: as whom (argv prefix), with which Nix variables.
AS = {"prefix": [], "uid": None, "env": {}}


def start(server, home, env=None, args=()):
    """A server started with a HOME of its own (`home`; None: no HOME), a
    fresh HOSTPKGS_TEST_RUN, and `env` on top (a value of None unsets)."""
    base = {"PATH": "/usr/bin:/bin", "RUST_LOG": "info", "HOSTPKGS_TEST_RUN": uuid.uuid4().hex, **AS["env"]}
    if home is not None:
        base["HOME"] = str(home)
    if "NIX_CONFIG" in os.environ:
        base["NIX_CONFIG"] = os.environ["NIX_CONFIG"]
    for name, value in (env or {}).items():
        if value is None:
            base.pop(name, None)
        else:
            base[name] = value
    if AS["uid"] is not None and home is not None:
        os.chown(home, AS["uid"], AS["uid"])
    client = McpClient(AS["prefix"] + [f"{server}/bin/nix-sandbox-mcp", *args], base)
    client.initialize("packages.py")
    client.env = base
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
def served(server, home=None, env=None, args=()):
    """A started server (its client) with a HOME of its own, or `home`;
    `env` and `args` as start() takes them."""
    with contextlib.ExitStack() as stack:
        if home is None:
            home = stack.enter_context(tempfile.TemporaryDirectory(prefix="nsm-packages-"))
        client = start(server, home, env, args)
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
        refused(text, "packages_not_allowed", "`ffmpeg`", "allowed: jq, ripgrep, hello, slowBuild, python3Packages.*")
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


def t_not_cached(server, nobuild):
    """`hello` built once where building is on, then asked of a server that
    takes the binary cache only: its derivation is new in that server's
    run, so what was built before decides nothing."""
    with served(server) as client:
        result, text, _ = call(client, {"code": WHICH.format("hello"), "packages": ["hello"]})
        check(not result.get("isError") and text.strip().endswith("/bin/hello"), f"hello was not built: {text!r}")
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



def send(client, arguments):
    """Sends one `run` call without waiting; its request id."""
    client.next_id += 1
    client.send({"jsonrpc": "2.0", "id": client.next_id, "method": "tools/call",
                 "params": {"name": "run", "arguments": arguments}})
    return client.next_id


def answers(client, into):
    """Moves the answers waiting in `client.lines` into `into` (id -> text),
    without blocking."""
    while True:
        try:
            line = client.lines.get_nowait()
        except queue.Empty:
            return
        check(line is not None, f"the server closed stdout: {''.join(client.stderr)[-800:]}")
        message = json.loads(line)
        if "id" in message and "result" in message:
            into[message["id"]] = "".join(c.get("text", "") for c in message["result"]["content"])


def t_scope(server, unreachable):
    """An allowlist prefix (python3Packages.) allows the packages directly
    in its scope, and nothing the scope leads to: not the package set it
    carries (pkgs, and the stages, cross sets and spliced set at its top),
    not the scope itself again, not its stdenv, nothing that is not a
    package. Names deeper than one attribute are refused before anything is
    evaluated; the others by the compose helper, which looks at them."""
    with served(server) as client:
        for name in ["python3Packages.pkgs.curl", "python3Packages.pkgs.buildPackages.curl",
                     "python3Packages.pkgs.pkgsCross.gnu64.curl", "python3Packages.pkgs.__splicedPackages.curl",
                     "python3Packages.pythonPackages.python.pkgs.pkgs.curl", "python3Packages.python.pkgs.numpy"]:
            _, text, _ = call(client, {"code": WHICH.format("curl"), "packages": [name]})
            refused(text, "packages_not_allowed", f"`{name}`", "python3Packages.*")
        check(count(client, COMPOSING) == 0, f"a name deeper than its prefix was evaluated: {''.join(client.stderr)[-800:]}")
        for name, why in [("python3Packages.stdenv", "the build environment"),
                          ("python3Packages.pkgs", "not a package"),
                          ("python3Packages.pythonPackages", "not a package"),
                          ("python3Packages.lib", "not a package"),
                          ("python3Packages.callPackage", "not a package"),
                          ("python3Packages.pythonImportsCheckHook", "not a Python module of python3Packages")]:
            _, text, _ = call(client, {"code": "print(1)", "packages": [name]})
            if unreachable:
                refused(text, "nix_unreachable")
            else:
                refused(text, "packages_not_allowed", name, why)
        result, text, _ = call(client, {"code": "print('up')"})
        ok(result, text, "up")


def fnv1a(parts):
    """The launcher's name for a cache entry (packages/mod.rs): FNV-1a of
    the parts, each followed by a zero byte."""
    value = 0xCBF29CE484222325
    for part in parts:
        for byte in part.encode() + b"\0":
            value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


def as_other(uid, script):
    """Runs shell `script` as `uid` (another user than the server's)."""
    done = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sh", "-euc", script],
                          capture_output=True, text=True, timeout=DEADLINE)
    check(done.returncode == 0, f"as uid {uid}: {done.stderr[-400:]}")


def planted_sandbox(scratch, server, marker):
    """A store path (added as root: through the daemon, any user may add
    one) that looks like a composed python sandbox, whose wrapper writes
    `marker` and says PLANTED: what must never run."""
    entry = json.loads((Path(server) / "share/nix-sandbox-mcp/manifest.json").read_text())["environments"]["python"]
    entry.pop("packages_on_demand", None)
    tree = Path(scratch) / "planted"
    (tree / "bin").mkdir(parents=True)
    (tree / "share/nix-sandbox-mcp").mkdir(parents=True)
    wrapper = tree / "bin/planted"
    wrapper.write_text(f"#!/bin/sh\necho ran > {marker}\ncat >/dev/null\necho {PLANTED}\n")
    wrapper.chmod(0o755)
    added = subprocess.run(["nix-store", "--add", str(tree)], capture_output=True, text=True, timeout=DEADLINE)
    check(added.returncode == 0, f"nix-store --add: {added.stderr[-400:]}")
    path = added.stdout.strip()
    entry.update({"run": [f"{path}/bin/planted"], "session": [f"{path}/bin/planted"], "store_path": path})
    # The manifest must name the path it is in: added again with it.
    (tree / "share/nix-sandbox-mcp/manifest.json").write_text(json.dumps({"version": 1, "environments": {"python": entry}}))
    added = subprocess.run(["nix-store", "--add", str(tree)], capture_output=True, text=True, timeout=DEADLINE)
    check(added.returncode == 0, f"nix-store --add: {added.stderr[-400:]}")
    return added.stdout.strip()


def t_planted(server, unreachable):
    """Another user pre-makes the packages cache and plants an entry for
    python + jq whose wrapper is not a jail: for a root server without HOME
    (it used to cache under a predictable name in TMPDIR), and for a server
    whose XDG_CACHE_HOME others may write in. The planted wrapper never
    runs; the call composes anew, or is refused with one line naming the
    cache directory and its owner."""
    attacker = 65533 if AS["uid"] == 65534 else 65534
    with tempfile.TemporaryDirectory(prefix="nsm-planted-") as scratch:
        os.chmod(scratch, 0o755)
        shared = Path(scratch) / "tmp"
        shared.mkdir()
        shared.chmod(0o1777)
        marker = shared / "planted-ran"
        with served(server) as client:
            result, _, _ = call(client, {"code": "print(1)"})
            base = facts(result)["store_path"]
        planted = planted_sandbox(scratch, server, marker)
        stem = f"python-{fnv1a([base, 'jq']):016x}"
        key = json.dumps({"store_path": base, "packages": ["jq"]})
        cases = [("XDG_CACHE_HOME others may write in", {"XDG_CACHE_HOME": str(shared)},
                  shared / "nix-sandbox-mcp/packages")]
        if AS["uid"] is None:
            # A server as another user needs a HOME (its jails' passwd).
            cases.append(("no HOME", {"HOME": None, "XDG_CACHE_HOME": None, "TMPDIR": str(shared)},
                          shared / "nix-sandbox-mcp-0/nix-sandbox-mcp/packages"))
        for label, env, cache in cases:
            as_other(attacker, f"mkdir -p {cache} && printf '%s' '{key}' > {cache}/{stem}.json "
                               f"&& ln -s {planted} {cache}/{stem}")
            with served(server, env=env) as client:
                result, text, _ = call(client, {"code": JQ, "packages": ["jq"]})
                check(not marker.exists() and PLANTED not in text,
                      f"{label}: the planted wrapper ran: {text!r}")
                if label == "no HOME" and not unreachable:
                    ok(result, text, "jq: 2")
                elif label == "no HOME":
                    refused(text, "nix_unreachable")
                else:
                    refused(text, "packages_failed", str(shared / "nix-sandbox-mcp"), f"uid {attacker}")
                result, text, _ = call(client, {"code": "print('up')"})
                ok(result, text, "up")
            subprocess.run(["rm", "-rf", *[str(p) for p in shared.glob("nix-sandbox-mcp*")]], check=True)


def builders(run):
    """The live processes whose environment holds this run's
    hostpkgsTestRun: the stand-in's slowBuild builder and what it started."""
    needle = f"hostpkgsTestRun={run}".encode()
    found = []
    for pid in pids():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ.split(b"\0") and state != "Z":
            found.append(pid)
    return found


def t_timeout(server, scratch):
    """slowBuild (a build that sleeps an hour) with a 30 s timeout: the
    builder is seen running, the call gets packages_timed_out, then no
    process of the build is left: with a single-user store the helper's
    whole tree is stopped (Nix starts builders in sessions of their own);
    through the daemon, the daemon stops the build when its client goes."""
    manifest = json.loads((Path(server) / "share/nix-sandbox-mcp/manifest.json").read_text())
    entry = manifest["environments"]["python"]
    entry["packages_on_demand"]["timeout_s"] = 30
    extra = Path(scratch) / f"timeout-{uuid.uuid4().hex}.json"
    extra.write_text(json.dumps({"version": 1, "environments": {"python": entry}}))
    extra.chmod(0o644)
    run = uuid.uuid4().hex
    seen = []
    try:
        with served(server, env={"HOSTPKGS_TEST_RUN": run}, args=["--manifest", str(extra)]) as client:
            asked = send(client, {"code": "print(1)", "packages": ["slowBuild"]})
            got = {}
            end = time.monotonic() + DEADLINE
            while asked not in got and time.monotonic() < end:
                seen = seen or builders(run)
                answers(client, got)
                time.sleep(0.05)
            check(asked in got, f"no answer within {DEADLINE} s")
            check(seen, f"the build never started before the timeout (raise it): {got[asked]!r}")
            refused(got[asked], "packages_timed_out", "longer than 30 s")
            end = time.monotonic() + DEADLINE
            while builders(run) and time.monotonic() < end:
                time.sleep(0.1)
            left = builders(run)
            check(not left, f"the build outlived packages_timed_out: {left} (first seen {seen})")
            result, text, _ = call(client, {"code": "print('up')"})
            ok(result, text, "up")
    finally:
        for pid in builders(run):
            if pid > 1:
                os.kill(pid, signal.SIGKILL)


def t_one_at_once(server):
    """Six calls at once for six sets (each fails in evaluation): on the
    default --max-compositions 1, one nix-instantiate at a time, counted
    among the server's processes while they run; a failed set asked again
    within a minute is answered without evaluating it again."""
    with served(server) as client:
        names = [f"python3Packages.nosuch{i}" for i in range(6)]
        asked = [send(client, {"code": "print(1)", "packages": [name]}) for name in names]
        got, most = {}, 0
        end = time.monotonic() + DEADLINE
        while len(got) < len(asked) and time.monotonic() < end:
            table = processes()
            running = [pid for pid in descendants(client.proc.pid, table) if table[pid][1] == "nix-instantiate"]
            most = max(most, len(running))
            answers(client, got)
            time.sleep(0.005)
        check(len(got) == len(asked), f"answers within {DEADLINE} s: {len(got)} of {len(asked)}")
        for i in asked:
            refused(got[i], "unknown_package")
        check(most == 1, f"{most} nix-instantiate ran at once on one composition slot")
        composed = count(client, COMPOSING)
        _, text, _ = call(client, {"code": "print(1)", "packages": [names[0]]})
        refused(text, "unknown_package", names[0])
        check(count(client, COMPOSING) == composed, "a set that failed a moment ago was evaluated again")


def t_cache_bounded(server):
    """--packages-cache-max 1: composing ripgrep after jq drops jq's GC root
    and key (the least recently used set); jq asked again is composed again."""
    with served(server, args=["--packages-cache-max", "1"]) as client:
        cache = Path(client.home) / ".cache/nix-sandbox-mcp/packages"
        result, text, _ = call(client, {"code": JQ, "packages": ["jq"]})
        ok(result, text, "jq: 2")
        jq = facts(result)["store_path"]
        result, text, _ = call(client, {"code": RG, "packages": ["ripgrep"]})
        ok(result, text, "ripgrep")
        rg = facts(result)["store_path"]
        roots = sorted(os.readlink(p) for p in cache.iterdir() if p.is_symlink())
        keys = [p for p in cache.iterdir() if p.name.endswith(".json")]
        check(roots == [rg] and len(keys) == 1, f"the cache holds {roots} and {len(keys)} keys, not only {rg}")
        result, text, _ = call(client, {"code": JQ, "packages": ["jq"]})
        ok(result, text, "jq: 2")
        check(facts(result)["store_path"] == jq and count(client, COMPOSING) == 3,
              "jq, dropped from the cache, was not composed again")

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
    suite.test("an allowlist prefix allows the packages of its scope, not pkgs, buildPackages, pkgsCross, "
               "__splicedPackages, python.pkgs, stdenv or what is not a package", t_scope, args.server,
               args.unreachable)
    suite.test("a cache another user pre-made (no HOME: TMPDIR; XDG_CACHE_HOME others write in) never runs "
               "its planted wrapper", t_planted, args.server, args.unreachable)
    if not args.unreachable:
        suite.test("an unknown attribute is named with close names", t_unknown, args.server)
        suite.test("hello, built once, is still not in the binary cache of a later run: package_not_cached",
                   t_not_cached, args.server, args.nobuild)
        suite.test("a session made with packages keeps them; other packages for it are refused",
                   t_session, args.server)
        suite.test("a second call, and a new server, reuse the composition without evaluating", t_cached,
                   args.server)
        suite.test("a composition blocks no other call, is shared by two calls, notifies progress",
                   t_not_blocking, args.server)
        suite.test("one nix-instantiate at a time on one composition slot; a failure is remembered",
                   t_one_at_once, args.server)
        suite.test("the cache keeps --packages-cache-max sets, the least recently used dropped",
                   t_cache_bounded, args.server)
        scratch = tempfile.mkdtemp(prefix="nsm-packages-timeout-")
        os.chmod(scratch, 0o755)
        suite.test("a build past the timeout: packages_timed_out, and no process of it is left",
                   t_timeout, args.server, scratch)


if __name__ == "__main__":
    main()
