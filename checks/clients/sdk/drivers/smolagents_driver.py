"""smolagents: what a ToolCallingAgent's model is shown of a `run` call
made through smolagents' MCP adapter (MCPClient, on mcpadapt).

The model is an in-process `smolagents.Model` that asks for `run` with
only `code` (no `env`, `files` or `session`), then for `final_answer`,
and records every message it is given. mcpadapt turns the tool's schema
into smolagents inputs and the agent checks each call against them: an
optional argument not marked `"nullable": true` would be "required"
there (`Argument env is required`; a default does not count).
"""

from importlib.metadata import version

from mcp import StdioServerParameters
from smolagents import MCPClient, ToolCallingAgent
from smolagents.models import (
    ChatMessage,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    MessageRole,
    Model,
)

import common as c

VERSION = version("smolagents")
MCPADAPT_VERSION = version("mcpadapt")
MCP_VERSION = version("mcp")


def server_parameters():
    if c.TRANSPORT == "stdio":
        argv = c.server_argv()
        return StdioServerParameters(command=argv[0], args=argv[1:])
    return {"url": c.URL, "transport": "streamable-http", "headers": c.AUTH}


def call(name, arguments, n):
    function = ChatMessageToolCallFunction(name=name, arguments=arguments)
    return ChatMessage(role=MessageRole.ASSISTANT, content="",
                       tool_calls=[ChatMessageToolCall(function=function, id=f"call_{n}", type="function")])


class Scripted(Model):
    """Calls `run` with `code` alone, then `final_answer`; keeps what it
    is shown."""

    def __init__(self):
        super().__init__(model_id="nsm-scripted")
        self.shown = []

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs):
        self.shown.append(messages)
        if len(self.shown) == 1:
            return call("run", {"code": c.PRINT_CODE}, 1)
        return call("final_answer", {"answer": "done"}, 2)


def text_of(message):
    content = message.content if hasattr(message, "content") else message.get("content")
    if isinstance(content, list):
        return "\n".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content or "")


def main():
    rep = c.Report("smolagents", f"{VERSION} (mcpadapt {MCPADAPT_VERSION}, mcp {MCP_VERSION})")
    try:
        with MCPClient(server_parameters(), structured_output=False) as tools:
            run = {t.name: t for t in tools}.get("run")
            if not rep.check("the adapter offers run", run is not None, "no run tool", [t.name for t in tools]):
                rep.done()
                return
            optional = {k: v.get("nullable", False) for k, v in run.inputs.items() if k != "code"}
            rep.info(f"inputs: {sorted(run.inputs)}; nullable (optional to the agent): {optional}")
            rep.check("every argument but code is optional to the agent", all(optional.values()),
                      "an optional argument is required in smolagents", run.inputs)
            model = Scripted()
            agent = ToolCallingAgent(tools=[run], model=model, max_steps=3, verbosity_level=0)
            answer = agent.run("Print 6 * 7 in the sandbox.")
            shown = "\n".join(text_of(m) for m in model.shown[1]) if len(model.shown) > 1 else ""
            rep.info(f"shown: the tool's output in the next step's messages; final answer {answer!r}")
            rep.check("run with only code shows the model 42", "42" in shown and "required" not in shown,
                      "42 not in what the model is shown", shown[-400:])
    except Exception as e:  # noqa: BLE001
        rep.exception("connection", e)
    rep.done()


if __name__ == "__main__":
    main()
