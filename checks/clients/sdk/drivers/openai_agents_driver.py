"""openai-agents: what the Runner hands its model as the `run` tool's output.

The model is an in-process `agents.Model`: on the first turn it calls `run`
with the check's arguments; on the second it reads the `function_call_output`
item the Runner built from the MCP result (exactly what the Responses API
would get) and answers. One Runner.run per call; the MCP server object stays
connected across runs.

Every check runs twice: with the default `use_structured_content=False` and
with `use_structured_content=True` (the model then gets
json.dumps(structuredContent) whenever the result has one). Both use
`client_session_timeout_seconds=60`; one more check shows what the default
of 5 s does to a call that runs longer than 5 s (the sandbox's own timeout
is 30 s).
"""

import asyncio
import json
import uuid
from importlib.metadata import version

import anyio
from agents import Agent, Model, ModelResponse, Runner
from agents.mcp import MCPServerStdio, MCPServerStreamableHttp
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

import common as c

VERSION = version("openai-agents")
MCP_VERSION = version("mcp")


class ScriptModel(Model):
    def __init__(self):
        self.args = None
        self.output = None
        self.tools = []

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema,
                           handoffs, tracing, *, previous_response_id=None, conversation_id=None,
                           prompt=None, **kwargs):
        self.tools = [getattr(t, "name", "?") for t in tools]
        items = input if isinstance(input, list) else []
        outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if outputs:
            self.output = outputs[-1].get("output")
            return self._message("done")
        if self.args is None:
            return self._message("no call")
        call = ResponseFunctionToolCall(
            arguments=json.dumps(self.args), call_id=f"call_{uuid.uuid4().hex[:8]}", name="run",
            type="function_call", id=f"fc_{uuid.uuid4().hex[:8]}", status="completed",
        )
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    def _message(self, text):
        msg = ResponseOutputMessage(
            id=f"msg_{uuid.uuid4().hex[:8]}", role="assistant", status="completed", type="message",
            content=[ResponseOutputText(text=text, type="output_text", annotations=[])],
        )
        return ModelResponse(output=[msg], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


def output_text(output):
    """The function_call_output's text, and a description of its shape."""
    if isinstance(output, str):
        return output, "function_call_output: str"
    if isinstance(output, list):
        kinds = [i.get("type", "?") if isinstance(i, dict) else type(i).__name__ for i in output]
        texts = [i.get("text", "") for i in output if isinstance(i, dict)]
        return "\n".join(texts), f"function_call_output: list [{', '.join(kinds)}]"
    return json.dumps(output, default=str), f"function_call_output: {type(output).__name__}"


class Api:
    def __init__(self, server, structured):
        self.server = server
        self.model = ScriptModel()
        self.agent = Agent(name="agent", instructions="test", model=self.model, mcp_servers=[server])
        self.structured = structured

    async def run(self, args):
        self.model.args = args
        self.model.output = None
        await Runner.run(self.agent, "go", max_turns=4)
        if self.model.output is None:
            raise RuntimeError("the model never got the tool's output")
        text, form = output_text(self.model.output)
        out = self.model.output if isinstance(self.model.output, list) else []
        images = sum(1 for i in out if isinstance(i, dict) and i.get("type") == "input_image")
        return c.Seen(text, None, form, self.model.output, images=images)

    async def list_tools(self):
        return [t.name for t in await self.server.list_tools()]

    async def call(self, args):
        return await self.run(args)

    async def read_resource(self, uri):
        r = c.wire(await self.server.read_resource(uri))
        return "".join(x.get("text", "") for x in r.get("contents", []))

    async def cancel_call(self, args, after_s):
        self.model.args = args
        with anyio.move_on_after(after_s):
            await Runner.run(self.agent, "go", max_turns=4)


def make_server(structured, timeout_s):
    name = "sandbox"
    if c.TRANSPORT == "stdio":
        argv = c.server_argv()
        return MCPServerStdio(params={"command": argv[0], "args": argv[1:]}, name=name,
                              use_structured_content=structured, client_session_timeout_seconds=timeout_s)
    return MCPServerStreamableHttp(params={"url": c.URL, "headers": c.AUTH}, name=name,
                                   use_structured_content=structured, client_session_timeout_seconds=timeout_s)


async def variant(structured):
    label = "openai-agents[use_structured_content]" if structured else "openai-agents"
    rep = c.Report(label, f"{VERSION} (mcp {MCP_VERSION})")
    server = make_server(structured, 60)
    try:
        async with server:
            await c.run_scenario(rep, Api(server, structured))
    except Exception as e:  # noqa: BLE001
        rep.exception("connection", e)


async def default_timeout():
    """A 6 s call with the default client_session_timeout_seconds (5 s)."""
    rep = c.Report("openai-agents", f"{VERSION} (mcp {MCP_VERSION})")
    what = "a 6 s call with the default client timeout (5 s)"
    server = make_server(False, 5)
    try:
        async with server:
            api = Api(server, False)
            seen = await api.call({"env": "shell", "code": "sleep 6; echo slept"})
            if "slept" in seen.text:
                rep.ok(what + " returns")
            else:
                rep.info(f"{what}: the model gets: {c.short(seen.text, 160)}")
                rep.ok(what + " fails at the client (set client_session_timeout_seconds above the sandbox timeout)")
        server = make_server(False, 60)
        async with server:
            seen = await Api(server, False).call({"env": "shell", "code": "sleep 6; echo slept"})
            rep.check("a 6 s call with client_session_timeout_seconds=60 returns", "slept" in seen.text,
                      "no output", seen.raw)
    except Exception as e:  # noqa: BLE001
        rep.exception(what, e)


async def main():
    await asyncio.gather(variant(False), variant(True), default_timeout())


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as e:  # noqa: BLE001
        c.Report("openai-agents", VERSION).exception("driver", e)
    print("done", flush=True)
