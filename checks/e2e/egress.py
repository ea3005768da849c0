#!/usr/bin/env python3
"""Network by policy, end to end (standard library, openssl and iproute2).

Run by checks/run as root: it makes a network namespace of its own (no
route to the host's network), with loopback and a veth holding 100.51.100.10
and 100.51.100.11 (public addresses, which the proxy lets through; nothing
routes them out of the namespace) and addresses of IANA's special-purpose
ranges, starts the test's HTTP and HTTPS servers there, and serves the `egress` environment
(checks/flakes/environments.nix) through the Nix-built server, as root or, with
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
import resource
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e import Failed, McpClient, Suite, call_run, check, descendants, processes  # noqa: E402

ADDR = "100.51.100.10"
# Cleartext HTTP on port 443: what an eavesdropper sees of a request sent
# in the clear to a TLS port.
CLEAR_ADDR = "100.51.100.11"
# Special-purpose addresses (IANA's registries), each with a listener, and
# a name that resolves to it: benchmarking, IETF protocol assignments, and
# IPv6 forms that carry an internal IPv4 address (6to4, SIIT, NAT64 local
# use) or are internal themselves (documentation).
SPECIAL = {
    "bench.test": "198.18.0.10",
    "ietf.test": "192.0.0.10",
    "sixtofour.test": "2002:c612:a::1",
    "siit.test": "::ffff:0:c612:a",
    "nat64.test": "64:ff9b:1::c612:a",
    "doc6.test": "2001:db8::10",
}
SECRET = "egress-secret-7f3c9a1e5b2d4068"
PLACEHOLDER = "nix-sandbox-placeholder-API_TOKEN"
NAMES = ["allowed.test", "a.wild.test", "api.test", "denied.test", "paths.test"]
MANIFEST = "share/nix-sandbox-mcp/manifest.json"
# The most connections the proxy accepts from one jail at once.
GATE_CONNECTIONS = 64
# The server starts with a soft limit of 1,024 open files, what systemd
# gives a unit, and the harness's own hard limit (524,288 under systemd;
# raising it needs CAP_SYS_RESOURCE, which not every root has).
NOFILE = (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1])

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

# What the servers saw: (host, path, authorization, port) of each request.
SEEN = []
# What reached a special-purpose address: (address, request line).
SPECIAL_SEEN = []
# The bytes the cleartext listener on CLEAR_ADDR:443 received.
CLEAR_SEEN = []
UDP_SEEN = []


def lenient_reading(path):
    """How the most lenient upstream reads a request's path (nginx, Tomcat,
    IIS and their like, each for its part): every escape decoded once, `\\`
    as `/`, `;` parameters cut from each segment, repeated slashes merged,
    dot segments removed."""
    from urllib.parse import unquote
    path = unquote(path.split("?")[0].split("#")[0]).replace("\\", "/")
    out = []
    for segment in path.split("/"):
        segment = segment.split(";")[0]
        if segment in ("", "."):
            continue
        if segment == "..":
            if out:
                out.pop()
        else:
            out.append(segment)
    return "/" + "/".join(out)


class Handler(http.server.BaseHTTPRequestHandler):
    # Kept alive, as most servers do: the bytes after a request (a GET's
    # body, which it ignores) are read as the next request.
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        host = (self.headers.get("Host") or "").split(":")[0]
        auth = self.headers.get("Authorization") or ""
        SEEN.append((host, self.path, auth, self.server.server_address[1]))
        if lenient_reading(self.path) == "/admin":
            # The upstream resolves the path as it reads it.
            body = b"admin reached with the secret" if SECRET in auth else b"admin reached"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
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
    do_HEAD = do_GET


class SpecialHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        SPECIAL_SEEN.append((self.server.server_address[0], self.requestline))
        body = b"special address reached"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a client gone before its answer (a refused HEAD, a timeout)


class V6Server(Server):
    address_family = socket.AF_INET6


def serve(port, context=None, addr=ADDR, handler=Handler):
    kind = V6Server if ":" in addr else Server
    server = kind((addr, port), handler)
    if context:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def clear_listen():
    """Port 443 of CLEAR_ADDR in cleartext: records every byte it gets."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((CLEAR_ADDR, 443))
    sock.listen(16)

    def one(conn):
        with conn:
            conn.settimeout(10)
            try:
                data = conn.recv(65536)
            except OSError:
                return
            CLEAR_SEEN.append(data)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

    def loop():
        while True:
            conn, _ = sock.accept()
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()


