"""The Python `mcp` SDK as its users drive it.

mcp 1.x: ClientSession over stdio_client / streamablehttp_client (the
initialize handshake). mcp 2.x: the high-level `Client` in its default mode
("auto": probes `server/discover` at 2026-07-28, falls back to initialize).
"""

import logging
import sys
from importlib.metadata import version

import anyio

import common as c

VERSION = version("mcp")
MAJOR = int(VERSION.split(".")[0])


class TerminationLog(logging.Handler):
    """Keeps the SDK's warnings about DELETE /mcp at close."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        msg = record.getMessage()
        if "termination" in msg.lower():
            self.messages.append(msg)


class V1Api:
    """mcp 1.x ClientSession."""

    def __init__(self, session):
        self.s = session

    async def list_tools(self):
        return [t.name for t in (await self.s.list_tools()).tools]

    async def call(self, args):
        return c.Seen.from_result(await self.s.call_tool("run", args))

    async def call_with_progress(self, args):
        """The call with a progress_callback: the result and every
        (progress, total, message) the SDK handed it."""
        seen = []

        async def on_progress(progress, total, message):
            seen.append((progress, total, message))

        result = await self.s.call_tool("run", args, progress_callback=on_progress)
        return c.Seen.from_result(result), seen

    async def read_resource(self, uri):
        from pydantic import AnyUrl

        r = c.wire(await self.s.read_resource(AnyUrl(uri)))
        return "".join(x.get("text", "") for x in r.get("contents", []))

    async def cancel_call(self, args, after_s):
        # mcp 1.x sends no notifications/cancelled when a caller abandons a
        # request: send it by hand, the way a host that cancels does.
        import mcp.types as t

        request_id = self.s._request_id  # the id the next request gets
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.s.call_tool, "run", args)
            await anyio.sleep(after_s)
            await self.s.send_notification(
                t.ClientNotification(
                    t.CancelledNotification(
                        method="notifications/cancelled",
                        params=t.CancelledNotificationParams(requestId=request_id, reason="user cancelled"),
                    )
                )
            )
            tg.cancel_scope.cancel()


class V2Api(V1Api):
    """mcp 2.x Client."""

    async def read_resource(self, uri):
        r = c.wire(await self.s.read_resource(uri))
        return "".join(x.get("text", "") for x in r.get("contents", []))

    async def cancel_call(self, args, after_s):
        # Abandoning a call sends notifications/cancelled in mcp 2.x.
        with anyio.move_on_after(after_s):
            await self.s.call_tool("run", args)


# Prints a numbered line every half second for 5 s, in the shell (the
# suite holds python to a 5 s timeout).
PRINTING = "for i in 0 1 2 3 4 5 6 7 8 9; do echo tick $i; sleep 0.5; done"


async def progress_checks(rep, api):
    """A 5-second printing run: progress notifications carry its lines."""
    what = "a 5 s printing run sends progress with its newest output lines"
    try:
        seen, notes = await api.call_with_progress({"env": "shell", "code": PRINTING})
        with_lines = [n for n in notes if n[2] and "tick" in n[2]]
        growing = all(a[0] < b[0] for a, b in zip(notes, notes[1:]))
        rep.info(f"progress: {len(notes)} notifications, {len(with_lines)} with output")
        rep.check(what, "tick 9" in seen.text and len(with_lines) >= 3 and growing,
                  f"{len(notes)} notifications, {len(with_lines)} with output, growing={growing}",
                  notes[-3:])
    except Exception as e:  # noqa: BLE001
        rep.exception(what, e)


async def main_v1(rep):
    from mcp import ClientSession, StdioServerParameters

    if c.TRANSPORT == "stdio":
        from mcp.client.stdio import stdio_client

        argv = c.server_argv()
        cm = stdio_client(StdioServerParameters(command=argv[0], args=argv[1:]), errlog=sys.stderr)
    else:
        from mcp.client.streamable_http import streamablehttp_client

        cm = streamablehttp_client(c.URL, headers=c.AUTH)
    async with cm as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            protocol = init.protocolVersion
            rep.info(f"negotiated: {protocol} (initialize)")
            await c.run_scenario(rep, V1Api(session), protocol=protocol)
            await progress_checks(rep, V1Api(session))


async def main_v2(rep):
    from mcp import Client, StdioServerParameters

    if c.TRANSPORT == "stdio":
        argv = c.server_argv()
        server = StdioServerParameters(command=argv[0], args=argv[1:])
        client = Client(server)
        async with client:
            await scenario_v2(rep, client)
    else:
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        async with create_mcp_http_client(headers=c.AUTH) as http:
            async with Client(streamable_http_client(c.URL, http_client=http)) as client:
                await scenario_v2(rep, client)


async def scenario_v2(rep, client):
    protocol = client.protocol_version
    how = "server/discover" if client.session.discover_result is not None else "initialize"
    rep.info(f"negotiated: {protocol} ({how}, mode=auto)")
    await c.run_scenario(rep, V2Api(client), protocol=protocol)
    await progress_checks(rep, V2Api(client))


def main():
    rep = c.Report("mcp-python", VERSION)
    log = TerminationLog()
    logging.getLogger().addHandler(log)
    try:
        anyio.run(main_v1 if MAJOR < 2 else main_v2, rep)
    except Exception as e:  # noqa: BLE001
        rep.exception("connection", e)
    if c.TRANSPORT == "http":
        rep.check("closing the connection (DELETE /mcp) raises no SDK warning", not log.messages,
                  "SDK warned", "; ".join(log.messages))
    rep.done()


if __name__ == "__main__":
    main()
