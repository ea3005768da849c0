#!/usr/bin/env python3
"""End-to-end tests of servers configured by the modules and the template.

Run by checks/eval/modules.sh (standard library only; the MCP client is e2e.py's).
Prints one line per test, `ok - LABEL: name` or `FAIL - LABEL: name: reason`,
and exits 1 when any test failed.

  served.py home --mcp-json FILE --name SERVER
      the server home-manager registered in ~/.config/mcp/mcp.json (the
      docs' snippet, checks/eval/snippets/home-manager.nix), started the way a
      client starts it: its command, args and env from that file.
  served.py nixos --server OUT --service FILE
      the server package the NixOS module puts in systemPackages
      (checks/eval/snippets/nixos.nix) over stdio; then its systemd service as
      systemd would start it (FILE: { ExecStart, environment } as JSON, %d
      the credentials directory holding the token), over HTTP.
  served.py template --server OUT
      the server of a flake made by `nix flake init -t`.
  served.py replace --server OUT --python-replacement OUT --node-ref REF
      the flake's server with a sandbox named `python` in NIX_SANDBOX_DIR
      and a flake ref of one named `node` in NIX_SANDBOX_ENVS: both replace
      the bundled presets (both have jq, which the presets lack).
"""

import argparse
import http.client
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e import DEADLINE, Failed, McpClient, Suite, call_run, check, env_names  # noqa: E402

DATA_SCIENCE = """
import numpy as np, pandas as pd
frame = pd.DataFrame({"x": np.arange(7)})
print(int(frame["x"].sum() * 2))
"""

PLOT = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [4, 5, 6])
plt.savefig("/workspace/plot.png")
print(open("/workspace/plot.png", "rb").read(8) == b"\\x89PNG\\r\\n\\x1a\\n")
"""


def started(argv, env):
    client = McpClient(argv, env)
    init = client.initialize("nix-sandbox-mcp-served")
    return client, init.get("instructions", "")


def served_names(client):
    """The environments the `run` tool's `env` description names
    (`python (default): ...; shell: ...`)."""
    return env_names(schema_env(client))


def schema_env(client):
    """The `run` tool's `env` argument: its description names each environment."""
    return client.request("tools/list", {})["tools"][0]["inputSchema"]["properties"]["env"]


def expect(client, env, code, want):
    result, text = call_run(client, env, code)
    check(not result.get("isError") and text.strip() == want, f"wanted {want!r}, got {result}")


def base_env():
    return {"HOME": os.environ["HOME"], "PATH": "/usr/bin:/bin"}


def home(args, suite, scratch):
    servers = json.loads(Path(args.mcp_json).read_text())["mcpServers"]
    entry = servers.get(args.name)
    env = base_env()
    # A root server's jails run as uids of their own, which must reach the project.
    scratch.chmod(0o755)
    project = scratch / "project"
    project.mkdir()
    (project / "notes.txt").write_text("from the project\n")

    def entry_is_stdio():
        check(entry is not None, f"no {args.name!r} in mcpServers: {sorted(servers)}")
        check(entry.get("type") == "stdio" and entry["args"] == ["--stdio"], f"entry {entry}")
        check(Path(entry["command"]).is_file(), f"command {entry['command']} is not built")
        env.update(entry.get("env", {}))
        # The snippet's projectDir is an example path; the variable is what is tested.
        check(env.get("PROJECT_DIR") == "/home/alice/src/project", f"env {entry.get('env')}")
        env["PROJECT_DIR"] = str(project)

    suite.test("mcp.json has the server as a stdio entry with the snippet's env", entry_is_stdio)
    if entry is None:
        return
    client, instructions = started([entry["command"], *entry["args"]], env)
    try:
        def environments():
            names = served_names(client)
            for name in ["data-science", "python", "shell"]:
                check(name in names, f"the env schema lacks {name}: {names!r}")
            check("node" not in names, f"the disabled node is served: {names!r}")

        suite.test("the server serves data-science, python and shell, not the disabled node", environments)
        suite.test("data-science runs numpy and pandas", expect, client, "data-science", DATA_SCIENCE, "42\nexit code 0")
        suite.test("the project directory is read-only at /project", expect, client, "shell",
                   "cat /project/notes.txt; touch /project/x 2>/dev/null || echo read-only",
                   "from the project\nread-only")
    finally:
        client.close()


def nixos(args, suite, scratch):
    client, instructions = started([args.server + "/bin/nix-sandbox-mcp", "--stdio"], base_env())
    try:
        def environments():
            names = served_names(client)
            for name in ["data-science", "python", "shell", "node"]:
                check(name in names, f"the env schema lacks {name}: {names!r}")

        suite.test("the server serves data-science and the presets", environments)
        suite.test("data-science runs numpy and pandas", expect, client, "data-science", DATA_SCIENCE, "42\nexit code 0")
    finally:
        client.close()
    service(args, suite, scratch)


