#!/usr/bin/env python3
"""Network by policy, end to end (standard library, openssl and iproute2).

Run by checks/run as root: it makes a network namespace of its own (no
route to the host's network), with loopback and a interface holding
198.51.100.10 (TEST-NET-2, an internet address to the proxy) on a veth, starts the
test's HTTP and HTTPS servers there, and serves the `egress` environment
(checks/environments.nix) through the Nix-built server, as root or, with
--user, as that uid. The proxy resolves names from the test's hosts file
(NIX_SANDBOX_EGRESS_HOSTS) and trusts the test's CA
(NIX_SANDBOX_EGRESS_CA_ROOTS). Prints `ok - LABEL: name` /
`FAIL - LABEL: name: reason` lines, exits 1 when a test failed.

  egress.py --label root --server OUT --egress OUT [--user 65534 --home DIR]
"""

import argparse
import http.server
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e import Failed, McpClient, Suite, call_run, check, descendants, processes  # noqa: E402

ADDR = "198.51.100.10"
SECRET = "egress-secret-7f3c9a1e5b2d4068"
PLACEHOLDER = "nix-sandbox-placeholder-API_TOKEN"
NAMES = ["allowed.test", "a.wild.test", "api.test", "denied.test"]
MANIFEST = "share/nix-sandbox-mcp/manifest.json"

WHEEL_NAME = "demo-1.0-py3-none-any.whl"


def make_wheel():
    """A tiny wheel, `demo` 1.0, for the test's package index."""
    import hashlib
    import io
    import zipfile
    files = {
        "demo/__init__.py": "VALUE = 42\n",
        "demo-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
        "demo-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: egress.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + "demo-1.0.dist-info/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        for name, text in {**files, "demo-1.0.dist-info/RECORD": record}.items():
            wheel.writestr(name, text)
    data = buffer.getvalue()
    return data, hashlib.sha256(data).hexdigest()


WHEEL, WHEEL_SHA256 = make_wheel()

# What the servers saw: (host, path, authorization) of each request.
SEEN = []
UDP_SEEN = []


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        host = (self.headers.get("Host") or "").split(":")[0]
        auth = self.headers.get("Authorization") or ""
        SEEN.append((host, self.path, auth))
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "http://denied.test/landed")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == f"/files/{WHEEL_NAME}":
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(WHEEL)))
            self.end_headers()
            self.wfile.write(WHEEL)
            return
        if self.path.startswith("/v1/"):
            # Says whether the secret came, never the secret itself.
            body = b"secret ok" if auth == f"Bearer {SECRET}" else b"secret missing"
        elif self.path == "/simple/demo/":
            body = (f'<html><body><a href="/files/{WHEEL_NAME}#sha256={WHEEL_SHA256}">'
                    f'{WHEEL_NAME}</a></body></html>').encode()
        else:
            body = f"hello from {host}{self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html" if self.path.startswith("/simple/") else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET


def serve(port, context=None, addr=ADDR):
    server = http.server.ThreadingHTTPServer((addr, port), Handler)
    if context:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def udp_listen():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((ADDR, 5353))

    def loop():
        while True:
            data, _ = sock.recvfrom(2048)
            UDP_SEEN.append(data)

    threading.Thread(target=loop, daemon=True).start()


def make_certs(scratch):
    """A test CA and a certificate for every test name, signed by it."""
    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ca_key, ca = scratch / "ca.key", scratch / "ca.pem"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
            "-days", "2", "-subj", "/CN=nix-sandbox-mcp egress test CA")
    key, csr, cert = scratch / "server.key", scratch / "server.csr", scratch / "server.pem"
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
            "-subj", "/CN=allowed.test")
    ext = scratch / "ext.cnf"
    ext.write_text("subjectAltName=" + ",".join(f"DNS:{n}" for n in NAMES) + f",IP:{ADDR}\n")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
            "-out", str(cert), "-days", "2", "-extfile", str(ext))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    return ca, context


def network_namespace():
    """Loopback and 198.51.100.10 on a veth interface (a pair, both ends
    here: no dummy module needed), in this namespace."""
    for argv in (["ip", "link", "set", "lo", "up"],
                 ["ip", "link", "add", "nsm0", "type", "veth", "peer", "name", "nsm1"],
                 ["ip", "addr", "add", f"{ADDR}/24", "dev", "nsm0"],
                 ["ip", "link", "set", "nsm0", "up"],
                 ["ip", "link", "set", "nsm1", "up"]):
        subprocess.run(argv, check=True, capture_output=True)


