"""A fake model API on loopback for driving real agent CLIs.

It speaks just enough of four wire formats for the CLIs under test:

- Anthropic Messages (`POST .../v1/messages`, streaming or not) for Claude Code;
- OpenAI Responses (`POST .../responses`) for Codex;
- Gemini (`POST .../models/M:generateContent` and `:streamGenerateContent`)
  for Gemini CLI;
- OpenAI Chat Completions (`POST .../chat/completions`) for opencode.

The "model" follows a script of tool calls.  The script is keyed on the
conversation, never on request order: a request whose tools include the
sandbox's `run` tool is answered with the script step numbered by how many
tool results the request already carries (then a final text), and every other
request (title generation, classifiers, next-speaker checks, token counts,
model lists, telemetry) gets a short plausible answer.  Every request is
recorded, so the test reads exactly what the model was shown.

Python 3.11 standard library only.  It binds 127.0.0.1 and nothing else.
"""

import gzip
import json
import re
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FINAL_TEXT = "All steps done."
SIDE_TEXT = "Sandbox check"


def find_tool_name(tools):
    """(name, namespace) of the sandbox `run` tool as this client spells it,
    or None.

    Walks whatever shape the client uses (Anthropic `name`, OpenAI
    `function.name` or `name`, Gemini `functionDeclarations`, and Codex's
    `{"type": "namespace", "name": "mcp__sandbox", "tools": [...]}`, whose
    calls name the inner tool and the namespace).
    """
    found = []  # (name, namespace)

    def walk(x, ns):
        if isinstance(x, dict):
            name = x.get("name")
            inner = x.get("tools")
            if isinstance(name, str) and isinstance(inner, list):
                for t in inner:
                    walk(t, name)
                return
            if isinstance(name, str):
                found.append((name, ns))
            for v in x.values():
                if isinstance(v, (dict, list)):
                    walk(v, ns)
        elif isinstance(x, list):
            for v in x:
                walk(v, ns)

    walk(tools, None)
    for name, ns in found:
        full = (ns or "") + "__" + name
        if re.search(r"(^|[_\-.:/])run$", name) and "sandbox" in full.lower():
            return (name, ns)
    return None


class Script:
    """The scripted tool calls: a list of argument objects for `run`."""

    def __init__(self, steps):
        self.steps = steps


# --- per-format views of a request ---------------------------------------


def anthropic_tool_results(body):
    return [
        b
        for m in body.get("messages") or []
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]


def responses_tool_results(body):
    inp = body.get("input")
    if not isinstance(inp, list):
        return []
    return [
        i
        for i in inp
        if isinstance(i, dict) and i.get("type") in ("function_call_output", "custom_tool_call_output", "mcp_tool_call_output")
    ]


def gemini_tool_results(body):
    return [
        p["functionResponse"]
        for c in body.get("contents") or []
        for p in c.get("parts") or []
        if isinstance(p, dict) and "functionResponse" in p
    ]


def chat_tool_results(body):
    return [m for m in body.get("messages") or [] if m.get("role") == "tool"]


