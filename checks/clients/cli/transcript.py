"""What the model was shown: tool results read back from the recorded API
requests, in one normalised form for all four wire formats, and the scripted
conversation's assertions on them.

A shown result is a dict:
    parts:    [("text", str) | ("image", mime, n_base64_chars) | ("other", str)]
    is_error: True/False/None (None when the format has no such flag)
    form:     a short description of the shape the client used
"""

import json
import re

import fakeapi

PNG_CODE = r"""import struct, zlib
def chunk(t, d):
    c = struct.pack('>I', len(d)) + t + d
    return c + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
w = h = 8
raw = b''.join(b'\x00' + b'\xff\x00\x00' * w for _ in range(h))
png = (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0))
       + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
open('outputs/red.png', 'wb').write(png)
print('wrote', len(png), 'bytes')"""

CSV_CODE = "open('outputs/data.csv', 'w').write('a,b\\n1,2\\n')"

# The scripted conversation: the arguments of each `run` call, in order.
STEPS = [
    {"env": "python", "code": "print(6*7)"},
    {"code": "1/0"},
    {"code": "import time; time.sleep(60)"},
    {"session": "s", "code": "x = 41"},
    {"session": "s", "code": "print(x + 1)"},
    {"session": "s", "code": PNG_CODE},
    {"session": "s", "code": CSV_CODE},
]
PROMPT = "Run the sandbox checks with the run tool, one call at a time."

# Facts that only the machine-readable result carries: seeing them in what
# the model was shown means the client showed structuredContent or _meta.
MACHINE_KEYS = ("store_path", "nix-sandbox-mcp/result", "stdout_dropped_bytes", "peak_memory_bytes")


def _img_part(mime, data):
    return ("image", mime or "?", len(data or ""))


def _data_url(url):
    m = re.match(r"data:([^;,]+)?(;base64)?,(.*)", url or "", re.S)
    return (m.group(1), m.group(3)) if m else (None, None)


# --- per-format extraction ------------------------------------------------


def _parts(content, part_of):
    """A tool result's `content`, a string or a list of blocks that
    `part_of` turns into parts, as (parts, a short form for the info line)."""
    if isinstance(content, str):
        return [("text", content)], "string"
    parts = [part_of(x) for x in content or []]
    return parts, "[" + ",".join(p[0] for p in parts) + "]"


def _anthropic_part(x):
    if x.get("type") == "text":
        return ("text", x.get("text", ""))
    if x.get("type") == "image":
        src = x.get("source") or {}
        return _img_part(src.get("media_type"), src.get("data"))
    return ("other", json.dumps(x)[:200])


def _chat_part(x):
    if x.get("type") == "text":
        return ("text", x.get("text", ""))
    if x.get("type") == "image_url":
        return _img_part(*_data_url((x.get("image_url") or {}).get("url")))
    return ("other", json.dumps(x)[:200])


def _anthropic(body):
    out = []
    for m in body.get("messages") or []:
        content = m.get("content")
        if not isinstance(content, list):
            continue
        for b in content:
            if not isinstance(b, dict) or b.get("type") != "tool_result":
                continue
            parts, form = _parts(b.get("content"), _anthropic_part)
            out.append({"parts": parts, "is_error": bool(b.get("is_error")), "form": "tool_result " + form})
    return out


def _responses(body):
    out = []
    for item in body.get("input") or []:
        if not isinstance(item, dict):
            continue
        t = item.get("type")
        if t in ("function_call_output", "custom_tool_call_output", "mcp_tool_call_output"):
            o = item.get("output")
            parts = []
            if isinstance(o, str):
                parts.append(("text", o))
                form = "string"
            elif isinstance(o, list):
                for x in o:
                    xt = x.get("type")
                    if xt in ("input_text", "output_text", "text"):
                        parts.append(("text", x.get("text", "")))
                    elif xt == "input_image":
                        parts.append(_img_part(*_data_url(x.get("image_url"))))
                    else:
                        parts.append(("other", json.dumps(x)[:200]))
                form = "[" + ",".join(p[0] for p in parts) + "]"
            else:
                parts.append(("other", json.dumps(o)[:200]))
                form = type(o).__name__
            out.append({"parts": parts, "is_error": None, "form": f"{t} {form}"})
        elif t == "message" and item.get("role") == "user" and out:
            # Media some clients send after the tool output, as user input.
            imgs = [x for x in item.get("content") or [] if isinstance(x, dict) and x.get("type") == "input_image"]
            for x in imgs:
                out[-1]["parts"].append(_img_part(*_data_url(x.get("image_url"))))
                out[-1]["form"] += " +user input_image"
        elif t in ("function_call", "message"):
            if t == "function_call" and out:
                out[-1]["closed"] = True
    return out