PY_GET = """
import urllib.request, urllib.error
try:
    print(urllib.request.urlopen({url!r}, timeout=20).read().decode())
except urllib.error.HTTPError as e:
    print('HTTP', e.code, e.read().decode().strip())
except Exception as e:
    print('ERROR', type(e).__name__, e)
"""


def sh(command):
    return (f"import subprocess\nr = subprocess.run({command!r}, shell=True, capture_output=True, text=True)\n"
            "print(r.stdout); print('stderr', r.stderr[-1500:]); print('rc', r.returncode)")


def run(client, code):
    result, text = call_run(client, "egress", code)
    return result, text


def note(text, line):
    check(line in text.splitlines(), f"no note {line!r} in the result: {text[-600:]!r}")


def no_refusal(text):
    check("network: refused" not in text, f"an unexpected refusal: {text[-600:]!r}")


def tests(client, suite):
    def instructions():
        init = client.init
        text = init.get("instructions", "")
        check("network only to allowed.test, *.wild.test:8443, loop.test, api.test" in text,
              f"the instructions do not list the reachable hosts: {text!r}")

    suite.test("the instructions say which hosts the environment reaches", instructions)

    def curl_allowed():
        _, text = run(client, sh("curl -sS https://allowed.test/curl"))
        check("hello from allowed.test/curl" in text and "rc 0" in text, text)
        no_refusal(text)
        _, text = run(client, sh("curl -sS http://allowed.test/plain"))
        check("hello from allowed.test/plain" in text, text)
        _, text = run(client, sh("curl -sS https://a.wild.test:8443/wild"))
        check("hello from a.wild.test/wild" in text, text)
        no_refusal(text)

    suite.test("curl reaches allowed hosts over HTTPS and HTTP (exact and *.suffix)", curl_allowed)

    def urllib_allowed():
        _, text = run(client, PY_GET.format(url="https://allowed.test/py"))
        check("hello from allowed.test/py" in text, text)
        no_refusal(text)

    suite.test("Python's urllib reaches an allowed host over HTTPS", urllib_allowed)

    def pip_download():
        pip = ("python3 -m pip download --no-deps --disable-pip-version-check --no-cache-dir --retries 0 "
               "--index-url {}/simple/ demo -d /tmp/dl{}; ls /tmp/dl{}")
        _, text = run(client, sh(pip.format("https://allowed.test", 1, 1)))
        check(WHEEL_NAME in text, f"pip did not download from the allowed index: {text}")
        no_refusal(text)
        _, text = run(client, sh(pip.format("https://denied.test", 2, 2)))
        check(WHEEL_NAME not in text, text)
        note(text, "network: refused denied.test:443 (not in allowlist)")

    suite.test("pip downloads from an allowed index, not from a denied one", pip_download)

    def denied_https():
        _, text = run(client, sh("curl -sS https://denied.test/"))
        check("hello" not in text, text)
        note(text, "network: refused denied.test:443 (not in allowlist)")

    suite.test("HTTPS to a host no rule names is refused, and the result says so", denied_https)

    def denied_http():
        _, text = run(client, PY_GET.format(url="http://denied.test/x"))
        check("HTTP 403" in text and "hello" not in text, text)
        note(text, "network: refused denied.test:80 (not in allowlist)")

    suite.test("plain HTTP to a denied host is refused", denied_http)

    def redirect():
        _, text = run(client, PY_GET.format(url="http://allowed.test/redirect"))
        check("HTTP 403" in text and "hello" not in text, text)
        note(text, "network: refused denied.test:80 (not in allowlist)")
        check(not any(h == "denied.test" for h, _, _ in SEEN), f"denied.test was reached: {SEEN}")

    suite.test("a redirect to a denied host is refused", redirect)

    def sni_fronting():
        code = """
import socket, ssl
s = socket.create_connection(('127.0.0.1', 3128))
s.sendall(b'CONNECT allowed.test:443 HTTP/1.1\\r\\nHost: allowed.test:443\\r\\n\\r\\n')
print(s.recv(1024).split(b'\\r\\n')[0].decode())
ctx = ssl.create_default_context()
try:
    t = ctx.wrap_socket(s, server_hostname='denied.test')
    t.sendall(b'GET /fronted HTTP/1.1\\r\\nHost: denied.test\\r\\n\\r\\n')
    print('GOT', t.recv(4096))
except Exception as e:
    print('ERROR', type(e).__name__)
"""
        _, text = run(client, code)
        check("HTTP/1.1 200" in text and "ERROR" in text and "GOT" not in text, text)
        note(text, "network: refused allowed.test:443 (TLS server name denied.test is not the CONNECT host)")
        check(not any(p == "/fronted" for _, p, _ in SEEN), f"the fronted request arrived: {SEEN}")

    suite.test("CONNECT to an allowed name with another TLS server name is refused", sni_fronting)

    def ip_literal():
        _, text = run(client, sh(f"curl -sSk https://{ADDR}/ip; curl -sS http://{ADDR}/ip"))
        check("hello" not in text, text)
        note(text, f"network: refused {ADDR}:443 (not in allowlist)")
        note(text, f"network: refused {ADDR}:80 (not in allowlist)")

    suite.test("an address literal no rule names is refused", ip_literal)

    def loopback_name():
        _, text = run(client, sh("curl -sS http://loop.test/internal; curl -sS https://loop.test/internal"))
        check("internal service" not in text, text)
        note(text, "network: refused loop.test:80 (resolves to an internal address 127.0.0.1)")
        note(text, "network: refused loop.test:443 (resolves to an internal address 127.0.0.1)")

    suite.test("an allowed name that resolves to loopback is refused", loopback_name)

    def direct():
        code = f"""
import socket
for family, kind, where in [(socket.AF_INET, socket.SOCK_STREAM, ({ADDR!r}, 80)),
                            (socket.AF_INET, socket.SOCK_DGRAM, ({ADDR!r}, 5353))]:
    s = socket.socket(family, kind)
    s.settimeout(3)
    try:
        if kind == socket.SOCK_STREAM:
            s.connect(where)
            print('CONNECTED')
        else:
            s.sendto(b'escape', where)
            print('SENT')
    except OSError as e:
        print('ERROR', e.errno)
try:
    print('RESOLVED', socket.getaddrinfo('allowed.test', 443))
except OSError as e:
    print('NO DNS', e)
print(open('/etc/resolv.conf').read() if __import__('os').path.exists('/etc/resolv.conf') else 'no resolv.conf')
"""
        _, text = run(client, code)
        check("CONNECTED" not in text and "SENT" not in text, text)
        check("RESOLVED" not in text and "NO DNS" in text, text)
        check(not UDP_SEEN, f"a UDP datagram left the jail: {UDP_SEEN}")

    suite.test("no way out but the proxy: direct TCP, UDP and DNS fail", direct)

    def credential():
        _, text = run(client, sh('echo "var=$API_TOKEN"; curl -sS -H "Authorization: Bearer $API_TOKEN" https://api.test/v1/check'))
        check(f"var={PLACEHOLDER}" in text, f"the jail's variable is not the placeholder: {text}")
        check("secret ok" in text, f"the secret did not reach the host: {text}")
        check(SECRET not in text, "the secret came back into the jail")
        _, text = run(client, sh('curl -sS -H "Authorization: Bearer $API_TOKEN" https://api.test/v2/x; '
                                 'curl -sS -X POST -H "Authorization: Bearer $API_TOKEN" https://api.test/v1/check'))
        note(text, "network: refused api.test:443 (path /v2/x not allowed)")
        note(text, "network: refused api.test:443 (method POST not allowed)")
        # Only to the host whose rule names the credential.
        _, text = run(client, sh('curl -sS -H "Authorization: Bearer $API_TOKEN" https://allowed.test/leak'))
        auths = [a for h, p, a in SEEN if p == "/leak"]
        check(auths == [f"Bearer {PLACEHOLDER}"], f"allowed.test got {auths}")

    suite.test("a credential is put in by the proxy for its host only; paths and methods are held", credential)

    def secret_invisible():
        session = {"name": "run", "arguments": {"env": "egress", "session": "secret", "code": sh(
            'curl -sS -H "Authorization: Bearer $API_TOKEN" https://api.test/v1/check')}}
        result = client.request("tools/call", session)
        text = "".join(c.get("text", "") for c in result["content"] if c.get("type") == "text")
        check("secret ok" in text, text)
        # From the host, as root: every process of the server's jails (the
        # session jail's agent, interpreter and bridge, bubblewrap's init);
        # their environment, readable memory and the jail's files.
        found, scanned = scan(client.proc.pid, SECRET.encode())
        check(not found, f"the secret is in: {found}")
        check(scanned["processes"] >= 3 and scanned["regions"] > 20 and scanned["files"] > 0,
              f"the scan saw too little to mean anything: {scanned}")

    suite.test("the secret is nowhere in the jail: environ, memory of its processes, files", secret_invisible)