def udp_listen():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((ADDR, 5353))

    def loop():
        while True:
            data, _ = sock.recvfrom(2048)
            UDP_SEEN.append(data)

    threading.Thread(target=loop, daemon=True).start()


def make_certs(scratch, names=None):
    """A test CA and a certificate for every test name (`names`, default
    NAMES), signed by it."""
    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ca_key, ca = scratch / "ca.key", scratch / "ca.pem"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
            "-days", "2", "-subj", "/CN=nix-sandbox-mcp egress test CA")
    key, csr, cert = scratch / "server.key", scratch / "server.csr", scratch / "server.pem"
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
            "-subj", "/CN=allowed.test")
    ext = scratch / "ext.cnf"
    ext.write_text("subjectAltName=" + ",".join(f"DNS:{n}" for n in names or NAMES) + f",IP:{ADDR}\n")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
            "-out", str(cert), "-days", "2", "-extfile", str(ext))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    return ca, context


def network_namespace():
    """Loopback, and the test's addresses on a veth interface (a pair, both
    ends here: no dummy module needed), in this namespace."""
    addrs = [[f"{ADDR}/24"], [f"{CLEAR_ADDR}/32"]]
    addrs += [[f"{a}/128", "nodad"] if ":" in a else [f"{a}/32"] for a in SPECIAL.values()]
    for argv in (["ip", "link", "set", "lo", "up"],
                 ["ip", "link", "add", "nsm0", "type", "veth", "peer", "name", "nsm1"],
                 *(["ip", "addr", "add", a[0], "dev", "nsm0", *a[1:]] for a in addrs),
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


# Targets a prefix test on the raw path lets through under `/v1/`, which an
# upstream resolving dot segments, escapes, `;` parameters, backslashes or
# repeated slashes reads as /admin (lenient_reading).
PATH_ATTACKS = [
    "/v1/../admin",
    "/v1/%2e%2e/admin",
    "/v1/%2E%2E/admin",
    "/v1/.%2e/admin",
    "/v1/%2e./admin",
    "/v1/..%2fadmin",
    "/v1/..%2Fadmin",
    "/v1/./../admin",
    "/v1//../admin",
    "/v1/x/../../admin",
    "/v1/../v1/../admin",
    "/v1/..;/admin",
    "/v1/;x/../../admin",
    "/v1/..\\admin",
    "/v1/..%5cadmin",
    "/v1/..%5Cadmin",
    "/v1/%2e%2e%5cadmin",
    "/%76%31/../admin",
    "/v1/x/..%2f..%2fadmin",
    "/v1/..%3b/admin",
    "/v1/%2e%2e/admin?q=/v1/",
]

# In the jail: each target sent through the bridge as it is (no client
# normalises it), in origin form and absolute form over plain HTTP, and
# inside a CONNECT tunnel the proxy terminates; prints what came back.
RAW_CLIENT = """
import json, os, socket, ssl
TOKEN = os.environ['API_TOKEN']

def exchange(sock, request):
    sock.sendall(request)
    data = b''
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data.decode(errors='replace')
        data += chunk

def request(method, target, host, extra=b''):
    head = (f'{method} {target} HTTP/1.1\\r\\nHost: {host}\\r\\n'
            f'Authorization: Bearer {TOKEN}\\r\\nConnection: close\\r\\n').encode()
    return head + extra

def plain(target, host, method='GET', extra=b'\\r\\n'):
    s = socket.create_connection(('127.0.0.1', 3128), timeout=20)
    return exchange(s, request(method, target, host, extra))

def tls(target, host, method='GET', extra=b'\\r\\n'):
    s = socket.create_connection(('127.0.0.1', 3128), timeout=20)
    s.sendall(f'CONNECT {host}:443 HTTP/1.1\\r\\nHost: {host}:443\\r\\n\\r\\n'.encode())
    answer = b''
    while b'\\r\\n\\r\\n' not in answer:
        chunk = s.recv(4096)
        if not chunk:
            return 'CONNECT closed: ' + answer.decode(errors='replace')
        answer += chunk
    if not answer.startswith(b'HTTP/1.1 200'):
        return answer.decode(errors='replace')
    t = ssl.create_default_context().wrap_socket(s, server_hostname=host)
    return exchange(t, request(method, target, host, extra))

def status(answer):
    return answer.split('\\r\\n')[0] + ' | ' + answer.split('\\r\\n\\r\\n', 1)[-1][:200]
"""


def tests(client, suite):
    def instructions():
        tools = client.request("tools/list", {})["tools"]
        holds = tools[0]["inputSchema"]["properties"]["env"].get("description", "")
        # The first host and how many more: a note that does not grow with
        # the policy.
        check("(network: allowed.test +11)" in holds,
              f"the env schema does not say which hosts the environment reaches: {holds!r}")

    suite.test("the tool's schema says the environment reaches allowed.test and 11 more hosts", instructions)

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
        check(not any(h == "denied.test" for h, *_ in SEEN), f"denied.test was reached: {SEEN}")

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
        check(not any(p == "/fronted" for _, p, *_ in SEEN), f"the fronted request arrived: {SEEN}")

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
        note(text, "network: refused loop.test:80 (resolves to 127.0.0.1: loopback, a special-purpose range)")
        note(text, "network: refused loop.test:443 (resolves to 127.0.0.1: loopback, a special-purpose range)")

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
        auths = [a for h, p, a, _ in SEEN if p == "/leak"]
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

    def path_attacks():
        code = RAW_CLIENT + f"""
results = {{}}
for attack in {PATH_ATTACKS!r}:
    results['plain ' + attack] = status(plain(attack, 'paths.test'))
    results['absolute ' + attack] = status(plain('http://paths.test' + attack, 'paths.test'))
    results['tls ' + attack] = status(tls(attack, 'paths.test'))
    results['tls-secret ' + attack] = status(tls(attack, 'api.test'))
    results['tls-absolute ' + attack] = status(tls('https://api.test' + attack, 'api.test'))
print(json.dumps(results))
"""
        before = len(SEEN)
        _, text = run(client, code)
        results = json.loads(next(line for line in text.splitlines() if line.startswith("{")))
        check(len(results) == 5 * len(PATH_ATTACKS), text[-600:])
        reached = [f"{k}: {v}" for k, v in results.items() if "admin reached" in v]
        check(not reached, "the jail reached /admin:\n  " + "\n  ".join(reached))
        outside = [(h, p, port) for h, p, a, port in SEEN[before:]
                   if h in ("paths.test", "api.test") and not lenient_reading(p).startswith("/v1/")]
        check(not outside, f"an upstream read a path outside /v1/: {outside}")
        unanswered = [f"{k}: {v}" for k, v in results.items() if not v.startswith(("HTTP/1.1 403", "HTTP/1.1 200"))]
        check(not unanswered, "\n  ".join(unanswered))
        # One line each says why.
        _, text = run(client, RAW_CLIENT + """
print(status(plain('/v1/../admin', 'paths.test')))
print(status(plain('/v1/..;/admin', 'paths.test')))
print(status(tls('/v1/..%2fadmin', 'api.test')))
print(status(plain('/v1/a/./b/%7Eme?x=/../y', 'paths.test')))
""")
        note(text, "network: refused paths.test:80 (path /v1/../admin not allowed: it is /admin)")
        note(text, "network: refused paths.test:80 (ambiguous path /v1/..;/admin: a ; parameter)")
        note(text, "network: refused api.test:443 (ambiguous path /v1/..%2fadmin: an encoded / \\ or ;)")
        sent = [p for h, p, *_ in SEEN if h == "paths.test" and p.startswith("/v1/a/")]
        check(sent == ["/v1/a/b/~me?x=/../y"], f"the decided path was not what was sent: {sent}")

    suite.test("path rules hold against dot segments, escapes, ; and \\ (HTTP and terminated TLS)", path_attacks)

    def cleartext_credential():
        before = len(SEEN)
        _, text = run(client, sh('curl -sS -H "Authorization: Bearer $API_TOKEN" http://api.test/v1/check; '
                                 'curl -sS -H "Authorization: Bearer $API_TOKEN" http://clear.test:443/v1/check'))
        check("secret ok" not in text, text)
        leaked = [s for s in SEEN[before:] if SECRET in s[2]] + [b for b in CLEAR_SEEN if SECRET.encode() in b]
        check(not leaked, f"the secret went out in cleartext: {leaked}")
        note(text, "network: refused api.test:80 (a credential goes only over HTTPS: use https://)")
        note(text, "network: refused clear.test:443 (a credential goes only over HTTPS: use https://)")

    suite.test("a credential never goes out in cleartext HTTP, not even to port 443", cleartext_credential)

    def get_body():
        smuggled = "GET /admin HTTP/1.1\r\nHost: {}\r\n\r\n"
        code = RAW_CLIENT + f"""
for send, host in ((plain, 'allowed.test'), (tls, 'api.test'), (plain, 'paths.test')):
    for method in ('GET', 'HEAD'):
        body = {smuggled!r}.format(host).encode()
        extra = b'Content-Length: ' + str(len(body)).encode() + b'\\r\\n\\r\\n' + body
        print(method, host, status(send('/v1/body', host, method, extra)))
"""
        before = len(SEEN)
        _, text = run(client, code)
        smuggled_seen = [s for s in SEEN[before:] if lenient_reading(s[1]) == "/admin"]
        check(not smuggled_seen, f"a request hidden in a GET's body reached the upstream: {smuggled_seen}")
        check("admin reached" not in text, text)
        note(text, "network: refused allowed.test:80 (a GET with a body: send data with POST)")
        note(text, "network: refused api.test:443 (a HEAD with a body: send data with POST)")

    suite.test("a GET or HEAD with a body is refused: no second request hides in it", get_body)

    def special_addresses():
        names = " ".join(f"http://{n}/special" for n in SPECIAL)
        _, text = run(client, sh(f"for u in {names}; do curl -sS -m 20 $u; echo; done"))
        check(not SPECIAL_SEEN, f"a special-purpose address was reached: {SPECIAL_SEEN}")
        check("special address reached" not in text, text)
        for name, addr in SPECIAL.items():
            start = f"network: refused {name}:80 (resolves to {addr}: "
            check(any(line.startswith(start) and line.endswith(", a special-purpose range)")
                      for line in text.splitlines()), f"no note {start!r}...: {text[-800:]!r}")

    suite.test("names resolving to IANA special-purpose addresses (and 6to4, SIIT, NAT64 forms) are refused",
               special_addresses)

    def raised_limit():
        soft, hard = open_files_limit(client.proc.pid)
        check(soft == hard, f"the server kept its soft open files limit: soft {soft}, hard {hard}")
        logged = [line for line in client.stderr if "open files: the soft limit" in line]
        check(logged and str(hard) in logged[0], f"the server did not log its open files limit: {logged}")

    if NOFILE[1] > NOFILE[0]:
        suite.test("the server raises its soft open files limit to the hard one, and logs it", raised_limit)
    else:
        suite.skip("the server raises its soft open files limit to the hard one, and logs it",
                   f"the harness's hard limit is {NOFILE[1]}: nothing to raise to")

    def flood():
        server = client.proc.pid
        base = len(os.listdir(f"/proc/{server}/fd"))
        # One jail holds thousands of idle connections to its gate, past the
        # bridge, from three processes (each under the jail's own nofile).
        holder = """
import os, socket, sys, time
held, refused = [], 0
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_UNIX)
    s.setblocking(False)
    try:
        s.connect('/run/nix-sandbox/egress.sock')
        held.append(s)
    except OSError:
        s.close()
        refused += 1
with open('/tmp/flood-%d' % os.getpid(), 'w') as f:
    f.write('%d %d' % (len(held), refused))
time.sleep(3600)
"""
        start = f"""
import glob, subprocess, sys, time
for _ in range(3):
    subprocess.Popen([sys.executable, '-c', {holder!r}, '1000'], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
deadline = time.time() + 60
while len(glob.glob('/tmp/flood-*')) < 3 and time.time() < deadline:
    time.sleep(0.2)
print('FLOOD', sorted(open(f).read() for f in glob.glob('/tmp/flood-*')))
"""
        result = client.request("tools/call", {"name": "run", "arguments": {
            "env": "egress", "session": "flood", "code": start}})
        text = "".join(c.get("text", "") for c in result["content"] if c.get("type") == "text")
        counts = [line for line in text.splitlines() if line.startswith("FLOOD")]
        check(counts and counts[0].count("'") == 6, f"the flood did not start: {text[-600:]}")
        pairs = [pair.split() for pair in counts[0][len("FLOOD ["):-1].replace("'", "").split(",")]
        held = sum(int(connected) for connected, _ in pairs)
        tried = sum(int(connected) + int(refused) for connected, refused in pairs)
        # Connected: accepted, or waiting in the gate's backlog (the rest
        # found it full).
        check(tried == 3000 and held > 4 * GATE_CONNECTIONS, f"the flood did not flood: {counts}")
        during = len(os.listdir(f"/proc/{server}/fd"))
        # Other environments, and other jails of this one, keep working.
        _, text = call_run(client, "python", "print(6 * 7)")
        check(text.startswith("42"), f"another environment failed during the flood: {text[-600:]}")
        _, text = run(client, sh("curl -sS https://allowed.test/during-flood"))
        check("hello from allowed.test/during-flood" in text, f"another jail's network failed: {text[-600:]}")
        after = len(os.listdir(f"/proc/{server}/fd"))
        check(max(during, after) - base <= GATE_CONNECTIONS + 40,
              f"the server holds {max(during, after)} descriptors ({base} before the flood): "
              f"one jail took more than its {GATE_CONNECTIONS} connections")
        # The holders, by the pids they wrote (the server's end kills them too).
        client.request("tools/call", {"name": "run", "arguments": {
            "env": "egress", "session": "flood",
            "code": "import glob, os, signal\nfor f in glob.glob('/tmp/flood-*'):\n"
                    "    os.kill(int(f.rsplit('-', 1)[1]), signal.SIGKILL)\n"}})

    suite.test("one jail flooding its gate with idle connections takes no descriptors from the rest", flood)


def open_files_limit(pid):
    """The soft and hard RLIMIT_NOFILE of process `pid`."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise Failed(f"no open files limit in /proc/{pid}/limits")


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


PAGE = os.sysconf("SC_PAGE_SIZE")
# A chunk of /proc/PID/pagemap read at once: 64 Ki pages of 8 bytes each.
PAGEMAP_CHUNK = 1 << 16


def held(mem, pagemap, start, end):
    """The data of the pages of [start, end) that the process holds (in
    memory or swapped out, bits 63 and 62 of /proc/PID/pagemap), one run
    of consecutive pages at a time. A region never touched (a runtime's
    reserved heap of tens of GiB) is passed over at the cost of reading
    its page map, not read as gigabytes of zeros."""
    first, last = start // PAGE, end // PAGE
    run = None
    for chunk_start in range(first, last, PAGEMAP_CHUNK):
        count = min(PAGEMAP_CHUNK, last - chunk_start)
        pagemap.seek(chunk_start * 8)
        entries = pagemap.read(count * 8)
        if not entries.strip(b"\0"):
            pages = []
        else:
            flags = memoryview(entries).cast("Q")
            pages = [chunk_start + i for i in range(len(flags)) if flags[i] >> 62]
        for page in pages:
            if run and page == run[1]:
                run[1] = page + 1
                continue
            if run:
                yield read_run(mem, run)
            run = [page, page + 1]
    if run:
        yield read_run(mem, run)


def read_run(mem, run):
    mem.seek(run[0] * PAGE)
    return mem.read((run[1] - run[0]) * PAGE)


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
            with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem, \
                    open(f"/proc/{pid}/pagemap", "rb", 0) as pagemap:
                for line in maps:
                    fields = line.split()
                    if "r" not in fields[1]:
                        continue
                    start, end = (int(x, 16) for x in fields[0].split("-"))
                    try:
                        if any(secret in data for data in held(mem, pagemap, start, end)):
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
        hosts.write_text(f"{ADDR} {' '.join(NAMES)}\n127.0.0.1 loop.test\n{CLEAR_ADDR} clear.test\n"
                         + "".join(f"{addr} {name}\n" for name, addr in SPECIAL.items()))
        hosts.chmod(0o644)
        serve(80)
        serve(443, context)
        serve(8443, context)
        serve(80, addr="127.0.0.1")  # the "host's" internal service
        serve(443, context, addr="127.0.0.1")
        for addr in SPECIAL.values():
            serve(80, addr=addr, handler=SpecialHandler)
        clear_listen()
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
        argv = ["prlimit", f"--nofile={NOFILE[0]}:{NOFILE[1]}", "--", *argv]
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