class FakeAPI:
    """One fake API server (one per CLI run, so each has its own record)."""

    def __init__(self, script, label="", model="fake-model"):
        self.script = script
        self.label = label
        self.model = model
        self.lock = threading.Lock()
        self.records = []  # dicts: method, path, body (parsed JSON or text), kind, answer
        self.tool_names = set()
        self.counter = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server_version = "fakeapi/1"

            def log_message(self, *a):
                pass

            def _body(self):
                te = self.headers.get("Transfer-Encoding", "")
                if "chunked" in te.lower():
                    data = b""
                    while True:
                        line = self.rfile.readline()
                        n = int(line.split(b";")[0].strip() or b"0", 16)
                        if n == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            break
                        data += self.rfile.read(n)
                        self.rfile.readline()
                else:
                    n = int(self.headers.get("Content-Length") or 0)
                    data = self.rfile.read(n) if n else b""
                enc = (self.headers.get("Content-Encoding") or "").lower()
                if enc == "gzip":
                    data = gzip.decompress(data)
                elif enc == "deflate":
                    data = zlib.decompress(data)
                elif enc:
                    return {"_undecodable_encoding": enc, "_len": len(data)}
                if not data:
                    return None
                try:
                    return json.loads(data)
                except ValueError:
                    return data.decode("utf-8", "replace")

            def _send_json(self, obj, status=200):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _send_sse(self, events):
                """events: list of (event name or None, data object or str)."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                for name, data in events:
                    chunk = ""
                    if name:
                        chunk += f"event: {name}\n"
                    chunk += "data: " + (data if isinstance(data, str) else json.dumps(data)) + "\n\n"
                    self.wfile.write(chunk.encode())
                    self.wfile.flush()

            def do_GET(self):
                api._record(self, "GET", None, "get")
                path = self.path.split("?")[0]
                if path.endswith("/models"):
                    self._send_json(api._model_list())
                elif re.search(r"/models/[^/]+$", path):
                    name = path.rsplit("/", 1)[1]
                    self._send_json({"id": name, "object": "model", "name": "models/" + name,
                                     "created": 0, "owned_by": "fake"})
                else:
                    self._send_json({})

            def do_HEAD(self):
                api._record(self, "HEAD", None, "head")
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                body = self._body()
                path = self.path.split("?")[0]
                query = self.path.partition("?")[2]
                try:
                    if path.endswith("/count_tokens"):
                        api._record(self, "POST", body, "anthropic-count")
                        self._send_json({"input_tokens": 100})
                    elif path.endswith("/messages"):
                        api._anthropic(self, body)
                    elif path.endswith("/responses"):
                        api._responses(self, body)
                    elif path.endswith("/chat/completions"):
                        api._chat(self, body)
                    elif ":countTokens" in path:
                        api._record(self, "POST", body, "gemini-count")
                        self._send_json({"totalTokens": 100})
                    elif ":streamGenerateContent" in path or ":generateContent" in path:
                        api._gemini(self, body, stream=":stream" in path or "alt=sse" in query)
                    else:
                        api._record(self, "POST", body, "other")
                        self._send_json({})
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    # --- lifecycle -------------------------------------------------------

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        if self.thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    # --- helpers ---------------------------------------------------------

    def _record(self, h, method, body, kind, answer=None):
        with self.lock:
            self.records.append({
                "t": time.time(),
                "method": method,
                "path": h.path,
                "kind": kind,
                "body": body,
                "answer": answer,
            })

    def _next_id(self, prefix):
        with self.lock:
            self.counter += 1
            return f"{prefix}{self.counter}"

    def _model_list(self):
        m = self.model
        return {
            "object": "list",
            "data": [{"id": m, "object": "model", "created": 0, "owned_by": "fake"}],
            "models": [{"name": "models/" + m, "id": m, "slug": m, "display_name": m}],
        }

    def _decide(self, tools, n_results):
        """('call', name, args, step) or ('text', str)."""
        found = find_tool_name(tools)
        if found is None:
            return ("text", SIDE_TEXT)
        name, ns = found
        with self.lock:
            self.tool_names.add(f"{ns} / {name}" if ns else name)
        if n_results < len(self.script.steps):
            return ("call", name, self.script.steps[n_results], n_results, ns)
        return ("text", FINAL_TEXT)

    # --- Anthropic Messages ----------------------------------------------

    def _anthropic(self, h, body):
        body = body if isinstance(body, dict) else {}
        d = self._decide(body.get("tools"), len(anthropic_tool_results(body)))
        self._record(h, "POST", body, "anthropic", d)
        model = body.get("model") or self.model
        mid = self._next_id("msg_")
        if d[0] == "call":
            block = {"type": "tool_use", "id": f"toolu_{mid}_{d[3]}", "name": d[1], "input": d[2]}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": d[1]}
            stop = "end_turn"
        usage = {"input_tokens": 50, "output_tokens": 10, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 0}
        if not body.get("stream"):
            h._send_json({"id": mid, "type": "message", "role": "assistant", "model": model,
                          "content": [block], "stop_reason": stop, "stop_sequence": None,
                          "usage": usage})
            return
        start = dict(block)
        if block["type"] == "tool_use":
            start["input"] = {}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            start["text"] = ""
            delta = {"type": "text_delta", "text": block["text"]}
        h._send_sse([
            ("message_start", {"type": "message_start", "message": {
                "id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
                "stop_reason": None, "stop_sequence": None,
                "usage": {**usage, "output_tokens": 1}}}),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": start}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": 10}}),
            ("message_stop", {"type": "message_stop"}),
        ])

    # --- OpenAI Responses ------------------------------------------------

    def _responses(self, h, body):
        body = body if isinstance(body, dict) else {}
        d = self._decide(body.get("tools"), len(responses_tool_results(body)))
        self._record(h, "POST", body, "responses", d)
        rid = self._next_id("resp_")
        model = body.get("model") or self.model
        if d[0] == "call":
            name, ns = d[1], d[4]
            item = {"type": "function_call", "id": f"fc_{rid}", "call_id": f"call_{rid}_{d[3]}",
                    "name": name, "arguments": json.dumps(d[2]), "status": "completed"}
            if ns:
                item["namespace"] = ns
        else:
            item = {"type": "message", "id": f"msg_{rid}", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": d[1], "annotations": []}]}
        usage = {"input_tokens": 50, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 10,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 60}
        resp = {"id": rid, "object": "response", "created_at": int(time.time()), "model": model,
                "status": "completed", "output": [item], "usage": usage}
        if not body.get("stream"):
            h._send_json(resp)
            return
        events = [("response.created", {"type": "response.created", "sequence_number": 0,
                                        "response": {**resp, "status": "in_progress", "output": [], "usage": None}})]
        added = dict(item, status="in_progress")
        if item["type"] == "message":
            added["content"] = []
        else:
            added["arguments"] = ""
        events.append(("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                                      "sequence_number": 1, "item": added}))
        if item["type"] == "message":
            events.append(("response.content_part.added", {
                "type": "response.content_part.added", "item_id": item["id"], "output_index": 0,
                "content_index": 0, "sequence_number": 2,
                "part": {"type": "output_text", "text": "", "annotations": []}}))
            events.append(("response.output_text.delta", {
                "type": "response.output_text.delta", "item_id": item["id"], "output_index": 0,
                "content_index": 0, "delta": d[1], "sequence_number": 3}))
            events.append(("response.output_text.done", {
                "type": "response.output_text.done", "item_id": item["id"], "output_index": 0,
                "content_index": 0, "text": d[1], "sequence_number": 4}))
            events.append(("response.content_part.done", {
                "type": "response.content_part.done", "item_id": item["id"], "output_index": 0,
                "content_index": 0, "sequence_number": 5, "part": item["content"][0]}))
        else:
            events.append(("response.function_call_arguments.delta", {
                "type": "response.function_call_arguments.delta", "item_id": item["id"], "output_index": 0,
                "delta": item["arguments"], "sequence_number": 2}))
            events.append(("response.function_call_arguments.done", {
                "type": "response.function_call_arguments.done", "item_id": item["id"], "output_index": 0,
                "arguments": item["arguments"], "sequence_number": 3}))
        events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": 0,
                                                     "sequence_number": 6, "item": item}))
        events.append(("response.completed", {"type": "response.completed", "sequence_number": 7,
                                               "response": resp}))
        h._send_sse(events)

    # --- OpenAI Chat Completions -----------------------------------------

    def _chat(self, h, body):
        body = body if isinstance(body, dict) else {}
        d = self._decide(body.get("tools"), len(chat_tool_results(body)))
        self._record(h, "POST", body, "chat", d)
        cid = self._next_id("chatcmpl-")
        model = body.get("model") or self.model
        created = int(time.time())
        usage = {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}
        if d[0] == "call":
            tc = {"id": f"call_{cid}_{d[3]}", "type": "function",
                  "function": {"name": d[1], "arguments": json.dumps(d[2])}}
            msg = {"role": "assistant", "content": None, "tool_calls": [tc]}
            finish = "tool_calls"
        else:
            msg = {"role": "assistant", "content": d[1]}
            finish = "stop"
        if not body.get("stream"):
            h._send_json({"id": cid, "object": "chat.completion", "created": created, "model": model,
                          "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                          "usage": usage})
            return

        def chunk(delta, fin=None, **extra):
            return (None, {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                           "choices": [{"index": 0, "delta": delta, "finish_reason": fin}], **extra})

        if d[0] == "call":
            tc0 = {"index": 0, **tc}
            events = [chunk({"role": "assistant", "content": None, "tool_calls": [tc0]})]
        else:
            events = [chunk({"role": "assistant", "content": d[1]})]
        events.append(chunk({}, finish, usage=usage))
        events.append((None, "[DONE]"))
        h._send_sse(events)

    # --- Gemini ------------------------------------------------------------

    def _gemini(self, h, body, stream):
        body = body if isinstance(body, dict) else {}
        d = self._decide(body.get("tools"), len(gemini_tool_results(body)))
        gc = body.get("generationConfig") or {}
        if d[0] == "text" and "json" in str(gc.get("responseMimeType", "")).lower():
            # Side classifiers (next speaker, routing, loop detection): a
            # plausible JSON that ends the turn and picks a model.
            d = ("text", json.dumps({"reasoning": "scripted", "next_speaker": "user",
                                     "model_choice": "flash", "complexity_reasoning": "scripted",
                                     "complexity_score": 1, "unproductive_state_confidence": 0.0,
                                     "unproductive_state_analysis": "none"}))
        self._record(h, "POST", body, "gemini", d)
        if d[0] == "call":
            part = {"functionCall": {"name": d[1], "args": d[2]}}
        else:
            part = {"text": d[1]}
        resp = {"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP",
                                "index": 0}],
                "usageMetadata": {"promptTokenCount": 50, "candidatesTokenCount": 10, "totalTokenCount": 60},
                "modelVersion": self.model, "responseId": self._next_id("gem-")}
        if stream:
            h._send_sse([(None, resp)])
        else:
            h._send_json(resp)