def jailed(server_pid):
    """The processes of the server's jails: those under it in a pid
    namespace of their own, not the server's, nor that of its direct
    children (the jails' init, a fork of the server, which carries the
    server's environment, and the wrappers, which bubblewrap starts from)."""
    def pid_ns(pid):
        try:
            return os.readlink(f"/proc/{pid}/ns/pid")
        except OSError:
            return None
    table = processes()
    under = descendants(server_pid, table)
    outer = {pid_ns(server_pid)} | {pid_ns(pid) for pid in under if table[pid][0] == server_pid}
    return [pid for pid in under if pid_ns(pid) not in outer]


def scan(server_pid, secret):
    """Where `secret` is among the processes of the server's jails: their
    environ, their readable memory, and the files of their root (the jail's
    tmpfs, not the store)."""
    found = []
    scanned = {"processes": 0, "regions": 0, "files": 0}
    roots, jail_root = set(), {}
    for pid in jailed(server_pid):
        try:
            if secret in Path(f"/proc/{pid}/environ").read_bytes():
                found.append(f"environ of {pid}")
            with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
                for line in maps:
                    fields = line.split()
                    if "r" not in fields[1]:
                        continue
                    start, end = (int(x, 16) for x in fields[0].split("-"))
                    try:
                        mem.seek(start)
                        if secret in mem.read(end - start):
                            found.append(f"memory of {pid} ({line.strip()})")
                        scanned["regions"] += 1
                    except (OSError, OverflowError, ValueError):
                        pass
            scanned["processes"] += 1
            roots.add(os.readlink(f"/proc/{pid}/ns/mnt"))
            jail_root[os.readlink(f"/proc/{pid}/ns/mnt")] = f"/proc/{pid}/root"
        except OSError:
            continue
    for namespace in roots:
        root = jail_root[namespace]
        for where in ["tmp", "workspace", "home", "run", "etc"]:
            for top, dirs, files in os.walk(f"{root}/{where}"):
                for name in files:
                    path = os.path.join(top, name)
                    try:
                        if os.path.isfile(path) and secret in Path(path).read_bytes():
                            found.append(f"file {path}")
                        scanned["files"] += 1
                    except OSError:
                        pass
    return found, scanned


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", required=True)
    parser.add_argument("--server", required=True)
    parser.add_argument("--egress", required=True)
    parser.add_argument("--user", type=int, help="serve as this uid (and gid)")
    parser.add_argument("--home", help="the server's HOME")
    parser.add_argument("--in-namespace", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.in_namespace:
        # The whole test in a network namespace of its own.
        os.execvp("unshare", ["unshare", "--net", sys.executable, *sys.argv, "--in-namespace"])
    suite = Suite(args.label)
    network_namespace()
    with tempfile.TemporaryDirectory(prefix="nsm-egress-") as tmp:
        scratch = Path(tmp)
        scratch.chmod(0o755)
        ca, context = make_certs(scratch)
        for f in scratch.iterdir():
            if f.suffix != ".key":
                f.chmod(0o644)
        hosts = scratch / "hosts"
        hosts.write_text(f"{ADDR} {' '.join(NAMES)}\n127.0.0.1 loop.test\n")
        hosts.chmod(0o644)
        serve(80)
        serve(443, context)
        serve(8443, context)
        serve(80, addr="127.0.0.1")  # the "host's" internal service
        serve(443, context, addr="127.0.0.1")
        udp_listen()
        manifest = str(Path(args.egress) / MANIFEST)
        env = {
            "HOME": args.home or os.environ["HOME"],
            "PATH": "/usr/bin:/bin",
            "NIX_SANDBOX_EGRESS_HOSTS": str(hosts),
            "NIX_SANDBOX_EGRESS_CA_ROOTS": str(ca),
            "NSM_EGRESS_SECRET": SECRET,
        }
        argv = [args.server + "/bin/nix-sandbox-mcp", "--stdio", "--manifest", manifest]
        if args.user is not None:
            argv = ["setpriv", f"--reuid={args.user}", f"--regid={args.user}", "--clear-groups", *argv]
        client = McpClient(argv, env)
        try:
            client.init = client.initialize("nix-sandbox-mcp-egress")
            tests(client, suite)
        except Failed as e:
            print(f"FAIL - {args.label}: egress server: {e}")
            suite.failed += 1
        finally:
            client.close()
            log = "".join(client.stderr)
            if SECRET in log:
                print(f"FAIL - {args.label}: the server's log holds the secret")
                suite.failed += 1
    sys.exit(1 if suite.failed else 0)


if __name__ == "__main__":
    main()
