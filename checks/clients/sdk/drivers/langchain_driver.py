"""langchain-mcp-adapters: the ToolMessage a LangChain agent hands its model.

The tool is invoked the way an agent's tool node does (`tool.ainvoke` with a
tool call), which returns the ToolMessage the model gets next (content,
status, artifact).

The scenario runs on tools from `load_mcp_tools(session)` inside
`client.session("sandbox")`: one connection for all calls. The tools of
`MultiServerMCPClient.get_tools()` open a new connection (over stdio a new
server) for every call, so a session cannot outlive its call: shown by an
extra check.
"""

import asyncio
import uuid
from importlib.metadata import version

from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.resources import load_mcp_resources
from langchain_mcp_adapters.tools import load_mcp_tools

import common as c

VERSION = version("langchain-mcp-adapters")
MCP_VERSION = version("mcp")


def connection():
    if c.TRANSPORT == "stdio":
        argv = c.server_argv()
        return {"transport": "stdio", "command": argv[0], "args": argv[1:]}
    return {"transport": "streamable_http", "url": c.URL, "headers": c.AUTH}


def seen_of(msg):
    content = msg.content
    if isinstance(content, str):
        text, kinds = content, "str"
    else:
        parts = []
        for b in content:
            if isinstance(b, dict):
                parts.append(b.get("text") or "")
            else:
                parts.append(str(b))
        text = "\n".join(parts)
        kinds = "list [" + ", ".join(b.get("type", "?") if isinstance(b, dict) else "str" for b in content) + "]"
    form = f"ToolMessage(status={msg.status}) content {kinds}; artifact {'set' if msg.artifact else 'None'}"
    raw = {"content": content, "status": msg.status, "artifact": msg.artifact}
    images = 0 if isinstance(content, str) else sum(
        1 for b in content if isinstance(b, dict) and b.get("type") in ("image", "image_url"))
    return c.Seen(text, msg.status == "error", form, raw, images=images)


async def invoke(tool, args):
    call = {"type": "tool_call", "id": f"call_{uuid.uuid4().hex[:8]}", "name": tool.name, "args": args}
    return seen_of(await tool.ainvoke(call))


class Api:
    def __init__(self, session, tools):
        self.session = session
        self.tool = {t.name: t for t in tools}["run"]
        self.names = [t.name for t in tools]

    async def list_tools(self):
        return self.names

    async def call(self, args):
        return await invoke(self.tool, args)

    async def read_resource(self, uri):
        blobs = await load_mcp_resources(self.session, uris=[uri])
        return "".join(b.as_string() for b in blobs)

    async def cancel_call(self, args, after_s):
        task = asyncio.ensure_future(invoke(self.tool, args))
        await asyncio.sleep(after_s)
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass


async def main(rep):
    client = MultiServerMCPClient({"sandbox": connection()})
    finished = False
    try:
        async with client.session("sandbox") as session:
            tools = await load_mcp_tools(session)
            # mcp 1.x sends no notifications/cancelled for an abandoned call
            await c.run_scenario(rep, Api(session, tools),
                                 cancel_propagates=int(MCP_VERSION.split(".")[0]) >= 2)
            finished = True
    except Exception as e:  # noqa: BLE001
        if not finished:
            raise
        # The abandoned call of the cancel check is still running on the
        # server when the session closes.
        what = "closing the session while an abandoned call still runs"
        if "BrokenResourceError" in repr(e):
            rep.fail(what, "mcp 1.x stdio_client raised BrokenResourceError: a message came after its "
                     "ClientSession closed (the server answered the abandoned call after stdin EOF)")
        else:
            rep.exception(what, e)

    # get_tools(): a connection per call
    what = "get_tools() (a connection per call): one-off run shows 42"
    try:
        tool = {t.name: t for t in await client.get_tools()}["run"]
        seen = await invoke(tool, {"code": c.PRINT_CODE})
        rep.check(what, "42" in seen.text, "no 42", seen.raw)
        first = await invoke(tool, {"session": "g", "code": "z = 1\nprint('set')"})
        handle = c.session_handle("g", first.text)
        second = await invoke(tool, {"session": handle, "code": "print(z)"})
        kept = "1" in second.text and not second.is_error
        rep.info("get_tools(): a session " + ("survives" if kept else "does not survive")
                 + f" between calls: {c.short(second.text, 120)}")
    except Exception as e:  # noqa: BLE001
        rep.exception(what, e)


if __name__ == "__main__":
    c.drive("langchain-mcp-adapters", f"{VERSION} (mcp {MCP_VERSION})", main)
