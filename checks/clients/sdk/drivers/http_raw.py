"""Plain HTTP (urllib, no SDK): the answers of the HTTP front itself.

- 401 without the token: a body and `WWW-Authenticate: Bearer ...` that say a
  static bearer token is expected;
- DELETE /mcp of a live MCP session: 200 or 204, and the session is gone;
- DELETE /mcp of an unknown session id: 404.
"""

import json
import urllib.error
import urllib.request

import common as c

HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
INIT = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "nsm-sdk-check", "version": "1"}},
}


def request(method, headers=None, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(c.URL, data=data, method=method, headers={**HEADERS, **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode(errors="replace")


def header(headers, name):
    for k, v in headers.items():
        if k.lower() == name.lower():
            return v
    return None


def main():
    rep = c.Report("http", "urllib")
    try:
        status, headers, body = request("POST", {}, INIT)
        www = header(headers, "WWW-Authenticate") or ""
        rep.check("no token: 401", status == 401, f"status {status}", body)
        rep.check("401 has a body naming a bearer token", "token" in body.lower() and len(body.strip()) > 0,
                  "bare 401", body)
        rep.check("401 WWW-Authenticate: Bearer naming a static token",
                  www.lower().startswith("bearer") and ("static" in www.lower() or "token" in www.lower()),
                  "no hint in WWW-Authenticate", www or "(absent)")
        rep.info(f"401: WWW-Authenticate: {c.short(www, 160)}; body: {c.short(body, 160)}")
        status, _, body = request("POST", {"Authorization": "Bearer wrong-token"}, INIT)
        rep.check("wrong token: 401", status == 401, f"status {status}", body)
    except Exception as e:  # noqa: BLE001
        rep.exception("401 checks", e)

    try:
        status, headers, body = request("POST", c.AUTH, INIT)
        sid = header(headers, "Mcp-Session-Id")
        if not rep.check("initialize gives an Mcp-Session-Id", status == 200 and sid, f"status {status}", body):
            raise SystemExit
        auth = {**c.AUTH, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-06-18"}
        request("POST", auth, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        status, _, body = request("DELETE", auth)
        rep.check("DELETE /mcp of a live session: 200 or 204", status in (200, 204), f"status {status}", body)
        status, _, body = request("POST", auth, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        rep.check("the deleted session is gone (404)", status == 404, f"status {status}", body)
        status, _, body = request("DELETE", {**c.AUTH, "Mcp-Session-Id": "no-such-session",
                                            "MCP-Protocol-Version": "2025-06-18"})
        rep.check("DELETE /mcp of an unknown session: 404", status == 404, f"status {status}", body)
    except SystemExit:
        pass
    except Exception as e:  # noqa: BLE001
        rep.exception("DELETE checks", e)
    rep.done()


if __name__ == "__main__":
    main()