def _gemini(body):
    out = []
    for c in body.get("contents") or []:
        if c.get("role") == "model":
            if out:
                out[-1]["closed"] = True
            continue
        for p in c.get("parts") or []:
            if not isinstance(p, dict):
                continue
            if "functionResponse" in p:
                fr = p["functionResponse"]
                resp = fr.get("response")
                parts = []
                if isinstance(resp, dict) and set(resp) <= {"output"} and isinstance(resp.get("output"), str):
                    parts.append(("text", resp["output"]))
                    form = "functionResponse {output}"
                elif isinstance(resp, dict) and set(resp) <= {"error"} and isinstance(resp.get("error"), str):
                    parts.append(("text", resp["error"]))
                    form = "functionResponse {error}"
                else:
                    parts.append(("text", json.dumps(resp)))
                    form = "functionResponse " + json.dumps(sorted(resp) if isinstance(resp, dict) else type(resp).__name__)
                for x in fr.get("parts") or []:
                    if "inlineData" in x:
                        parts.append(_img_part(x["inlineData"].get("mimeType"), x["inlineData"].get("data")))
                        form += " +inlineData in functionResponse.parts"
                out.append({"parts": parts, "is_error": None, "form": form})
            elif out and not out[-1].get("closed"):
                if "inlineData" in p:
                    out[-1]["parts"].append(_img_part(p["inlineData"].get("mimeType"), p["inlineData"].get("data")))
                    out[-1]["form"] += " +inlineData part"
                elif "text" in p:
                    out[-1]["parts"].append(("text", p["text"]))
                    out[-1]["form"] += " +text part"
    return out


def _chat(body):
    out = []
    for m in body.get("messages") or []:
        role = m.get("role")
        c = m.get("content")
        if role == "tool":
            parts, form = _parts(c, _chat_part)
            out.append({"parts": parts, "is_error": None, "form": "role=tool " + form})
        elif role == "user" and out and not out[-1].get("closed") and isinstance(c, list):
            for x in c:
                if x.get("type") == "image_url":
                    out[-1]["parts"].append(_img_part(*_data_url((x.get("image_url") or {}).get("url"))))
                    out[-1]["form"] += " +user image_url"
                elif x.get("type") == "text":
                    out[-1]["parts"].append(("text", x.get("text", "")))
                    out[-1]["form"] += " +user text"
        elif role == "assistant" and out:
            out[-1]["closed"] = True
    return out


EXTRACT = {
    "anthropic": (_anthropic, fakeapi.anthropic_tool_results),
    "responses": (_responses, fakeapi.responses_tool_results),
    "gemini": (_gemini, fakeapi.gemini_tool_results),
    "chat": (_chat, fakeapi.chat_tool_results),
}


def shown_results(records):
    """The tool results of the scripted conversation, from its last request
    (the one carrying the most tool results), and that request's kind."""
    best, best_n, kind = None, -1, None
    for r in records:
        k = r["kind"]
        if k not in EXTRACT or not isinstance(r["body"], dict):
            continue
        if fakeapi.find_tool_name(r["body"].get("tools")) is None:
            continue
        n = len(EXTRACT[k][1](r["body"]))
        if n > best_n:
            best, best_n, kind = r, n, k
    if best is None:
        return [], None
    return EXTRACT[kind][0](best["body"]), kind


def text_of(res):
    return "\n".join(p[1] for p in res["parts"] if p[0] == "text")


def _clip(s, n):
    return s if len(s) <= 2 * n else s[:n] + " [...] " + s[-n:]


def excerpt(res, n=110):
    """A short view of one shown result: head and tail of each text part."""
    if res is None:
        return "(no tool result reached the model)"
    bits = []
    for p in res["parts"]:
        if p[0] == "text":
            bits.append(repr(_clip(p[1], n)))
        elif p[0] == "image":
            bits.append(f"<image {p[1]}, {p[2]} base64 chars>")
        else:
            bits.append(f"<{p[1][:60]}>")
    return " + ".join(bits)


def has_line(text, line):
    return any(l.strip() == line for l in text.splitlines())


# --- the assertions ----------------------------------------------------------


