"""Sessions under load from one asyncio client (standard library only).

`sessions` sessions x `calls` round trips at once, as MCP clients make
them: one thread, one event loop, every request in flight on one stdio
connection and its answers matched by id, no thread hand-off. The same
client drives the baseline, the session wrappers run directly (one pipe
each). A client of 32 threads waiting on Events (mcp_client.py) adds its
own tail to both: Python's threads take turns at the GIL, and a thread
woken by its answer can wait several switch intervals (5 ms) for it.
"""

import asyncio
import json
import time

DEADLINE = 120  # seconds; a guard against hangs, not a timing assertion
PROTOCOL = "2025-06-18"
LINE_LIMIT = 1 << 20


class Failed(Exception):
    pass


async def _drive(calls_of, sessions, calls):
    """Creates each session (`x = 0`), then times `calls` `x += 1` round
    trips of every session at once and checks `x` after; the latencies
    (seconds) and the wall time of the timed part."""
    call = [calls_of(i) for i in range(sessions)]
    await asyncio.gather(*(c("x = 0") for c in call))
    latencies = []

    async def worker(c):
        for _ in range(calls):
            t0 = time.perf_counter()
            await c("x += 1")
            latencies.append(time.perf_counter() - t0)
        text = await c("print(x)")
        if not text.startswith(f"{calls}\n"):
            raise Failed(f"x is {text.strip()!r} after {calls} calls")

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in call))
    return latencies, time.perf_counter() - t0


async def _mcp(argv, env, sessions, calls):
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env=env, limit=LINE_LIMIT)
    waiting, ids = {}, iter(range(1, 1 << 62))

    async def read():
        while line := await proc.stdout.readline():
            message = json.loads(line)
            answer = waiting.pop(message.get("id"), None)
            if answer is not None:
                answer.set_result(message)
        for answer in waiting.values():
            answer.set_exception(Failed("the server closed stdout"))

    async def request(method, params):
        request_id = next(ids)
        answer = asyncio.get_running_loop().create_future()
        waiting[request_id] = answer
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                                     "params": params}).encode() + b"\n")
        message = await answer
        if "error" in message:
            raise Failed(f"{method} failed: {message['error']}")
        return message["result"]

    reader = asyncio.create_task(read())
    try:
        await request("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                     "clientInfo": {"name": "nix-sandbox-mcp-bench", "version": "1"}})
        proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')

        def calls_of(i):
            async def call(code):
                arguments = {"code": code, "env": "python", "session": f"load{i}"}
                result = await request("tools/call", {"name": "run", "arguments": arguments})
                text = "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")
                if result.get("isError"):
                    raise Failed(f"`{code}` in session load{i}: {text[-300:]!r}")
                return text
            return call

        return await _drive(calls_of, sessions, calls)
    finally:
        proc.stdin.close()
        await proc.wait()
        reader.cancel()


async def _direct(argv, env, sessions, calls):
    procs = [await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env=env, limit=LINE_LIMIT) for _ in range(sessions)]
    try:
        def calls_of(i):
            proc, ids = procs[i], iter(range(1, 1 << 62))

            async def call(code):
                request_id = next(ids)
                frame = {"op": "exec", "id": request_id, "code": code, "output_bytes": 65536}
                proc.stdin.write(json.dumps(frame).encode() + b"\n")
                line = await proc.stdout.readline()
                reply = json.loads(line) if line else {}
                if reply.get("id") != request_id or reply.get("status") != 0:
                    raise Failed(f"`{code}` in a session wrapper run directly: {line[-300:]!r}")
                return reply["stdout"]
            return call

        return await _drive(calls_of, sessions, calls)
    finally:
        for proc in procs:
            proc.stdin.close()
        for proc in procs:
            await proc.wait()


def mcp(argv, env, sessions, calls):
    """The load through the MCP server `argv`: (latencies, wall)."""
    return asyncio.run(asyncio.wait_for(_mcp(argv, env, sessions, calls), DEADLINE))


def direct(argv, env, sessions, calls):
    """The load on `sessions` session wrappers `argv` run directly."""
    return asyncio.run(asyncio.wait_for(_direct(argv, env, sessions, calls), DEADLINE))