class HttpMcp:
    """A minimal MCP client over streamable HTTP (one MCP session)."""

    def __init__(self, url, token):
        self.url = urllib.parse.urlsplit(url)
        self.token = token
        self.session = None
        self.next_id = 0

    def post(self, message, token=None, origin=None):
        """(status, headers, JSON-RPC message answering it or None)."""
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if token or self.token:
            headers["Authorization"] = f"Bearer {token or self.token}"
        if origin:
            headers["Origin"] = origin
        if self.session:
            headers["Mcp-Session-Id"] = self.session
            headers["MCP-Protocol-Version"] = "2025-06-18"
        connection = http.client.HTTPConnection(self.url.hostname, self.url.port, timeout=DEADLINE)
        try:
            connection.request("POST", self.url.path, json.dumps(message), headers)
            response = connection.getresponse()
            status, got = response.status, dict(response.headers)
            if status != 200 or "id" not in message:
                response.read()
                return status, got, None
            for line in response:
                line = line.decode().strip()
                if line.startswith("data:"):
                    try:
                        data = json.loads(line[5:])
                    except ValueError:
                        continue
                    if data.get("id") == message["id"]:
                        return status, got, data
            raise Failed(f"the stream ended without an answer to {message['method']}")
        finally:
            connection.close()

    def request(self, method, params, **kwargs):
        self.next_id += 1
        return self.post({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}, **kwargs)

    def initialize(self):
        """The MCP handshake; the server's answer (its instructions)."""
        status, headers, answer = self.request("initialize", {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "nix-sandbox-mcp-served", "version": "1"},
        })
        check(status == 200 and answer and "result" in answer, f"initialize: HTTP {status}, {answer}")
        self.session = {k.lower(): v for k, v in headers.items()}.get("mcp-session-id")
        check(self.session, f"no Mcp-Session-Id in {headers}")
        status, _, _ = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        check(status == 202, f"notifications/initialized: HTTP {status}")
        return answer["result"]

    def run(self, env, code, session=None):
        arguments = {"env": env, "code": code, **({"session": session} if session else {})}
        status, _, answer = self.request("tools/call", {"name": "run", "arguments": arguments})
        check(status == 200 and answer and "result" in answer, f"tools/call: HTTP {status}, {answer}")
        result = answer["result"]
        return result, "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")


NOBODY = 65534


def service(args, suite, scratch):
    """Runs the unit's ExecStart as systemd would: the token in the
    credentials directory (%d), HOME its state directory, and, when the
    harness runs as root, as an unprivileged user (the unit's DynamicUser)."""
    unit = json.loads(Path(args.service).read_text())
    as_root = os.getuid() == 0
    credentials = scratch / "credentials"
    credentials.mkdir(mode=0o700)
    token = "served-token-0123456789abcdef"
    (credentials / "token").write_text(token + "\n")
    state = scratch / "state"
    state.mkdir(mode=0o700)
    argv = [word.replace("%d", str(credentials)) for word in unit["ExecStart"].split(" ")]
    if as_root:
        scratch.chmod(0o755)
        for path in [credentials, credentials / "token", state]:
            os.chown(path, NOBODY, NOBODY)
        argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]
    env = {**unit["environment"], "PATH": "/usr/bin:/bin", "HOME": str(state)}
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True).start()
    try:
        url = None
        log = []

        def listens():
            nonlocal url
            while url is None:
                try:
                    line = lines.get(timeout=DEADLINE)
                except queue.Empty:
                    raise Failed(f"no 'listening on' line within {DEADLINE} s: {''.join(log)}") from None
                log.append(line)
                if "listening on http://" in line:
                    url = "http://" + line.split("listening on http://", 1)[1].split()[0]
            check(url.endswith("/mcp"), f"url {url}")

        who = f"as user {NOBODY}" if as_root else "as this user"
        suite.test(f"the service's ExecStart serves HTTP {who}, the token from %d/token", listens)
        if url is None:
            return
        client = HttpMcp(url, token)

        def refused_without_token():
            anonymous = HttpMcp(url, None)
            status, _, _ = anonymous.request("initialize", {})
            check(status == 401, f"HTTP {status} without a token")
            status, _, _ = HttpMcp(url, "wrong-token-0123456789").request("initialize", {})
            check(status == 401, f"HTTP {status} with a wrong token")

        suite.test("the service answers 401 without the bearer token", refused_without_token)

        def runs():
            client.initialize()
            result, text = client.run("data-science", DATA_SCIENCE)
            check(not result.get("isError") and text == "42\nexit code 0", f"{result}")

        suite.test("the service runs code in data-science over HTTP", runs)

        def sessions_apart():
            other = HttpMcp(url, token)
            other.initialize()
            for who, code, want in [
                (client, "x = 41\nprint('set')", "set"),
                (other, "print('x' in globals())", "False"),
                (client, "print(x + 1)", "42\nexit code 0"),
            ]:
                result, text = who.run("data-science", code, session="s")
                check(not result.get("isError") and text.strip() == want, f"{code!r}: {result}")

        suite.test("two HTTP clients' sessions named alike are apart", sessions_apart)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def template(args, suite, scratch):
    client, instructions = started([args.server + "/bin/nix-sandbox-mcp", "--stdio"], base_env())
    try:
        schema = schema_env(client)
        holds = schema.get("description", "")

        def environments():
            for name in ["data-science", "packaging", "tools", "python", "shell", "node"]:
                check(name in served_names(client), f"the env schema lacks {name}: {schema!r}")

        suite.test("the template's server serves data-science, packaging, tools and the presets", environments)

        def packaging():
            check("packaging: Python with pip (network: pypi.org +1)" in holds,
                  f"the env schema does not say what packaging holds and reaches: {holds!r}")
            code = ("import subprocess, urllib.request\n"
                    "print(subprocess.run(['python3', '-m', 'pip', '--version'], capture_output=True, text=True).stdout.split()[0])\n"
                    "try:\n    urllib.request.urlopen('http://example.com/', timeout=10)\n"
                    "except Exception as e:\n    print(type(e).__name__)")
            expect(client, "packaging", code,
                   "pip\nHTTPError\nnetwork: refused example.com:80 (not in allowlist)")

        suite.test("the template's packaging has pip and reaches only PyPI", packaging)

        def modules_named():
            check("data-science: Python with numpy, pandas and matplotlib" in holds,
                  f"the env schema does not say what data-science holds: {holds!r}")

        suite.test("the tool's schema names the Python modules inside data-science", modules_named)
        suite.test("data-science runs numpy and pandas", expect, client, "data-science", DATA_SCIENCE, "42\nexit code 0")
        suite.test("data-science draws a PNG with matplotlib", expect, client, "data-science", PLOT, "True")
        suite.test("tools runs jq and rg", expect, client, "tools",
                   "echo '{\"a\": 6}' | jq '.a * 7'; printf 'x\\n' | rg -c x", "42\n1")
    finally:
        client.close()


