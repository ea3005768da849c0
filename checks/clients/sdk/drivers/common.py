"""What every Python driver shares (stdlib only: it is imported from every venv).

A driver is started by ../run with these environment variables:
  NSM_SERVER_ARGV  the server's argv as JSON, without the transport flag
  NSM_TRANSPORT    "stdio" or "http"
  NSM_URL          http://127.0.0.1:PORT/mcp (http only; the server runs already)
  NSM_TOKEN        the bearer token (http only)
and prints one line per check on stdout (see Report), then `done`.
"""

import json
import os
import re
import sys
import traceback

TRANSPORT = os.environ.get("NSM_TRANSPORT", "stdio")
URL = os.environ.get("NSM_URL", "")
TOKEN = os.environ.get("NSM_TOKEN", "")
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def server_argv():
    """The server's argv for stdio: the JSON file's plus `--stdio`."""
    return json.loads(os.environ["NSM_SERVER_ARGV"]) + ["--stdio"]


# The scenario every client runs -------------------------------------------

PRINT_CODE = "print(6*7)"
TRACE_CODE = "def f():\n    raise ValueError('boom')\n\nf()"
SESSION_CODE_1 = (
    "import os, struct, zlib\n"
    "x = 41\n"
    "os.makedirs('outputs', exist_ok=True)\n"
    "with open('outputs/data.csv', 'w') as f:\n"
    "    f.write('a,b\\n1,2\\n')\n"
    "def chunk(t, d):\n"
    "    return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d))\n"
    "png = (b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0))\n"
    "       + chunk(b'IDAT', zlib.compress(b'\\x00\\xff\\x00\\x00')) + chunk(b'IEND', b''))\n"
    "with open('outputs/dot.png', 'wb') as f:\n"
    "    f.write(png)\n"
    "print('wrote data.csv')"
)
SESSION_CODE_2 = "print(x + 1)"
CANCEL_SETUP = "y = 7\nprint('ready')"
CANCEL_CODE = "import time\ntime.sleep(30)\nprint('slept')"
AFTER_CANCEL = "print('after cancel', y)"
CANCEL_AFTER_S = 1.0

SESSION_RE = re.compile(r"session `([A-Za-z0-9_.-]+)`")
URI_RE = re.compile(r"sandbox://[A-Za-z0-9_.-]+/outputs/data\.csv")


def session_handle(requested, text):
    """The name to pass on later calls: the server-minted full name when the
    text announces one (stateless HTTP), else the name asked for."""
    for line in (text or "").splitlines():
        if "session `" in line:
            m = SESSION_RE.search(line)
            if m:
                return m.group(1)
    return requested


def data_uri(text):
    m = URI_RE.search(text or "")
    return m.group(0) if m else None


def short(value, limit=220):
    """A one-line excerpt."""
    if not isinstance(value, str):
        try:
            value = json.dumps(value, default=str)
        except Exception:
            value = repr(value)
    value = value.replace("\n", "\\n")
    return value if len(value) <= limit else value[: limit - 3] + "..."


class Report:
    def __init__(self, client, version, transport=TRANSPORT):
        self.prefix = f"{client} {version} {transport}"
        self.failed = 0

    def _print(self, line):
        print(line, flush=True)

    def ok(self, what):
        self._print(f"ok - {self.prefix}: {what}")

    def fail(self, what, reason, excerpt=None):
        self.failed += 1
        tail = "" if excerpt is None else f": {short(excerpt)}"
        self._print(f"FAIL - {self.prefix}: {what}: {reason}{tail}")

    def info(self, text):
        self._print(f"info - {self.prefix}: {text}")

    def check(self, what, cond, reason="", excerpt=None):
        if cond:
            self.ok(what)
        else:
            self.fail(what, reason or "unexpected result", excerpt)
        return bool(cond)

    def exception(self, what, exc):
        """A check that raised: its type and message, one line."""
        text = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, BaseExceptionGroup):  # noqa: F821 (3.11)
            leaves = []

            def walk(e):
                if isinstance(e, BaseExceptionGroup):  # noqa: F821
                    for sub in e.exceptions:
                        walk(sub)
                else:
                    leaves.append(f"{type(e).__name__}: {e}")

            walk(exc)
            text = "; ".join(leaves)
        print(f"[{self.prefix}] {what}:", file=sys.stderr)
        traceback.print_exception(exc, file=sys.stderr)
        self.fail(what, "raised", text)

    def done(self):
        self._print("done")


