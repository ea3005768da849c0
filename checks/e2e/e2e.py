#!/usr/bin/env python3
"""End-to-end tests of the Nix-built sandboxes and server (standard library only).

Run by checks/run (as root, then as an unprivileged user) against packages the
offline harness built over checks/hostpkgs, and by the flake's checks against
real nixpkgs builds. Prints one line per test, `ok - LABEL: name`,
`FAIL - LABEL: name: reason` or `skip - LABEL: name: reason`, and exits 1 when
any test failed.

  e2e.py --label root --server OUT --sandbox python=OUT --sandbox shell=OUT \
         --sandbox node=OUT --custom OUT --online OUT [--nix-envs-ref REF] \
         --closure python=FILE --closure shell=FILE --closure node=FILE

--custom is a Python-with-jq environment made by lib.mkSandbox with small
limits (tmp_mb and workspace_mb 8), --online the same with network = true.
--nix-envs-ref is a flake ref of a sandbox, served through NIX_SANDBOX_ENVS;
--hidden names a host path the jail must not see (repeatable). --closure
gives a preset's store closure: the store paths of `nix-store -qR OUT`, or a
file of Nix's exportReferencesGraph (every line that is a store path counts).
"""

import argparse
import http.client
import json
import os
import queue
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

DEADLINE = 120  # seconds; a guard against hangs, not a timing assertion
SECRET_VAR = "NSM_E2E_SECRET"
SECRET = "e2e-secret-value-that-must-not-leak"
MANIFEST = "share/nix-sandbox-mcp/manifest.json"


class Failed(Exception):
    pass


def check(condition, reason):
    if not condition:
        raise Failed(reason)


def facts(result):
    """A result's machine facts: in `_meta`, never in `structuredContent`
    (clients show the model structuredContent in place of the output)."""
    check("structuredContent" not in result, f"a result with structuredContent hides its output: {result}")
    return (result.get("_meta") or {}).get("nix-sandbox-mcp/result") or {}


def manifest_of(out):
    return json.loads((Path(out) / MANIFEST).read_text())


def env_names(env_schema):
    """The environments the `run` tool's `env` argument names in its
    description (`python (default): ...; shell: ...`; the schema has no
    enum, to keep the tool list small)."""
    holds = env_schema.get("description", "")
    return [part.split(":")[0].removesuffix(" (default)").strip() for part in holds.split("; ") if ":" in part]


def only_env(out):
    """(name, entry) of a sandbox's own one-environment manifest."""
    envs = manifest_of(out)["environments"]
    check(len(envs) == 1, f"{out}/{MANIFEST} has {len(envs)} environments, not 1")
    return next(iter(envs.items()))


def run(argv, stdin=b"", env=None, extra_env=None):
    """Runs argv with a small environment (like the launcher's), code on stdin."""
    base = {"HOME": os.environ["HOME"], "PATH": "/usr/bin:/bin"}
    if env is not None:
        base = env
    if extra_env:
        base = {**base, **extra_env}
    return subprocess.run(
        argv, input=stdin, capture_output=True, env=base, timeout=DEADLINE
    )


def show(proc):
    return (
        f"exit {proc.returncode}, stdout {proc.stdout[-400:]!r}, "
        f"stderr {proc.stderr[-600:]!r}"
    )


def pids():
    """The pids in /proc now."""
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def processes():
    """pid -> (parent pid, command name) of every process in /proc now; a
    process that ends while it is read is left out."""
    table = {}
    for pid in pids():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        # The command name (field 2) is in parentheses and may hold spaces.
        rest = stat[stat.rindex(")") + 2:].split()
        table[pid] = (int(rest[1]), stat[stat.index("(") + 1:stat.rindex(")")])
    return table


def descendants(top, table=None):
    """The pids of every process under `top` (not `top` itself), from
    `table` (processes()) or a fresh look."""
    children = {}
    for pid, (parent, _) in (processes() if table is None else table).items():
        children.setdefault(parent, []).append(pid)
    found, queue = [], list(children.get(top, []))
    while queue:
        pid = queue.pop()
        found.append(pid)
        queue.extend(children.get(pid, []))
    return found


def expect_stdout(proc, want):
    check(
        proc.returncode == 0 and proc.stdout.decode() == want,
        f"wanted exit 0 and stdout {want!r}; got {show(proc)}",
    )


class Suite:
    def __init__(self, label):
        self.label = label
        self.failed = 0

    def test(self, name, fn, *args):
        try:
            fn(*args)
        except Failed as e:
            self.failed += 1
            print(f"FAIL - {self.label}: {name}: {e}", flush=True)
        except Exception as e:  # a crash of the test is a failure too
            self.failed += 1
            where = traceback.extract_tb(e.__traceback__)[-1]
            print(
                f"FAIL - {self.label}: {name}: {type(e).__name__}: {e} "
                f"(e2e.py line {where.lineno})",
                flush=True,
            )
        else:
            print(f"ok - {self.label}: {name}", flush=True)

    def skip(self, name, reason):
        print(f"skip - {self.label}: {name}: {reason}", flush=True)


# --- direct runs of the wrappers -------------------------------------------


def t_python_c(sandboxes):
    expect_stdout(run([sandboxes["python"] + "/bin/sandbox-python", "-c", "print(6*7)"]), "42\n")


STDIN_SCRIPTS = {
    # Each prints 42, then what reading stdin gave: the script came on stdin
    # and was read whole before it ran, so reading stdin gets EOF.
    "python": (
        b"import sys\nprint(6 * 7)\nprint(repr(sys.stdin.read()))\n",
        "42\n''\n",
    ),
    "shell": (
        b'echo $((6 * 7))\nif read -r line; then echo "read: $line"; else echo EOF; fi\n',
        "42\nEOF\n",
    ),
    "node": (
        b"const rest = require('fs').readFileSync(0, 'utf8');\n"
        b"console.log(6 * 7);\nconsole.log(JSON.stringify(rest));\n",
        '42\n""\n',
    ),
}