def replace(args, suite, scratch):
    sandbox_dir = scratch / "sandboxes"
    sandbox_dir.mkdir()
    (sandbox_dir / "my-python").symlink_to(args.python_replacement)
    env = {**base_env(), "NIX_SANDBOX_DIR": str(sandbox_dir), "NIX_SANDBOX_ENVS": args.node_ref}
    if "NIX_CONFIG" in os.environ:
        env["NIX_CONFIG"] = os.environ["NIX_CONFIG"]
    client, instructions = started([args.server + "/bin/nix-sandbox-mcp", "--stdio"], env)
    try:
        def described():
            lines = instructions.splitlines()
            holds = schema_env(client).get("description", "")
            for name, want in [("python", "Python with jq, from NIX_SANDBOX_DIR"),
                               ("node", "Node.js with jq, from NIX_SANDBOX_ENVS")]:
                check(f"{name}: {want}" in holds or f"{name} (default): {want}" in holds,
                      f"the env schema does not describe {name} as the replacement: {holds!r}")
            check("shell" in served_names(client), f"shell is gone: {holds!r}")
            check("Custom, in place of the server's own: node, python." in lines,
                  f"the instructions do not say python and node were replaced: {instructions!r}")

        suite.test("the instructions describe the replacements, not the bundled python and node, and say so",
                   described)
        suite.test("python from NIX_SANDBOX_DIR replaces the bundled one (jq runs)", expect, client, "python",
                   "import subprocess\nsubprocess.run(['jq', '-n', '6*7'], check=True)", "42\nexit code 0")
        suite.test("node from NIX_SANDBOX_ENVS replaces the bundled one (jq runs)", expect, client, "node",
                   "require('child_process').execFileSync('jq', ['-n', '6*7'], {stdio: 'inherit'})", "42\nexit code 0")
        suite.test("the bundled shell stays", expect, client, "shell", "echo $((6*7))", "42\nexit code 0")
    finally:
        client.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["home", "nixos", "template", "replace"])
    parser.add_argument("--label", required=True)
    parser.add_argument("--mcp-json")
    parser.add_argument("--name", default="nix-sandbox")
    parser.add_argument("--server")
    parser.add_argument("--python-replacement")
    parser.add_argument("--node-ref")
    parser.add_argument("--service")
    args = parser.parse_args()
    suite = Suite(args.label)
    with tempfile.TemporaryDirectory(prefix="nsm-served-") as tmp:
        try:
            {"home": home, "nixos": nixos, "template": template, "replace": replace}[args.what](args, suite, Path(tmp))
        except Failed as e:
            suite.failed += 1
            print(f"FAIL - {args.label}: the server did not start: {e}", flush=True)
    sys.exit(1 if suite.failed else 0)


if __name__ == "__main__":
    main()