def drive(client, version, main):
    """Runs `main(rep)`, an async function, for one client; an exception that
    escapes it is a failed connection."""
    import anyio

    rep = Report(client, version)
    try:
        anyio.run(main, rep)
    except Exception as e:  # noqa: BLE001
        rep.exception("connection", e)
    rep.done()


def blocks_summary(blocks):
    """`text+resource_link` for a list of content blocks (dicts)."""
    return "+".join(b.get("type", "?") for b in blocks) or "nothing"


def wire(model):
    """A pydantic model as it was on the wire (camelCase, no None)."""
    if isinstance(model, dict):
        return model
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def text_of_blocks(blocks):
    return "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text")


class Seen:
    """What a call gave the model (or the SDK's user)."""

    def __init__(self, text, is_error=None, form="", raw=None, link_blocks=(), result=None, images=0):
        self.text = text or ""
        self.images = images  # images the model (or user) gets as images
        self.is_error = is_error
        self.form = form
        self.raw = raw if raw is not None else text
        self.link_blocks = list(link_blocks)  # URIs of resource_link blocks
        self.result = result  # the CallToolResult on the wire, when there is one

    @classmethod
    def from_result(cls, result, form_prefix="CallToolResult"):
        """For SDK clients: the user sees the content blocks."""
        r = wire(result)
        blocks = r.get("content", [])
        sc = r.get("structuredContent")
        meta = (r.get("_meta") or {})
        form = f"{form_prefix}.content [{blocks_summary(blocks)}]"
        form += "; structuredContent " + ("present" if sc is not None else "absent")
        form += "; _meta " + ("[" + ",".join(sorted(meta)) + "]" if meta else "absent")
        links = [b.get("uri") for b in blocks if b.get("type") == "resource_link"]
        images = sum(1 for b in blocks if b.get("type") == "image")
        return cls(text_of_blocks(blocks), r.get("isError"), form, r, links, r, images)


def structured_hides_output(result, needle):
    """True when a result's structuredContent lacks the output the content
    shows: clients that show structuredContent instead of the content then
    hide it from the model."""
    if not result:
        return False
    sc = result.get("structuredContent")
    return sc is not None and needle not in json.dumps(sc)


def run_scenario(rep, api, *, protocol=None, resources=True, cancel=True, cancel_propagates=True):
    """The shared checks. `api` gives:
      api.list_tools() -> list of tool names
      api.call(args) -> Seen   (an async function)
      api.read_resource(uri) -> text of the contents (when resources)
      api.cancel_call(args, after_s) -> None: start the call, cancel it (when cancel)
    `protocol` is the negotiated revision when the driver knows it.
    `cancel_propagates`: whether abandoning a call tells the server (a
    notifications/cancelled, or a dropped HTTP response stream). When it does
    not, the server cannot know, and the right answer to the next call is a
    clear `session_busy`.
    """

    async def scenario():
        try:
            names = await api.list_tools()
            rep.check("tools/list has run", "run" in names, "no run tool", names)
        except Exception as e:  # noqa: BLE001
            rep.exception("tools/list has run", e)

        try:
            seen = await api.call({"code": PRINT_CODE})
            form = seen.form
            if seen.result is None:  # a framework: does the model get the machine facts?
                facts = "store_path" in json.dumps(seen.raw, default=str)
                form += "; _meta facts " + ("given to the model" if facts else "not given to the model")
            rep.info(f"shown: {form}")
            rep.check("print(6*7) shows 42", "42" in seen.text and not seen.is_error,
                      "42 not in what is shown" if "42" not in seen.text else "flagged as error",
                      seen.raw)
            if seen.result is not None:
                rep.check("structuredContent does not hide stdout",
                          not structured_hides_output(seen.result, "42"),
                          "structuredContent holds no stdout (clients that show it see no 42)",
                          seen.result.get("structuredContent"))
        except Exception as e:  # noqa: BLE001
            rep.exception("print(6*7) shows 42", e)

        try:
            seen = await api.call({"code": TRACE_CODE})
            good = "ValueError: boom" in seen.text and "exit code 1" in seen.text
            rep.check("traceback shows ValueError and exit code 1",
                      good and seen.is_error is not False,
                      "missing traceback or `exit code 1`" if not good else "not flagged as error",
                      seen.raw)
        except Exception as e:  # noqa: BLE001
            rep.exception("traceback shows ValueError and exit code 1", e)

        await session_checks(rep, api, protocol, resources)
        if cancel:
            await cancel_checks(rep, api, cancel_propagates)

    return scenario()


