"""FastMCP 4's Client (mode "auto", on mcp 2.x) as its users drive it.

A FastMCP user reads `result.data` (parsed from structuredContent when there
is one) or `result.content`; both are reported.
"""

from importlib.metadata import version

import anyio
from fastmcp import Client
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport

import common as c

VERSION = version("fastmcp-slim")


class Api:
    def __init__(self, client):
        self.client = client

    async def list_tools(self):
        return [t.name for t in await self.client.list_tools()]

    async def call(self, args):
        r = await self.client.call_tool("run", args, raise_on_error=False)
        wire = {
            "content": [b.model_dump(by_alias=True, mode="json", exclude_none=True) for b in r.content],
            "isError": r.is_error,
        }
        if r.structured_content is not None:
            wire["structuredContent"] = r.structured_content
        if r.meta:
            wire["_meta"] = r.meta
        seen = c.Seen.from_result(wire, form_prefix="CallToolResult")
        seen.form += f"; .data {'None' if r.data is None else type(r.data).__name__}"
        return seen

    async def read_resource(self, uri):
        contents = await self.client.read_resource(uri)
        return "".join(getattr(x, "text", "") or "" for x in contents)

    async def cancel_call(self, args, after_s):
        with anyio.move_on_after(after_s):
            await self.client.call_tool("run", args, raise_on_error=False)


async def main(rep):
    if c.TRANSPORT == "stdio":
        argv = c.server_argv()
        transport = StdioTransport(command=argv[0], args=argv[1:])
    else:
        transport = StreamableHttpTransport(c.URL, headers=c.AUTH)
    async with Client(transport) as client:
        protocol = client.protocol_version
        rep.info(f"negotiated: {protocol} (mode=auto)")
        await c.run_scenario(rep, Api(client), protocol=protocol)


if __name__ == "__main__":
    c.drive("fastmcp-client", VERSION, main)
