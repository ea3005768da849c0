#!/usr/bin/env python3
"""A stdio relay between an MCP client and the server, so that the suite can
run the same CLI with and without the server's progress notifications.

    progress_relay.py MODE REPORT -- SERVER_ARGV...

MODE is `pass` (every message goes through) or `drop` (the server's
`notifications/progress` messages are withheld from the client). The relay
runs the server as its child, copies the client's messages to it unchanged
and the server's messages back line by line (stdio MCP is one JSON-RPC
message a line). After every message that changes them it rewrites REPORT
(JSON, replaced whole, so a relay killed with its client leaves a complete
one):
    calls:        the `tools/call` requests the client sent
    tokens:       how many of them carried `_meta.progressToken`
    progress:     the progress notifications the server sent
    passed:       how many of those reached the client
Exits with the server's status. Python standard library only.
"""

import json
import os
import subprocess
import sys
import threading


def main():
    if len(sys.argv) < 5 or sys.argv[1] not in ("pass", "drop") or sys.argv[3] != "--":
        sys.exit("usage: progress_relay.py pass|drop REPORT -- SERVER_ARGV...")
    mode, report, argv = sys.argv[1], sys.argv[2], sys.argv[4:]
    counts = {"mode": mode, "calls": 0, "tokens": 0, "progress": 0, "passed": 0}
    lock = threading.Lock()

    def save():
        tmp = report + ".tmp"
        with open(tmp, "w") as f:
            json.dump(counts, f)
        os.replace(tmp, report)

    def parse(line):
        try:
            msg = json.loads(line)
        except ValueError:
            return {}
        return msg if isinstance(msg, dict) else {}

    save()
    server = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def upstream():
        """Client to server, unchanged; tools/call requests counted."""
        for line in sys.stdin.buffer:
            msg = parse(line)
            if msg.get("method") == "tools/call":
                meta = (msg.get("params") or {}).get("_meta") or {}
                with lock:
                    counts["calls"] += 1
                    counts["tokens"] += "progressToken" in meta
                    save()
            try:
                server.stdin.write(line)
                server.stdin.flush()
            except BrokenPipeError:
                break
        try:
            server.stdin.close()
        except BrokenPipeError:
            pass

    threading.Thread(target=upstream, daemon=True).start()
    out = sys.stdout.buffer
    for line in server.stdout:
        if parse(line).get("method") == "notifications/progress":
            with lock:
                counts["progress"] += 1
                if mode == "drop":
                    save()
                    continue
                counts["passed"] += 1
                save()
        try:
            out.write(line)
            out.flush()
        except BrokenPipeError:
            break
    sys.exit(server.wait())


if __name__ == "__main__":
    main()