def link_rule(protocol):
    """Whether a client on `protocol` should get resource_link blocks."""
    return protocol is not None and protocol >= "2025-06-18"


async def session_checks(rep, api, protocol, resources):
    what = "session call writes outputs/data.csv"
    try:
        seen = await api.call({"session": "s", "code": SESSION_CODE_1})
    except Exception as e:  # noqa: BLE001
        rep.exception(what, e)
        return
    if not rep.check(what, "wrote data.csv" in seen.text and not seen.is_error,
                     "no normal result", seen.raw):
        return
    rep.info(f"shown (a call with outputs): {seen.form}")
    rep.check("outputs/dot.png comes back as an image", seen.images >= 1,
              "no image in what is shown", seen.form)
    handle = session_handle("s", seen.text)
    if handle != "s":
        rep.info(f"session handle: server-minted `{handle}`")
    uri = data_uri(seen.text)
    rep.check("text names sandbox://.../outputs/data.csv", uri is not None, "no URI in text", seen.text)
    if protocol is not None and seen.result is not None:
        if link_rule(protocol):
            rep.check(f"resource_link block on {protocol}", bool(seen.link_blocks),
                      "no resource_link block", seen.result.get("content"))
        else:
            rep.check(f"no resource_link block on {protocol}", not seen.link_blocks,
                      "resource_link sent to a client before 2025-06-18", seen.result.get("content"))
    try:
        seen2 = await api.call({"session": handle, "code": SESSION_CODE_2})
        rep.check("session keeps state (x + 1 = 42)", "42" in seen2.text and not seen2.is_error,
                  "state lost or call refused", seen2.raw)
    except Exception as e:  # noqa: BLE001
        rep.exception("session keeps state (x + 1 = 42)", e)
    if resources and uri:
        try:
            text = await api.read_resource(uri)
            rep.check("resources/read of the data.csv URI", "a,b" in text and "1,2" in text,
                      "contents differ", text)
        except Exception as e:  # noqa: BLE001
            rep.exception("resources/read of the data.csv URI", e)


async def cancel_checks(rep, api, propagates=True):
    what = "call right after a cancelled session call succeeds"
    if not propagates:
        what = "call right after an abandoned session call gets session_busy (the client does not cancel)"
    try:
        seen = await api.call({"session": "c", "code": CANCEL_SETUP})
        if not seen.text or "ready" not in seen.text:
            rep.fail(what, "setup call failed", seen.raw)
            return
        handle = session_handle("c", seen.text)
        await api.cancel_call({"session": handle, "code": CANCEL_CODE}, CANCEL_AFTER_S)
        seen = await api.call({"session": handle, "code": AFTER_CANCEL})
        if not propagates:
            rep.info("cancel: abandoning a call does not cancel it on the server (no notifications/cancelled)")
            rep.check(what, "session_busy" in seen.text, "no session_busy", seen.raw)
        elif "session_busy" in seen.text:
            rep.fail(what, "session_busy", seen.raw)
        else:
            rep.check(what, "after cancel 7" in seen.text and not seen.is_error,
                      "no normal result (state kept?)", seen.raw)
    except Exception as e:  # noqa: BLE001
        rep.exception(what, e)