def t_stdin_script(out, preset):
    _, entry = only_env(out)
    code, want = STDIN_SCRIPTS[preset]
    expect_stdout(run(entry["run"], stdin=code), want)


def t_manifest_fragment(out, preset, interpreter):
    name, entry = only_env(out)
    check(name == preset, f"environment named {name!r}, not {preset!r}")
    check(entry["interpreter"] == interpreter, f"interpreter {entry['interpreter']!r}")
    check(entry["store_path"] == str(Path(out)), f"store_path {entry['store_path']!r} is not {out}")
    check(entry["run"][0] == f"{out}/bin/sandbox-{preset}", f"run {entry['run']!r}")
    check(entry["session"] == [f"{out}/bin/sandbox-{preset}-session"], f"session {entry['session']!r}")
    check(entry["network"] is False, "network is not false")
    check(all(isinstance(v, int) and v > 0 for v in entry["limits"].values()), "a limit is not a positive integer")


SHELL_TOOLS = "bash ls cat find xargs grep sed awk gawk diff jq rg fd tree file tar gzip env"


def t_shell_tools(sandboxes):
    script = f"for t in {SHELL_TOOLS}; do command -v \"$t\" >/dev/null || echo \"missing $t\"; done; jq -n '6*7'"
    expect_stdout(run([sandboxes["shell"] + "/bin/sandbox-shell", "-c", script]), "42\n")


def t_node_e(sandboxes):
    expect_stdout(run([sandboxes["node"] + "/bin/sandbox-node", "-e", "console.log(6*7)"]), "42\n")


# Four worker threads, then the heap past the old space Node is told
# (NODE_OPTIONS, lib/jail/runtimeLimits.nix): at the default memory_mb,
# with no cgroup (the wrapper run directly), under RLIMIT_DATA.
NODE_WORKERS = """
const { Worker } = require('worker_threads');
const ws = [0, 1, 2, 3].map(() => new Worker('setTimeout(() => {}, 100)', { eval: true }));
Promise.all(ws.map(w => new Promise(r => w.on('exit', r)))).then(() => {
  console.log('workers ok', process.env.NODE_OPTIONS);
  const keep = [];
  for (;;) keep.push(new Array(1e6).fill(1.5));
});
"""


def t_node_workers(sandboxes):
    proc = run([sandboxes["node"] + "/bin/sandbox-node", "-"], stdin=NODE_WORKERS.encode())
    check(proc.stdout.startswith(b"workers ok --max-old-space-size=768"), f"{show(proc)}")
    check(b"JavaScript heap out of memory" in proc.stderr, f"not Node's own out-of-memory error: {show(proc)}")


def t_custom_jq(custom):
    name, entry = only_env(custom)
    check(any(p.startswith("jq-") for p in entry["packages"]), f"packages {entry['packages']} have no jq")
    code = (
        b"import subprocess\n"
        b"out = subprocess.run(['jq', '-n', '6*7'], capture_output=True, text=True, check=True)\n"
        b"print(out.stdout.strip())\n"
    )
    expect_stdout(run(entry["run"], stdin=code), "42\n")


CONNECT = (
    "import socket, sys\n"
    "s = socket.socket()\n"
    "s.settimeout(5)\n"
    "try:\n"
    "    s.connect(('127.0.0.1', {port}))\n"
    "    print(s.recv(16).decode())\n"
    "except OSError as e:\n"
    "    print('unreachable', e.errno)\n"
)


def greeter():
    """A listener on the host's 127.0.0.1 that sends `hello` to each
    connection: (port, end), end() stopping it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve():
        with server:
            while not stop.is_set():
                try:
                    conn, _ = server.accept()
                except OSError:
                    continue
                with conn:
                    conn.sendall(b"hello")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def end():
        stop.set()
        thread.join()

    return server.getsockname()[1], end


def t_loopback(sandboxes, online):
    port, end = greeter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            check(c.recv(16) == b"hello", "the host cannot reach its own listener")
        code = CONNECT.format(port=port)
        offline = run([sandboxes["python"] + "/bin/sandbox-python", "-c", code])
        check(offline.returncode == 0, f"probe failed: {show(offline)}")
        check(offline.stdout.startswith(b"unreachable"), f"the jail reached the host's listener: {show(offline)}")
        _, entry = only_env(online)
        opted_in = run(entry["run"], stdin=code.encode())
        check(opted_in.stdout == b"hello\n", f"the network = true environment did not reach it: {show(opted_in)}")
    finally:
        end()



# What a network = true jail reads of the host's /etc for TLS: the CA
# bundle where the host keeps one, whole and equal to the host's, named by
# SSL_CERT_FILE; no other entry of /etc/ssl (never /etc/ssl/private).
TLS_FILES = """
import json, os
def listing(top):
    found = []
    for root, dirs, files in os.walk(top):
        found += [os.path.join(root, name) for name in dirs + files]
    return sorted(found)
bundle = os.environ.get("SSL_CERT_FILE")
print(json.dumps({"listing": listing("/etc/ssl") + listing("/etc/pki"), "bundle": bundle,
                  "size": os.path.getsize(bundle) if bundle else None}))