def check(results):
    """[(status, what, result_or_None, reason)] for the scripted conversation;
    status is 'ok', 'FAIL' or 'noimage' (an image that did not reach the
    model: FAIL or info, the caller decides with what it knows of the client)."""
    def at(i):
        return results[i] if i < len(results) else None

    out = []

    def expect(i, what, cond, reason):
        r = at(i)
        if r is None:
            out.append(("FAIL", what, None, f"no result for call {i + 1} reached the model ({len(results)} did)"))
        elif cond(r):
            out.append(("ok", what, r, ""))
        else:
            out.append(("FAIL", what, r, reason))

    expect(0, "run print(6*7) shows 42", lambda r: has_line(text_of(r), "42"), "no line `42` in what the model was shown")
    expect(1, "run 1/0 shows the traceback", lambda r: "ZeroDivisionError" in text_of(r), "no `ZeroDivisionError`")
    expect(1, "run 1/0 shows `exit code 1`", lambda r: "exit code 1" in text_of(r), "no `exit code 1`")
    expect(2, "run sleep(60) shows the timeout note", lambda r: "timed out after 5 s" in text_of(r),
           "no `timed out after 5 s`")
    expect(4, "session s keeps x: print(x + 1) shows 42", lambda r: has_line(text_of(r), "42"),
           "no line `42` in what the model was shown")
    r = at(5)
    what = "session s image outputs/red.png reaches the model as an image"
    if r is None:
        out.append(("FAIL", what, None, f"no result for call 6 reached the model ({len(results)} did)"))
    elif any(p[0] == "image" and p[1] == "image/png" and p[2] > 0 for p in r["parts"]):
        out.append(("ok", what, r, ""))
    else:
        out.append(("noimage", what, r, "no image/png block in the tool result"))
    expect(6, "session s outputs/data.csv shows sandbox://s/outputs/data.csv",
           lambda r: "sandbox://s/outputs/data.csv" in text_of(r), "the link is not in what the model was shown")
    return out


# --- a run longer than the client's timeout ---------------------------------

# A 60 s shell run printing a line a second, asking for timeout_s 90, called
# by a CLI whose own timeout for the server is 30 s (LONG_CLIENT_TIMEOUT_MS).
# A client that resets that timeout on progress waits it out; without
# progress it gives up at 30 s.
LONG_CODE = 'for i in $(seq 1 60); do echo "line $i"; sleep 1; done; echo finished'
LONG_STEPS = [{"env": "shell", "code": LONG_CODE, "timeout_s": 90}]
LONG_CLIENT_TIMEOUT_MS = 30000


def call_seconds(records):
    """Seconds from the API answer that made the first `run` call to the
    first request carrying its result, or None."""
    t_call = t_result = None
    for r in records:
        kind = r["kind"]
        if kind not in EXTRACT or not isinstance(r["body"], dict):
            continue
        if t_call is not None and EXTRACT[kind][1](r["body"]):
            t_result = r["t"]
            break
        answer = r.get("answer")
        if t_call is None and answer and answer[0] == "call":
            t_call = r["t"]
    return None if t_call is None or t_result is None else t_result - t_call


def check_long(results, seconds, relay, withheld):
    """[(status, what, result_or_None, reason)] for the long run: with the
    progress passed, the model is shown its whole output after >= 60 s; with
    it withheld, a timeout error at the client's 30 s, and not the output.
    relay: the progress relay's report (calls, tokens, progress, passed)."""
    r = results[0] if results else None
    text = text_of(r) if r else ""
    limit = LONG_CLIENT_TIMEOUT_MS / 1000
    took = "no timing" if seconds is None else f"after {seconds:.0f} s"
    out = []

    def expect(what, cond, reason):
        if r is None:
            out.append(("FAIL", what, None, "no tool result reached the model"))
        else:
            out.append(("ok" if cond else "FAIL", what, r, "" if cond else f"{reason} ({took})"))

    calls, tokens = relay.get("calls", 0), relay.get("tokens", 0)
    out.append(("ok" if calls == 1 and tokens == 1 else "FAIL", "the CLI's tools/call carried a progressToken", r,
                f"{calls} tools/call, {tokens} with a progressToken"))
    if withheld:
        out.append(("ok" if relay.get("progress", 0) >= limit - 10 and relay.get("passed") == 0 else "FAIL",
                    f"the server sent progress during the {limit:.0f} s the CLI waited, and none reached the CLI", r,
                    f"relay: {relay}"))
        expect(f"without progress the CLI gives up at its {limit:.0f} s timeout and shows the model a timeout",
               "finished" not in text and re.search(r"time[d ]?\s*out", text, re.I)
               and seconds is not None and limit - 1 <= seconds < limit + 15,
               "expected a timeout error, shown about 30 s after the call")
    else:
        out.append(("ok" if relay.get("passed", 0) >= 50 else "FAIL",
                    "progress reached the CLI about once a second", r, f"relay: {relay}"))
        expect(f"a 60 s printing run outlasts the CLI's {limit:.0f} s timeout and the model is shown its whole output",
               has_line(text, "line 60") and has_line(text, "finished") and not r.get("is_error")
               and seconds is not None and seconds >= 60,
               "expected `line 60` and `finished`, shown after at least 60 s")
    return out


def summary(results):
    """One short line: the form of each result and whether machine facts show."""
    forms = []
    for i, r in enumerate(results):
        forms.append(f"#{i + 1} {r['form']}" + (" is_error" if r.get("is_error") else ""))
    all_text = "\n".join(text_of(r) for r in results)
    facts = [k for k in MACHINE_KEYS if k in all_text]
    tail = (f"; machine facts visible to the model ({', '.join(facts)})" if facts
            else "; no structuredContent/_meta facts visible")
    return "; ".join(forms) + tail
