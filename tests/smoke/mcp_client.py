#!/usr/bin/env python3
"""Smoke test with a real third-party MCP client (the Python `mcp` package).

Usage: tests/smoke/run PATH/TO/nix-sandbox-mcp

Serves the fixture environments (launcher/tests/fixtures: the host's bwrap around
python3, bash and node), then lists the tools and calls `run` the way an MCP
client does. Prints one line per check and a closing line
"smoke: N passed, N failed"; exits non-zero on any mismatch.
Needs the `mcp` package (tests/smoke/run makes a virtual environment with it);
bubblewrap, python3 and node on the host.
"""

import json
import sys
import tempfile
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "launcher" / "tests" / "fixtures"

results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f": {detail}"))


def wire(model):
    """A result as it was on the wire (camelCase keys), whatever the mcp version."""
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def facts(result):
    """A result's machine facts (in `_meta`, so clients show the content)."""
    return (result.get("_meta") or {}).get("nix-sandbox-mcp/result") or {}


def text_of(result):
    return result["content"][0]["text"]


async def main(binary, manifest):
    params = StdioServerParameters(
        command=binary,
        args=["--manifest", str(manifest), "--allow-wrappers-outside-store"],
    )
    with tempfile.TemporaryFile(mode="w+") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                init = wire(await session.initialize())
                check(
                    "initialize names the server",
                    init["serverInfo"]["name"] == "nix-sandbox-mcp",
                    init.get("serverInfo"),
                )
                instructions = init.get("instructions", "")
                check(
                    "instructions say the limits and the longest timeout a call may ask for",
                    "Limits per run: time 30 s (up to 120 s on request)" in instructions,
                    instructions,
                )

                tools = wire(await session.list_tools())["tools"]
                names = [t["name"] for t in tools]
                check("tools/list has exactly `run`", names == ["run"], names)
                schema = tools[0]["inputSchema"] if tools else {}
                check(
                    "run takes code, and env and timeout_s optional",
                    schema.get("required") == ["code"]
                    and {"env", "timeout_s"} <= set(schema.get("properties", {})),
                    schema,
                )
                holds = schema.get("properties", {}).get("env", {}).get("description", "")
                check(
                    "the env schema says what each environment holds",
                    all(f"{e}: " in holds or f"{e} (default): " in holds for e in ("node", "python", "shell")),
                    holds,
                )

                r = wire(await session.call_tool("run", {"env": "python", "code": "print(6 * 7)"}))
                check(
                    "python run prints and succeeds",
                    text_of(r) == "42\nexit code 0" and r.get("isError") is False,
                    r,
                )
                check(
                    "_meta carries the exit code, structuredContent is absent",
                    facts(r).get("exit_code") == 0
                    and facts(r).get("env") == "python"
                    and "structuredContent" not in r,
                    r,
                )

                r = wire(
                    await session.call_tool(
                        "run", {"env": "shell", "code": "echo out; echo err >&2; exit 3"}
                    )
                )
                check(
                    "bash stderr and exit code are reported",
                    text_of(r) == "out\n--- stderr ---\nerr\nexit code 3" and r.get("isError") is True,
                    r,
                )

                r = wire(await session.call_tool("run", {"env": "node", "code": "console.log([1, 2].length)"}))
                check("node run prints", text_of(r) == "2\nexit code 0", r)

                r = wire(await session.call_tool("run", {"env": "cobol", "code": "x"}))
                check(
                    "an unknown env is refused with its code",
                    text_of(r).startswith("error[unknown_env]: ")
                    and facts(r).get("error", {}).get("code") == "unknown_env"
                    and r.get("isError") is True,
                    r,
                )
        errlog.seek(0)
        log = errlog.read()
    if not all(results):
        print("--- server stderr ---\n" + log)


async def main_with_deadline(binary, manifest):
    with anyio.fail_after(120):  # a guard against hangs
        await main(binary, manifest)


def run():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    binary = str(Path(sys.argv[1]).resolve())
    template = (FIXTURES / "manifests" / "fixtures.json").read_text()
    manifest_text = template.replace("@WRAPPERS@", str(FIXTURES / "wrappers"))
    json.loads(manifest_text)
    with tempfile.TemporaryDirectory() as tmp:
        manifest = Path(tmp) / "manifest.json"
        manifest.write_text(manifest_text)
        try:
            anyio.run(main_with_deadline, binary, manifest)
        except Exception as e:  # a crash is a failed check, reported like one
            check("the session ran to the end", False, repr(e))
    passed = sum(results)
    failed = len(results) - passed
    print(f"smoke: {passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(run())
