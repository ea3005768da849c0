"""A small MCP client over stdio for the benchmark (standard library only).

Newline-delimited JSON-RPC, like checks/e2e/e2e.py's client, but requests may be
in flight from several threads at once: a reader thread hands each answer to
the thread waiting for its id. A `lean` client has no reader thread: the one
thread that calls it reads its own answer, as a session wrapper run directly
is read (bench.py's DirectSession), so that a round trip through the server
and one straight to a wrapper carry the same client costs (the hand-off from
a reader thread costs Python tens of microseconds a call). The server's
stderr is kept (tail) for reports.

The server's stdin and stdout are pipes, as Python's and Rust's clients
make them, or with `sockets` a socketpair each, as Node's `child_process`
makes them (Claude Code, Gemini CLI, the TypeScript SDK). HttpClient
speaks to a server started with `--http` instead.
"""

import collections
import http.client
import json
import socket
import subprocess
import threading
import time

DEADLINE = 120  # seconds; a guard against hangs, not a timing assertion
PROTOCOL = "2025-06-18"


class McpError(Exception):
    pass


class Client:
    """Starts `argv` with `env` and speaks MCP to it over stdin/stdout;
    `lean`: one request at a time, from one thread."""

    def __init__(self, argv, env, lean=False, sockets=False):
        self.started = time.perf_counter()
        self._sockets = []
        if sockets:
            (to_server, stdin), (from_server, stdout) = socket.socketpair(), socket.socketpair()
            try:
                self.proc = subprocess.Popen(
                    argv, stdin=stdin.fileno(), stdout=stdout.fileno(), stderr=subprocess.PIPE, env=env
                )
            finally:
                stdin.close()
                stdout.close()
            self._sockets = [to_server, from_server]
            self._to, self._from = to_server.makefile("wb"), from_server.makefile("rb")
        else:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
            )
            self._to, self._from = self.proc.stdin, self.proc.stdout
        self.pid = self.proc.pid
        self.init_result = None
        self._lock = threading.Lock()
        self._next_id = 0
        # notifications/progress seen by the reader thread (not lean).
        self.progress_seen = 0
        self._waiting = {}  # id -> [Event, message]
        self._closed = False
        self.stderr = collections.deque(maxlen=200)
        self._lean = lean
        self._since = None  # when a lean request began waiting
        reader = self._watch if lean else self._read
        threading.Thread(target=reader, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read(self):
        for line in self._from:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                slot = self._waiting.get(message.get("id"))
                if message.get("method") == "notifications/progress":
                    self.progress_seen += 1
            if slot is not None:
                slot[1] = message
                slot[0].set()
        with self._lock:
            self._closed = True
            slots = list(self._waiting.values())
        for slot in slots:
            slot[0].set()

    def _read_stderr(self):
        for line in self.proc.stderr:
            self.stderr.append(line.decode(errors="replace"))

    def send(self, message):
        data = json.dumps(message).encode() + b"\n"
        with self._lock:
            self._to.write(data)
            self._to.flush()

    def _watch(self):
        """Kills the server when a lean request waits past DEADLINE."""
        while self.proc.poll() is None:
            time.sleep(1)
            since = self._since
            if since is not None and time.monotonic() - since > DEADLINE:
                self.proc.kill()
                return

    def _answer_lean(self, request_id):
        """The answer to `request_id`, read by the calling thread; None if
        the server closed stdout."""
        self._since = time.monotonic()
        try:
            for line in self._from:
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if message.get("id") == request_id:
                    return message
            return None
        finally:
            self._since = None

    def request(self, method, params):
        """Sends one request and waits for its answer; returns `result`."""
        if self._lean:
            self._next_id += 1
            self.send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
            message = self._answer_lean(self._next_id)
        else:
            message = self._request_threaded(method, params)
        if message is None:
            raise McpError(f"the server closed stdout; stderr: {self.stderr_tail()}")
        if "error" in message:
            raise McpError(f"{method} failed: {message['error']}")
        return message["result"]

    def _request_threaded(self, method, params):
        """The answer to one request, handed over by the reader thread."""
        slot = [threading.Event(), None]
        with self._lock:
            if self._closed:
                raise McpError(f"the server is gone; stderr: {self.stderr_tail()}")
            self._next_id += 1
            request_id = self._next_id
            self._waiting[request_id] = slot
        try:
            self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            if not slot[0].wait(DEADLINE):
                raise McpError(f"no answer to {method} within {DEADLINE} s")
        finally:
            with self._lock:
                self._waiting.pop(request_id, None)
        return slot[1]

    def initialize(self):
        """The handshake; its answer (instructions...) is kept in init_result."""
        self.init_result = self.request("initialize", {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "nix-sandbox-mcp-bench", "version": "1"},
        })
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return self.init_result

    def run(self, code, env=None, session=None, packages=None, files=None, meta=None, **more):
        """Calls the `run` tool (`meta`: the request's `_meta`, a
        progressToken...; `more`: other arguments, `from`, `end`); returns
        (result, its text content)."""
        arguments = {"code": code, **more}
        if env is not None:
            arguments["env"] = env
        if session is not None:
            arguments["session"] = session
        if packages is not None:
            arguments["packages"] = packages
        if files is not None:
            arguments["files"] = files
        params = {"name": "run", "arguments": arguments}
        if meta is not None:
            params["_meta"] = meta
        result = self.request("tools/call", params)
        text = "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")
        return result, text

    def stderr_tail(self):
        return "".join(self.stderr)[-800:]

    def close(self):
        try:
            self._to.close()
            if self._sockets:
                # The socket itself closes once its file and it are closed.
                self._sockets[0].close()
        except OSError:
            pass
        self._wait()
        if self._lean:
            # Only the caller reads a lean client's stdout; a reader
            # thread's stdout is left to the thread.
            self._from.close()
            for end in self._sockets[1:]:
                end.close()

    def _wait(self):
        """Waits for the server to exit, killing it past DEADLINE."""
        try:
            self.proc.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class HttpClient(Client):
    """The server started with `--http 127.0.0.1:0` and a token, spoken to
    over streamable HTTP on one kept-alive connection (http.client), one
    request at a time; answers in JSON or in an event stream."""

    def __init__(self, argv, env, token_file):
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            argv + ["--http", "127.0.0.1:0", "--token-file", token_file],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
        )
        self.pid = self.proc.pid
        self.init_result = None
        self._next_id = 0
        self.stderr = collections.deque(maxlen=200)
        port = None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace")
            self.stderr.append(line)
            if "listening on http://" in line:
                port = int(line.split("listening on http://")[1].split("/")[0].rsplit(":", 1)[1])
                break
        if port is None:
            raise McpError(f"the server over HTTP did not start; stderr: {self.stderr_tail()}")
        threading.Thread(target=self._read_stderr, daemon=True).start()
        with open(token_file) as f:
            token = f.read().strip()
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                         "Accept": "application/json, text/event-stream"}
        self._http = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE)

    def _post(self, message):
        self._http.request("POST", "/mcp", json.dumps(message).encode(), self._headers)
        response = self._http.getresponse()
        body = response.read()
        if response.status >= 300:
            raise McpError(f"HTTP {response.status}: {body[:300]!r}; stderr: {self.stderr_tail()}")
        return response, body

    def send(self, message):
        self._post(message)

    def request(self, method, params):
        self._next_id += 1
        response, body = self._post({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        session = response.getheader("mcp-session-id")
        if session:
            self._headers["Mcp-Session-Id"] = session
            self._headers["MCP-Protocol-Version"] = PROTOCOL
        if response.getheader("content-type", "").startswith("text/event-stream"):
            events = [json.loads(line[5:]) for line in body.decode().splitlines()
                      if line.startswith("data:") and line[5:].strip()]
            message = next((m for m in events if m.get("id") == self._next_id), None)
        else:
            message = json.loads(body)
        if message is None:
            raise McpError(f"no answer to {method} in {body[:300]!r}")
        if "error" in message:
            raise McpError(f"{method} failed: {message['error']}")
        return message["result"]

    def close(self):
        self._http.close()
        self.proc.terminate()
        self._wait()