"""
BUNDLES = ["/etc/ssl/certs/ca-certificates.crt", "/etc/ssl/certs/ca-bundle.crt",
           "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem", "/etc/pki/tls/cert.pem"]
TLS_BOUND = BUNDLES + ["/etc/ssl/openssl.cnf", "/etc/ssl/certs/java/cacerts"]


def t_tls_files(online):
    _, entry = only_env(online)
    result = run(entry["run"], stdin=TLS_FILES.encode())
    check(result.returncode == 0, f"probe failed: {show(result)}")
    seen = json.loads(result.stdout)
    host = next((path for path in BUNDLES if os.access(path, os.R_OK)), None)
    if host is None:
        # A host without one (Nix's build sandbox, where the flake's check
        # runs): nothing is bound and no variable names a bundle.
        check(seen["bundle"] is None, f"SSL_CERT_FILE is {seen['bundle']!r} on a host without a CA bundle")
        check(not seen["listing"], f"the jail has {seen['listing'][:8]} on a host without a CA bundle")
        return
    check(seen["bundle"] == host, f"SSL_CERT_FILE is {seen['bundle']!r}, not the host's bundle {host}")
    check(seen["size"] == os.path.getsize(host), f"the jail's bundle has {seen['size']} bytes, the host's {os.path.getsize(host)}")
    files = {path for path in seen["listing"] if path not in TLS_BOUND}
    dirs = {os.path.dirname(path) for path in TLS_BOUND} | {"/etc/ssl", "/etc/pki", "/etc/pki/tls"}
    extra = sorted(files - dirs)
    check(not extra, f"the jail sees more of the host's /etc/ssl than its CA bundles: {extra[:8]}")

# Every way to listen on the port PORT (each family, the wildcards,
# SO_REUSEPORT), each tried alone and said; then the first that binds
# accepts clients for up to 8 s and prints what the first that sends
# anything sent. The launcher's tests run the same text
# (launcher/tests/it/http_listener.rs): no backslash in it.
SQUAT = """
import errno, select, socket, time
PORT = int(@PORT@)
V4, V6 = socket.AF_INET, socket.AF_INET6
VARIANTS = [
    ("[::1]", V6, "::1", False, None), ("[::1] SO_REUSEPORT", V6, "::1", True, None),
    ("[::] v6only", V6, "::", False, 1), ("[::] v6only SO_REUSEPORT", V6, "::", True, 1),
    ("[::] dual-stack", V6, "::", False, 0), ("0.0.0.0", V4, "0.0.0.0", False, None),
    ("0.0.0.0 SO_REUSEPORT", V4, "0.0.0.0", True, None), ("127.0.0.1", V4, "127.0.0.1", False, None),
    ("127.0.0.1 SO_REUSEPORT", V4, "127.0.0.1", True, None),
]
def listen(family, host, reuseport, v6only):
    try:
        s = socket.socket(family, socket.SOCK_STREAM)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuseport:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if v6only is not None:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, v6only)
    try:
        s.bind((host, PORT))
        s.listen(8)
        return s
    except OSError as e:
        s.close()
        return errno.errorcode.get(e.errno, str(e.errno))
bound = []
for name, *how in VARIANTS:
    got = listen(*how)
    if isinstance(got, str):
        print(name, got, flush=True)
    else:
        print(name, "BOUND", flush=True)
        got.close()
        bound.append(how)
held = listen(*bound[0]) if bound else None
deadline = time.monotonic() + 8
while held is not None and time.monotonic() < deadline:
    ready, _, _ = select.select([held], [], [], max(0, deadline - time.monotonic()))
    if not ready:
        break
    conn, _ = held.accept()
    conn.settimeout(3)
    try:
        sent = conn.recv(4096)
    except OSError:
        sent = b""
    if sent:
        print("captured:", sent.decode(errors="replace"), flush=True)
        crlf = bytes([13, 10])
        conn.sendall(b"HTTP/1.1 503 Service Unavailable" + crlf + b"content-length: 8" + crlf + crlf + b"squatted")
        held = None
    conn.close()
"""
SQUAT_VARIANTS = ["[::1]", "[::1] SO_REUSEPORT", "[::] v6only", "[::] v6only SO_REUSEPORT", "[::] dual-stack",
                  "0.0.0.0", "0.0.0.0 SO_REUSEPORT", "127.0.0.1", "127.0.0.1 SO_REUSEPORT"]


def has_ipv6_loopback():
    """Whether this host has ::1 (without it nothing can listen there)."""
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def http_server(server, scratch, token):
    """The Nix-built server over HTTP on 127.0.0.1 (port 0): its process and port."""
    token_file = scratch / "http-token"
    token_file.write_text(token + "\n")
    env = {"HOME": os.environ["HOME"], "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    argv = [server + "/bin/nix-sandbox-mcp", "--http", "127.0.0.1:0", "--token-file", str(token_file)]
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    log = []
    deadline = time.monotonic() + DEADLINE
    for line in proc.stderr:
        log.append(line)
        if "listening on http://" in line:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, int(line.split("listening on http://", 1)[1].split("/")[0].rsplit(":", 1)[1])
        if time.monotonic() > deadline:
            break
    proc.kill()
    proc.wait()
    raise Failed(f"the server never said where it listens: {''.join(log)[-800:]}")


def post_initialize(host, port, token):
    """An MCP initialize sent to HOST:PORT with the token: (status, body)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}}})
    conn = http.client.HTTPConnection(host, port, timeout=DEADLINE)
    try:
        conn.request("POST", "/mcp", body, {
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "Authorization": f"Bearer {token}"})
        response = conn.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        conn.close()


