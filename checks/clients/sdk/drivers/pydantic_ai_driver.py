"""pydantic-ai: what the agent hands its model as the `run` tool's return.

The model is pydantic-ai's in-process FunctionModel: on the first request of
a run it calls `run` with the arguments of the check, on the second it reads
the tool's return as the framework gives it (a ToolReturnPart, or a
RetryPromptPart when the tool reported an error) and ends the run. One agent
run per call; the MCP connection stays open across runs (`async with agent`:
without it every run reconnects, and over stdio that is a new server with no
sessions).

pydantic-ai 1.x: MCPServerStdio / MCPServerStreamableHTTP on the `mcp` 1.x
ClientSession. pydantic-ai 2.x: MCPToolset on the FastMCP 4 Client (mode
"auto").
"""

import json
from importlib.metadata import version

import anyio
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, RetryPromptPart, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel

import common as c

VERSION = version("pydantic-ai-slim")
MAJOR = int(VERSION.split(".")[0])


class Script:
    """The FunctionModel's behaviour for the next run, and what it saw."""

    def __init__(self):
        self.args = None
        self.seen = None  # (kind, text) of the tool's return
        self.tools = []

    def model(self, messages, info):
        self.tools = [t.name for t in info.function_tools]
        last = messages[-1]
        for part in getattr(last, "parts", []):
            if isinstance(part, ToolReturnPart):
                # 2.x: a tool error is a ToolReturnPart whose outcome is not "success"
                outcome = getattr(part, "outcome", None)
                kind = "ToolReturnPart" + (f"(outcome={outcome})" if outcome else "")
                self.seen = (kind, part.model_response_str(), part.content, outcome not in (None, "success"))
                return ModelResponse(parts=[TextPart("done")])
            if isinstance(part, RetryPromptPart):
                self.seen = ("RetryPromptPart", part.model_response(), part.content, True)
                return ModelResponse(parts=[TextPart("done")])
        if self.args is None:
            return ModelResponse(parts=[TextPart("no call")])
        return ModelResponse(parts=[ToolCallPart(tool_name="run", args=json.dumps(self.args))])


def describe(kind, content):
    if isinstance(content, list):
        # the text first, then each block as the framework mapped it
        inner = ", ".join("str" if i == 0 and isinstance(x, str) else
                          f"str {c.short(x, 48)!r}" if isinstance(x, str) else type(x).__name__
                          for i, x in enumerate(content))
        return f"{kind} with a list [{inner}]"
    return f"{kind} with a {type(content).__name__}"


class Api:
    def __init__(self, agent, script, toolset):
        self.agent, self.script, self.toolset = agent, script, toolset

    async def list_tools(self):
        self.script.args = None
        await self.agent.run("list")
        return self.script.tools

    async def call(self, args):
        self.script.args = args
        self.script.seen = None
        await self.agent.run("go")
        if self.script.seen is None:
            raise RuntimeError("the model never got the tool's return")
        kind, text, content, is_error = self.script.seen
        items = content if isinstance(content, list) else [content]
        images = sum(1 for x in items if str(getattr(x, "media_type", "")).startswith("image/"))
        return c.Seen(text, is_error, describe(kind, content), text, images=images)

    async def read_resource(self, uri):
        r = await self.toolset.read_resource(uri)
        if isinstance(r, list):
            return "".join(x if isinstance(x, str) else repr(x) for x in r)
        return r if isinstance(r, str) else repr(r)

    async def cancel_call(self, args, after_s):
        # A user (or a host) abandons the run: the task is cancelled.
        self.script.args = args
        with anyio.move_on_after(after_s):
            await self.agent.run("go")


def toolset_v1(**kwargs):
    from pydantic_ai.mcp import MCPServerStdio, MCPServerStreamableHTTP

    if c.TRANSPORT == "stdio":
        argv = c.server_argv()
        return MCPServerStdio(argv[0], argv[1:], timeout=30, **kwargs)
    return MCPServerStreamableHTTP(c.URL, headers=c.AUTH, **kwargs)


def toolset_v2():
    from pydantic_ai.mcp import MCPToolset

    if c.TRANSPORT == "stdio":
        from fastmcp.client.transports import StdioTransport

        argv = c.server_argv()
        return MCPToolset(StdioTransport(command=argv[0], args=argv[1:]))
    return MCPToolset(c.URL, headers=c.AUTH)


async def failing_twice(toolset, **agent_kwargs):
    """One run in which the model runs two failing programs in a row: what
    the run does (a failing program is isError, which pydantic-ai turns into
    a retry, and retries are limited)."""
    calls = 0

    def model(messages, info):
        nonlocal calls
        calls += 1
        if calls <= 2:
            return ModelResponse(parts=[ToolCallPart(tool_name="run", args=json.dumps({"code": "1/0"}))])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(model), toolsets=[toolset], **agent_kwargs)
    try:
        async with agent:
            await agent.run("go")
        return None
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"


async def main(rep):
    script = Script()
    toolset = toolset_v1() if MAJOR < 2 else toolset_v2()
    agent = Agent(FunctionModel(script.model), toolsets=[toolset], retries=3)
    async with agent:
        # 1.x runs on mcp 1.x, which sends no notifications/cancelled for an
        # abandoned call; 2.x's FastMCP 4 client (mcp 2.x) does.
        await c.run_scenario(rep, Api(agent, script, toolset), cancel_propagates=MAJOR >= 2)

    error = await failing_twice(toolset_v1() if MAJOR < 2 else toolset_v2())
    rep.info("two failing programs in a row, default retries: "
             + ("the run goes on" if error is None else f"the run raises {c.short(error, 120)}"))
    if MAJOR < 2:
        # the server's own max_retries (default 1) counts, not the Agent's
        error = await failing_twice(toolset_v1(max_retries=3))
        rep.check("two failing programs in a row with MCPServer*(max_retries=3): the run goes on",
                  error is None, "the run raised", error)
    else:
        from pydantic_ai.mcp import MCPToolset

        failed = toolset_v2()
        failed = MCPToolset(failed.client, tool_error_behavior="failed")
        error = await failing_twice(failed)
        rep.check("two failing programs in a row with tool_error_behavior='failed': the run goes on",
                  error is None, "the run raised", error)


if __name__ == "__main__":
    c.drive("pydantic-ai", VERSION, main)