def t_listener(server, online, scratch):
    token = "e2e-listener-token-0123456789abcdef"
    proc, port = http_server(server, scratch, token)
    squat = None
    try:
        _, entry = only_env(online)
        squat = subprocess.Popen(entry["run"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env={"HOME": os.environ["HOME"], "PATH": "/usr/bin:/bin"})
        squat.stdin.write(SQUAT.replace("@PORT@", str(port)).encode())
        squat.stdin.close()
        # localhost leads clients to ::1 first: there, the server, or
        # whatever took its place.
        ipv6 = has_ipv6_loopback()
        host = "::1" if ipv6 else "127.0.0.1"
        until = time.monotonic() + 10
        while time.monotonic() < until:
            try:
                socket.create_connection((host, port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        status, answer = post_initialize(host, port, token)
        said = squat.stdout.read().decode(errors="replace")
        squat.wait(timeout=DEADLINE)
        check(token not in said and "captured:" not in said, f"the jail took the client's request:\n{said}")
        check(status == 200 and '"nix-sandbox-mcp"' in answer, f"the client on {host} was not answered by the server: HTTP {status} {answer[:300]}")
        for name in SQUAT_VARIANTS:
            # Without ::1 no client is led to IPv6: what a jail binds there
            # reaches nobody.
            if ipv6 or not name.startswith("[::"):
                check(f"{name} EADDRINUSE" in said.splitlines(), f"{name} was not refused:\n{said}")
    finally:
        if squat is not None and squat.poll() is None:
            squat.kill()
            squat.wait()
        proc.terminate()
        proc.wait(timeout=DEADLINE)


ISOLATION_PROBE = """
import json, os, sys
home = sys.argv[1]
seen = {}
for path in sys.argv[2:]:
    seen[path] = os.path.exists(path)
print(json.dumps({
    "environ": dict(os.environ),
    "cwd": os.getcwd(),
    "home_listing": os.listdir("/home") if os.path.isdir("/home") else None,
    "root_listing": os.listdir("/root") if os.path.isdir("/root") else None,
    "caller_home": os.listdir(home) if os.path.isdir(home) else None,
    "seen": seen,
}))
"""


def t_isolation(sandboxes, scratch, hidden):
    secret_file = scratch / "host-secret.txt"
    secret_file.write_text("secret")
    home = os.environ["HOME"]
    paths = [str(secret_file), str(Path(__file__).resolve())] + hidden
    argv = [sandboxes["python"] + "/bin/sandbox-python", "-c", ISOLATION_PROBE, home] + paths
    proc = run(argv, extra_env={SECRET_VAR: SECRET, "AWS_SECRET_ACCESS_KEY": SECRET})
    check(proc.returncode == 0, f"probe failed: {show(proc)}")
    got = json.loads(proc.stdout)
    env = got["environ"]
    check(SECRET not in json.dumps(env), f"a secret reached the jail: {env}")
    for var, want in {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": "/home/sandbox", "TMPDIR": "/tmp"}.items():
        check(env.get(var) == want, f"{var}={env.get(var)!r}, wanted {want!r}")
    check(got["cwd"] == "/workspace", f"cwd {got['cwd']}")
    # Only the jail's own home: nothing at the caller's HOME (its path,
    # /home/LOGIN, would name the host's user).
    check(got["home_listing"] == ["sandbox"], f"/home in the jail shows {got['home_listing']}")
    check(not got["root_listing"], f"/root in the jail shows {got['root_listing']}")
    if Path(home).resolve() != Path("/home/sandbox"):
        check(not got["caller_home"], f"the caller's HOME {home} shows {got['caller_home']} in the jail")
    for path, seen in got["seen"].items():
        check(not seen, f"the host's {path} is visible in the jail")


def t_policy(sandboxes, custom):
    """Nested user namespaces, rlimits, UTF-8, /usr/bin/env, pid namespace."""
    _, entry = only_env(custom)
    limits = entry["limits"]
    code = (
        "import ctypes, json, os, resource, subprocess, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "userns = libc.unshare(0x10000000)\n"
        "print(json.dumps({\n"
        "  'userns': userns, 'pid': os.getpid(),\n"
        "  'rlimits': {n: resource.getrlimit(getattr(resource, 'RLIMIT_' + n)) for n in ['CPU', 'FSIZE', 'NOFILE', 'DATA', 'STACK', 'AS']},\n"
        "  'encoding': sys.stdout.encoding, 'text': '\u00e9\u2713',\n"
        "  'env': subprocess.run(['/usr/bin/env'], capture_output=True, text=True).returncode,\n"
        "}))\n"
    )
    proc = run(entry["run"], stdin=code.encode())
    check(proc.returncode == 0, f"probe failed: {show(proc)}")
    got = json.loads(proc.stdout)
    check(got["userns"] == -1, "the jail could create a user namespace")
    check(got["pid"] < 10, f"pid {got['pid']}: not in a pid namespace of its own")
    want = {
        "CPU": limits["cpu_s"],
        "FSIZE": limits["file_mb"] * 1024 * 1024,
        "NOFILE": limits["nofile"],
        "DATA": limits["memory_mb"] * 1024 * 1024,
        "STACK": 8 * 1024 * 1024,
    }
    # Not the address space, which a JIT reserves without using it.
    check(got["rlimits"]["AS"] == [-1, -1], f"RLIMIT_AS is {got['rlimits']['AS']}, wanted unlimited")
    for name, value in want.items():
        # The CPU limit's hard limit is a second above the soft one (SIGXCPU, then SIGKILL).
        hard = value + 1 if name == "CPU" else value
        check(got["rlimits"][name] == [value, hard] or got["rlimits"][name][1] < value,
              f"RLIMIT_{name} is {got['rlimits'][name]}, wanted {[value, hard]}")
    check(got["encoding"].lower() == "utf-8" and got["text"] == "\u00e9\u2713", f"not UTF-8: {got}")
    check(got["env"] == 0, "/usr/bin/env did not run")
    # A caller's hard limits that are already lower stay, the soft limit
    # lowered to them (the wrapper sets CPU, open files before bubblewrap,
    # processes inside the jail). RLIMIT_NPROC only as root, whom it does
    # not hold back on the host: for a user it counts all the user's
    # processes there, which other runs of the same uid may have.
    lower = {"CPU": limits["cpu_s"] // 2, "NOFILE": limits["nofile"] // 2}
    if os.geteuid() == 0:
        lower["NPROC"] = limits["pids"] // 2
    code = (
        "import json, resource\n"
        f"print(json.dumps({{n: resource.getrlimit(getattr(resource, 'RLIMIT_' + n)) for n in {list(lower)!r}}}))\n"
    )
    prlimit = ["prlimit"] + [f"--{name.lower()}={value}" for name, value in lower.items()]
    proc = run(prlimit + entry["run"], stdin=code.encode())
    check(proc.returncode == 0, f"probe under lower hard limits failed: {show(proc)}")
    got = json.loads(proc.stdout)
    for name, value in lower.items():
        check(got[name] == [value, value], f"under a hard RLIMIT_{name} of {value} the jail has {got[name]}")


# What each preset's run prints: its jail's mount table.
MOUNTINFO = {
    "python": "print(open('/proc/self/mountinfo').read(), end='')",
    "shell": "cat /proc/self/mountinfo",
    "node": "process.stdout.write(require('fs').readFileSync('/proc/self/mountinfo', 'utf8'))",
}
STORE_NAME = re.compile(r"(?:^|/)([0-9a-df-np-sv-z]{32}-[^/]+)")
# Inside a sandboxed `nix build` (the flake's checks.e2e) every path is under
# the build's chroot, which mountinfo shows as the sources' prefix.
BUILD_CHROOT = re.compile(r"^/nix/store/[0-9a-df-np-sv-z]{32}-[^/]+\.drv\.chroot(?=/)")
# Mount points the policy names that are no bind of a host path: their filesystem type.
# /nix/store is jail-budget's read-only view: a tmpfs holding the closure's binds.
FRESH = {"/": "tmpfs", "/proc": "proc", "/dev": "tmpfs", "/dev/pts": "devpts", "/dev/shm": "tmpfs",
         "/dev/mqueue": "mqueue", "/tmp": "tmpfs", "/workspace": "tmpfs", "/home/sandbox": "tmpfs",
         "/nix/store": "tmpfs"}
# Binds of the host's device nodes: bubblewrap's --dev, and /dev/null over the kernel keyrings.
DEVICES = {f"/dev/{name}": f"/{name}" for name in ["null", "zero", "full", "random", "urandom", "tty", "console"]}
DEVICES.update({"/proc/keys": "/null", "/proc/key-users": "/null"})


def read_closure(path):
    """The store paths' names (HASH-NAME) of a closure file."""
    names = set()
    for line in Path(path).read_text().splitlines():
        m = STORE_NAME.search(line.strip())
        if m and line.strip().endswith(m.group(1)) and not line.strip().endswith(".drv"):
            names.add(m.group(1))
    check(names, f"{path} holds no store path")
    return names


def foreign_mounts(mountinfo, closure):
    """The mounts of a jail's mount table that are neither in its store
    closure nor named by the policy: (mount point, source, type) of each.
    The jail's /etc/passwd and /etc/group are store files of its closure;
    nothing is mounted at the caller's HOME."""
    foreign = []
    for line in mountinfo.splitlines():
        fields, _, rest = line.partition(" - ")
        fields, rest = fields.split(), rest.split()
        root, point, fstype = fields[3].replace("\\040", " "), fields[4], rest[0]
        root = BUILD_CHROOT.sub("", root)
        store = STORE_NAME.search(root)
        if store:
            ok = store.group(1) in closure
        elif point in FRESH:
            ok = fstype == FRESH[point]
        elif point.startswith("/proc/") and point not in DEVICES:
            ok = fstype == "proc"
        elif point in DEVICES:
            ok = root == DEVICES[point]
        else:
            ok = False
        if not ok:
            foreign.append((point, root, fstype))
    return foreign


def t_mounts(sandboxes, closures, preset):
    """A run of the preset sees its store closure and the policy's mounts, nothing else."""
    closure = read_closure(closures[preset])
    _, entry = only_env(sandboxes[preset])
    proc = run(entry["run"], stdin=MOUNTINFO[preset].encode())
    check(proc.returncode == 0 and proc.stdout, f"reading /proc/self/mountinfo: {show(proc)}")
    mountinfo = proc.stdout.decode()
    check(any(" /nix/store/" in line for line in mountinfo.splitlines()), f"no store path mounted: {mountinfo}")
    foreign = foreign_mounts(mountinfo, closure)
    check(not foreign, "mounts neither in the closure nor named by the policy (mount point, source, type): "
          + "; ".join(f"{p} from {r} ({t})" for p, r, t in foreign))
    # Every store mount, the view's own tmpfs too, is read-only, nosuid and nodev.
    store = [line.split() for line in mountinfo.splitlines() if line.split()[4].startswith("/nix/store")]
    loose = [f[4] for f in store if not {"ro", "nosuid", "nodev"} <= set(f[5].split(","))]
    check(store and not loose, f"store mounts not read-only, nosuid and nodev: {loose}")


def t_python_closure(sandboxes):
    """The python preset's Python is its closure's: its module path in the
    store, and no numpy or pandas, which the preset does not hold."""
    code = (
        "import importlib.util, json, sys\n"
        "print(json.dumps({'prefix': sys.prefix, 'path': [p for p in sys.path if p],\n"
        "  'found': [m for m in ('numpy', 'pandas') if importlib.util.find_spec(m)]}))\n"
    )
    proc = run([sandboxes["python"] + "/bin/sandbox-python", "-c", code])
    check(proc.returncode == 0, f"probe failed: {show(proc)}")
    got = json.loads(proc.stdout)
    outside = [p for p in [got["prefix"]] + got["path"] if not p.startswith("/nix/store/")]
    check(not outside, f"the module path leaves the store: {outside}")
    check(not got["found"], f"the python preset imports {got['found']}, which it does not hold")


def t_tmpfs_limit(custom, where):
    _, entry = only_env(custom)
    limit = entry["limits"][f"{'tmp' if where == '/tmp' else 'workspace'}_mb"]
    code = (
        "import errno\n"
        f"f = open('{where}/fill', 'wb')\n"
        "try:\n"
        f"    for _ in range({limit * 2}):\n"
        "        f.write(b'x' * 1024 * 1024)\n"
        "        f.flush()\n"
        "    print('wrote it all')\n"
        "except OSError as e:\n"
        "    print(errno.errorcode[e.errno])\n"
    )
    expect_stdout(run(entry["run"], stdin=code.encode()), "ENOSPC\n")


def t_project(sandboxes, scratch):
    project = scratch / "project"
    project.mkdir()
    (project / "hello.txt").write_text("hello project")
    code = (
        "import json, sys\n"
        "mount = sys.argv[1]\n"
        "text = open(mount + '/hello.txt').read()\n"
        "try:\n"
        "    open(mount + '/new.txt', 'w').write('x')\n"
        "    wrote = True\n"
        "except OSError as e:\n"
        "    wrote = e.strerror\n"
        "print(json.dumps([text, wrote]))\n"
    )
    python = [sandboxes["python"] + "/bin/sandbox-python"]
    for mount, extra in [("/project", {}), ("/src", {"PROJECT_MOUNT": "/src"})]:
        proc = run(python + ["-c", code, mount], extra_env={"PROJECT_DIR": str(project), **extra})
        check(proc.returncode == 0, f"at {mount}: {show(proc)}")
        got = json.loads(proc.stdout)
        check(got[0] == "hello project", f"at {mount}: read {got[0]!r}")
        check(got[1] is not True, f"at {mount}: writing to the project worked")
    check(not (project / "new.txt").exists(), "a file appeared in the host's project")
    t_project_socket_and_fifo(python, project)
    missing = run(python + ["-c", "print(1)"], extra_env={"PROJECT_DIR": str(scratch / "nope")})
    check(
        missing.returncode == 2 and b"PROJECT_DIR" in missing.stderr and missing.stdout == b"",
        f"a missing PROJECT_DIR: {show(missing)}",
    )


def t_project_socket_and_fifo(python, project):
    """A host program's Unix socket and fifo in the read-only project: the
    Nix-built wrapper's jail connects to neither and writes into neither
    (the project is a read-only overlay of it, whose inodes are its own)."""
    sock_path, fifo_path = project / "host.sock", project / "host.fifo"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sock_path))
    listener.listen(4)
    listener.setblocking(False)
    os.chmod(sock_path, 0o777)
    os.mkfifo(fifo_path, 0o666)
    os.chmod(fifo_path, 0o666)
    reader = os.open(fifo_path, os.O_RDONLY | os.O_NONBLOCK)
    code = (
        "import errno, os, socket\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        "    s.connect('/project/host.sock'); print('connected')\n"
        "except OSError as e:\n"
        "    print(errno.errorcode[e.errno])\n"
        "try:\n"
        "    os.write(os.open('/project/host.fifo', os.O_WRONLY | os.O_NONBLOCK), b'leak'); print('wrote')\n"
        "except OSError as e:\n"
        "    print(errno.errorcode[e.errno])\n"
    )
    try:
        proc = run(python + ["-c", code], extra_env={"PROJECT_DIR": str(project)})
        check(proc.returncode == 0, f"the socket and fifo attack: {show(proc)}")
        out = proc.stdout.decode()
        check("connected" not in out and "wrote" not in out, f"the jail reached the host's socket or fifo: {out}")
        try:
            got = os.read(reader, 64)
        except BlockingIOError:
            got = b""
        check(got == b"", f"the host's fifo got {got!r}")
        try:
            listener.accept()
            check(False, "the host's socket got a connection")
        except BlockingIOError:
            pass
    finally:
        os.close(reader)
        listener.close()
        sock_path.unlink()
        fifo_path.unlink()


# --- the server over MCP ------------------------------------------------------


def t_server_manifest(server, sandboxes):
    manifest = manifest_of(server)
    check(manifest["version"] == 1, f"version {manifest['version']}")
    envs = manifest["environments"]
    check(sorted(envs) == ["node", "python", "shell"], f"environments {sorted(envs)}")
    for preset, out in sandboxes.items():
        check(envs[preset] == only_env(out)[1], f"{preset} differs from sandbox-{preset}'s own manifest")


def usage_left_out(text):
    """A result's text with the figures of its `used:` line left out: a warm
    jail's cgroup holds the agent too, a few hundred KiB more."""
    return re.sub(r"(?m)^used: .*$", "used: ...", text)


def waiting(pid):
    """Where process `pid`'s threads and every process below it wait, one
    line each (state, kernel wait channel, system call, name): what a hang
    shows of itself."""

    def read(path):
        try:
            return Path(path).read_text(errors="replace").strip()
        except OSError as e:
            return f"?({e.strerror})"

    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = read(entry / "stat")
            tail = stat.rsplit(")", 1)[-1].split()
            if len(tail) > 1:
                parents[int(entry.name)] = int(tail[1])
    below, todo = [], [pid]
    while todo:
        p = todo.pop()
        below.append(p)
        todo.extend(sorted(c for c, parent in parents.items() if parent == p))
    lines = []
    for p in below:
        cmd = read(f"/proc/{p}/cmdline").replace("\0", " ")[:120]
        lines.append(f"pid {p} (parent {parents.get(p)}): {cmd}")
        tasks = Path(f"/proc/{p}/task")
        for task in sorted(tasks.iterdir(), key=lambda t: int(t.name)) if tasks.is_dir() else []:
            state = read(task / "stat").rsplit(")", 1)[-1].split()[:1]
            lines.append(f"  task {task.name} {read(task / 'comm')}: state {' '.join(state)}, "
                         f"wchan {read(task / 'wchan')}, syscall {read(task / 'syscall').split(' ')[0]}")
    return "\n".join(lines)


class McpClient:
    """A minimal MCP client over stdio: newline-delimited JSON-RPC."""

    def __init__(self, argv, env):
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        self.lines = queue.Queue()
        self.stderr = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        self.next_id = 0

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _read_stderr(self):
        for line in self.proc.stderr:
            self.stderr.append(line.decode(errors="replace"))

    def send(self, message):
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method, params):
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            try:
                line = self.lines.get(timeout=DEADLINE)
            except queue.Empty:
                raise Failed(f"no answer to {method} {json.dumps(params)[:300]} within {DEADLINE} s; "
                             f"the server's stderr ends: {''.join(self.stderr)[-1500:]}; "
                             f"where its threads and processes wait: {waiting(self.proc.pid)}") from None
            if line is None:
                raise Failed(f"the server closed stdout; stderr: {''.join(self.stderr)[-800:]}")
            message = json.loads(line)
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise Failed(f"{method} failed: {message['error']}")
                return message["result"]

    def initialize(self, name):
        """The MCP handshake as client `name`; the server's answer."""
        init = self.request("initialize", {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": name, "version": "1"},
        })
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return init

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def call_run(client, env, code):
    result = client.request("tools/call", {"name": "run", "arguments": {"env": env, "code": code}})
    text = "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")
    return result, text


def says_why(line, start, ref):
    """`line` reports the NIX_SANDBOX_ENVS ref `ref` that did not build, with
    nix's error and the fix (or, in a build without nix, that nix is missing)."""
    return line.startswith(f"{start}{ref} did not build (error: ") and "fix the ref" in line or (
        line.startswith(f"{start}nix is not on PATH, so {ref} cannot be built;"))


def t_server(server, custom, scratch, nix_envs_ref, suite):
    sandbox_dir = scratch / "sandboxes"
    sandbox_dir.mkdir()
    (sandbox_dir / "custom").symlink_to(custom)
    # A missing flake, and (where nix can build) a typo in an output's name.
    bad_refs = [str(scratch / "no-such-flake")]
    if nix_envs_ref:
        bad_refs.append(nix_envs_ref + "-typo")
    env = {
        "HOME": os.environ["HOME"],
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "NIX_SANDBOX_DIR": str(sandbox_dir),
        # Refs that cannot build: reported, and the rest still served.
        "NIX_SANDBOX_ENVS": ",".join(bad_refs + ([nix_envs_ref] if nix_envs_ref else [])),
        SECRET_VAR: SECRET,
    }
    for var in ("NIX_CONFIG", "NIX_REMOTE"):
        if var in os.environ:
            env[var] = os.environ[var]
    client = McpClient([server + "/bin/nix-sandbox-mcp", "--stdio"], env)
    try:
        init = {}

        def initialize():
            init.update(client.initialize("nix-sandbox-mcp-e2e"))
            check("tools" in init.get("capabilities", {}), f"no tools capability: {init}")

        suite.test("server answers initialize over stdio", initialize)
        if not init:
            return

        def tools_list():
            tools = client.request("tools/list", {})["tools"]
            check([t["name"] for t in tools] == ["run"], f"tools {[t['name'] for t in tools]}")
            # The environments are named, with what each holds, in the
            # schema's `env` (some clients drop the instructions).
            holds = tools[0]["inputSchema"]["properties"]["env"].get("description", "")
            for name in ["python", "shell", "node", "custom"]:
                check(f"{name}: " in holds or f"{name} (default): " in holds,
                      f"the env schema does not name {name}: {holds!r}")

        suite.test("server lists the run tool and every environment", tools_list)

        for env_name, code in [
            ("python", "print(6*7)"),
            ("shell", "echo $((6*7))"),
            ("node", "console.log(6*7)"),
            ("custom", "import subprocess\nsubprocess.run(['jq', '-n', '6*7'], check=True)"),
        ]:
            def ran(env_name=env_name, code=code):
                result, text = call_run(client, env_name, code)
                check(not result.get("isError") and text == "42\nexit code 0", f"{result}")

            where = "NIX_SANDBOX_DIR" if env_name == "custom" else "the bundled preset"
            suite.test(f"server runs code in {env_name} ({where})", ran)

        def env_hidden():
            result, text = call_run(client, "python", "import os\nprint(sorted(os.environ.items()))")
            check(not result.get("isError"), f"{result}")
            check(SECRET not in text, f"the server's environment reached the jail: {text}")

        suite.test("server's environment variables are invisible in the jail", env_hidden)

        def bad_ref_reported():
            for ref in bad_refs:
                lines = [line for line in client.stderr if says_why(line, "nix-sandbox-mcp: NIX_SANDBOX_ENVS: ", ref)]
                check(
                    len(lines) == 1 and lines[0].count("\n") == 1,
                    f"no one-line report of the failed ref {ref} on stderr: {''.join(client.stderr)[-1200:]}",
                )

        suite.test("server reports each NIX_SANDBOX_ENVS ref that fails (a typo too) in one line with the fix, and serves the rest",
                   bad_ref_reported)

        if nix_envs_ref:
            def from_ref():
                result, text = call_run(client, "online", "print(6*7)")
                check(not result.get("isError") and text == "42\nexit code 0", f"{result}")

            suite.test("server builds and serves a NIX_SANDBOX_ENVS flake ref", from_ref)
        else:
            suite.skip("server builds and serves a NIX_SANDBOX_ENVS flake ref",
                       "no ref given (nix builds need the store's owner)")
    finally:
        client.close()

    def check_mode():
        proc = run([server + "/bin/nix-sandbox-mcp", "--check"], env={"HOME": env["HOME"], "PATH": env["PATH"]})
        check(proc.returncode == 0, f"--check: {show(proc)}")

    suite.test("server --check passes in every bundled environment", check_mode)

    def check_names_problems():
        junk = scratch / "junk-sandboxes"
        junk.mkdir()
        (junk / "notes.txt").write_text("not a sandbox")
        bad_env = {**env, "NIX_SANDBOX_DIR": str(junk)}
        del bad_env[SECRET_VAR]
        proc = run([server + "/bin/nix-sandbox-mcp", "--check"], env=bad_env)
        out = proc.stdout.decode()
        check(proc.returncode == 1, f"--check passed with bad refs: {show(proc)}")
        for ref in bad_refs:
            check(any(says_why(line, "NIX_SANDBOX_ENVS: FAIL: ", ref) for line in out.splitlines()),
                  f"--check does not name {ref}: {out}")
        check(f"\nNIX_SANDBOX_DIR: FAIL: {junk}/notes.txt is not a sandbox" in out, f"--check does not name the junk: {out}")
        missing = {**bad_env, "NIX_SANDBOX_DIR": str(scratch / "no-such-dir")}
        del missing["NIX_SANDBOX_ENVS"]
        proc = run([server + "/bin/nix-sandbox-mcp", "--check"], env=missing)
        check(proc.returncode == 1 and f"NIX_SANDBOX_DIR: FAIL: {scratch}/no-such-dir does not exist" in proc.stdout.decode(),
              f"--check with a missing NIX_SANDBOX_DIR: {show(proc)}")

    suite.test("server --check fails naming each bad NIX_SANDBOX_ENVS ref and NIX_SANDBOX_DIR problem", check_names_problems)

    def version_does_no_work():
        start = time.monotonic()
        proc = run([server + "/bin/nix-sandbox-mcp", "--version"], env={**env, "NIX_SANDBOX_DIR": str(scratch / "no-such-dir")})
        check(proc.returncode == 0 and proc.stdout.startswith(b"nix-sandbox-mcp "), f"--version: {show(proc)}")
        check(proc.stderr == b"", f"--version built or checked something: {show(proc)}")
        check(time.monotonic() - start < 2, "--version took over 2 s")

    suite.test("server --version builds nothing and checks nothing (NIX_SANDBOX_ENVS set)", version_does_no_work)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", default=os.environ.get("USER") or str(os.getuid()))
    parser.add_argument("--server", required=True)
    parser.add_argument("--sandbox", action="append", default=[], metavar="PRESET=OUT")
    parser.add_argument("--custom", required=True)
    parser.add_argument("--online", required=True)
    parser.add_argument("--nix-envs-ref")
    parser.add_argument("--hidden", action="append", default=[], metavar="PATH",
                        help="a host path that must be invisible in the jail (repeatable)")
    parser.add_argument("--closure", action="append", default=[], metavar="PRESET=FILE",
                        help="the store closure of a preset's sandbox (nix-store -qR, or exportReferencesGraph)")
    args = parser.parse_args()
    sandboxes = dict(s.split("=", 1) for s in args.sandbox)
    closures = dict(c.split("=", 1) for c in args.closure)
    for flag, given in [("--sandbox", sandboxes), ("--closure", closures)]:
        missing = {"python", "shell", "node"} - given.keys()
        if missing:
            parser.error(f"{flag} missing for {sorted(missing)}")

    suite = Suite(args.label)
    with tempfile.TemporaryDirectory(prefix="nsm-e2e-") as tmp:
        scratch = Path(tmp)
        suite.test("sandbox-python -c 'print(6*7)' prints 42", t_python_c, sandboxes)
        for preset, interpreter in [("python", "python"), ("shell", "bash"), ("node", "node")]:
            suite.test(f"sandbox-{preset} manifest fragment", t_manifest_fragment, sandboxes[preset], preset, interpreter)
            suite.test(f"sandbox-{preset} runs a script on stdin, which then reads EOF", t_stdin_script, sandboxes[preset], preset)
        suite.test("sandbox-shell has every tool of the shell preset", t_shell_tools, sandboxes)
        suite.test("sandbox-node -e runs", t_node_e, sandboxes)
        suite.test("sandbox-node starts worker threads at the default memory limit, and runs out of heap "
                   "with its own error", t_node_workers, sandboxes)
        suite.test("custom lib.mkSandbox environment (python + jq) runs", t_custom_jq, args.custom)
        suite.test("the host's loopback listener is unreachable from the jail (reachable with network = true)",
                   t_loopback, sandboxes, args.online)
        suite.test("a network = true jail reads the host's CA bundle, named by SSL_CERT_FILE, and nothing else of "
                   "/etc/ssl", t_tls_files, args.online)
        suite.test("a network = true jail cannot listen on the server's --http port, on ::1 nor anywhere; "
                   "a client reaching it on ::1 is answered by the server", t_listener, args.server, args.online, scratch)
        suite.test("the host's /root, /home, files and environment are invisible", t_isolation, sandboxes, scratch, args.hidden)
        suite.test("no nested user namespaces; rlimits, UTF-8, /usr/bin/env, pid namespace", t_policy, sandboxes, args.custom)
        for preset in ["python", "shell", "node"]:
            suite.test(f"sandbox-{preset}'s mount table holds its store closure and the policy's mounts, "
                       "nothing else of the host", t_mounts, sandboxes, closures, preset)
        suite.test("the python preset's modules come from its closure: no numpy, no pandas", t_python_closure, sandboxes)
        suite.test("/tmp is a size-limited tmpfs", t_tmpfs_limit, args.custom, "/tmp")
        suite.test("/workspace is a size-limited tmpfs", t_tmpfs_limit, args.custom, "/workspace")
        suite.test("PROJECT_DIR is readable at PROJECT_MOUNT and not writable, a host program's socket and fifo "
                   "there are reached by no jail; a missing one exits 2",
                   t_project, sandboxes, scratch)
        suite.test("server manifest merges the three presets' own", t_server_manifest, args.server, sandboxes)
        t_server(args.server, args.custom, scratch, args.nix_envs_ref, suite)
    sys.exit(1 if suite.failed else 0)


if __name__ == "__main__":
    main()
