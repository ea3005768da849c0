"""Drivers: how to run each real CLI headless against the fake model API and
our MCP server (stdio or streamable HTTP), in a throwaway home.

Flags and config keys were read from the CLIs themselves (their bundled
code, docs and --help, see README.md), not guessed.
"""

import json
import os

import transcript

# Every client gets: a home of its own, no colour, and a proxy that refuses
# (a closed loopback port) for anything that is not loopback, so a CLI that
# tries another host fails fast.  The fake API and the MCP server are on
# 127.0.0.1, excluded from the proxy.
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "TERM": "dumb",
    "NO_COLOR": "1",
    "LANG": "C.UTF-8",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost,::1",
    "no_proxy": "127.0.0.1,localhost,::1",
}


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _toml_str(s):
    return json.dumps(s)  # a JSON string is a valid TOML basic string


class Client:
    name = ""
    package = ""
    version = ""
    bin = ""
    # Whether the client can show an MCP image to the model at all (read in
    # its code, see each class); False turns a missing image into an info line.
    images = True
    # Whether the client's own timeout for a call of the server's is reset by
    # the call's progress notifications (read in its code, see each class):
    # such a client also runs the suite's 60 s run with a 30 s timeout.
    resets_timeout_on_progress = False

    def __init__(self, node_modules):
        self.node_modules = node_modules

    @property
    def exe(self):
        return os.path.join(self.node_modules, ".bin", self.bin)

    def installed_version(self):
        try:
            with open(os.path.join(self.node_modules, self.package, "package.json")) as f:
                return json.load(f).get("version")
        except (OSError, ValueError):
            return None

    def prepare(self, home, api, mcp):
        """-> (argv, env, cwd).  mcp: {"transport": "stdio", "argv": [...]}
        or {"transport": "http", "url": ..., "token": ...}; with
        "timeout_ms", the client's own timeout for the server's calls
        (Opencode only; the others keep 60 s)."""
        raise NotImplementedError


class Claude(Client):
    # Images: an MCP image block becomes an Anthropic image block inside the
    # tool_result (the `case"image"` branch of its MCP content converter).
    # It shows structuredContent *instead of* the text blocks when present.
    name, package, version, bin = "claude", "@anthropic-ai/claude-code", "2.1.197", "claude"
    tool = "mcp__sandbox__run"

    def prepare(self, home, api, mcp):
        if mcp["transport"] == "stdio":
            server = {"type": "stdio", "command": mcp["argv"][0], "args": mcp["argv"][1:]}
        else:
            server = {"type": "http", "url": mcp["url"], "headers": {"Authorization": "Bearer " + mcp["token"]}}
        cfg = os.path.join(home, "mcp.json")
        _write(cfg, json.dumps({"mcpServers": {"sandbox": server}}))
        env = dict(BASE_ENV, HOME=home, CLAUDE_CONFIG_DIR=os.path.join(home, ".claude"),
                   ANTHROPIC_BASE_URL=api.base, ANTHROPIC_API_KEY="fake",
                   DISABLE_AUTOUPDATER="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
                   DISABLE_TELEMETRY="1", DISABLE_ERROR_REPORTING="1", MCP_TIMEOUT="30000")
        # As root: no --dangerously-skip-permissions; the one tool is allowed.
        argv = [self.exe, "-p", transcript.PROMPT, "--mcp-config", cfg, "--strict-mcp-config",
                "--allowedTools", self.tool, "--output-format", "json"]
        work = os.path.join(home, "work")
        os.makedirs(work, exist_ok=True)
        return argv, env, work


class Codex(Client):
    # Images: an MCP image becomes an `input_image` in the function_call_output
    # (when the model's metadata lists image input; the fallback metadata for
    # an unknown model slug does).
    name, package, version, bin = "codex", "@openai/codex", "0.169.0", "codex"
    # A slug absent from Codex's bundled catalog: fallback metadata, MCP tools
    # listed directly (catalog models such as gpt-5.5 defer MCP tools behind
    # `tool_search`, which this fake model does not drive).
    model = "nsm-fake-model"

    def prepare(self, home, api, mcp):
        chome = os.path.join(home, ".codex")
        lines = [
            f"model = {_toml_str(self.model)}",
            'model_provider = "fake"',
            'approval_policy = "never"',
            'sandbox_mode = "read-only"',
            "check_for_update_on_startup = false",
            "",
            "[analytics]",
            "enabled = false",
            "",
            "[model_providers.fake]",
            'name = "fake"',
            f"base_url = {_toml_str(api.base + '/v1')}",
            'wire_api = "responses"',
            'env_key = "FAKE_API_KEY"',
            "request_max_retries = 0",
            "stream_max_retries = 0",
            "",
            "[mcp_servers.sandbox]",
        ]
        if mcp["transport"] == "stdio":
            lines += [f"command = {_toml_str(mcp['argv'][0])}",
                      "args = [" + ", ".join(_toml_str(a) for a in mcp["argv"][1:]) + "]"]
        else:
            lines += [f"url = {_toml_str(mcp['url'])}", 'bearer_token_env_var = "NSM_MCP_TOKEN"']
        lines += ["startup_timeout_sec = 30", "tool_timeout_sec = 60", "required = true",
                  # codex exec cannot ask: approve the server's tools up front.
                  'default_tools_approval_mode = "approve"', ""]
        _write(os.path.join(chome, "config.toml"), "\n".join(lines))
        env = dict(BASE_ENV, HOME=home, CODEX_HOME=chome, FAKE_API_KEY="fake", RUST_LOG="error")
        if mcp["transport"] == "http":
            env["NSM_MCP_TOKEN"] = mcp["token"]
        work = os.path.join(home, "work")
        os.makedirs(work, exist_ok=True)
        argv = [self.exe, "exec", "--skip-git-repo-check", "--json", transcript.PROMPT]
        return argv, env, work


class Gemini(Client):
    # Images: transformImageAudioBlock turns an MCP image into an inlineData
    # part sent right after the functionResponse.  Note: its
    # McpComplianceTransport JSON.parses the first text block into
    # structuredContent when the server sent none, and a non-object (stdout
    # `42`) then fails the SDK's result schema.
    name, package, version, bin = "gemini", "@google/gemini-cli", "0.61.0", "gemini"

    def settings(self, home, server):
        return {
            "mcpServers": {"sandbox": server},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            # GOOGLE_GEMINI_BASE_URL alone selects the "gateway" auth type,
            # which this version's non-interactive validation rejects; the
            # API-key type honours GOOGLE_GEMINI_BASE_URL too.
            "security": {"folderTrust": {"enabled": False}, "auth": {"selectedType": "gemini-api-key"}},
        }

    def env(self, home, api=None):
        env = dict(BASE_ENV, HOME=home, GEMINI_CLI_HOME=home, GEMINI_API_KEY="fake",
                   GEMINI_CLI_TRUST_WORKSPACE="true", GEMINI_TELEMETRY_ENABLED="false",
                   GEMINI_CLI_NO_RELAUNCH="true")
        if api is not None:
            env["GOOGLE_GEMINI_BASE_URL"] = api.base
        return env

    def prepare(self, home, api, mcp):
        if mcp["transport"] == "stdio":
            server = {"command": mcp["argv"][0], "args": mcp["argv"][1:]}
        else:
            server = {"httpUrl": mcp["url"], "headers": {"Authorization": "Bearer " + mcp["token"]}}
        server.update(trust=True, timeout=60000)  # trust: no confirmation prompts
        _write(os.path.join(home, ".gemini", "settings.json"), json.dumps(self.settings(home, server)))
        work = os.path.join(home, "work")
        os.makedirs(work, exist_ok=True)
        # --debug: MCP connection errors go to stderr, for the FAIL reasons.
        argv = [self.exe, "-p", transcript.PROMPT, "--output-format", "json", "--debug"]
        return argv, self.env(home, api), work


class Opencode(Client):
    # Images: MCP images become attachments of the tool part; for an
    # OpenAI-compatible provider they are sent as a user message ("Attached
    # media from tool result:") with image_url parts after the tool message,
    # for a model declared with image input (modalities below).
    name, package, version, bin = "opencode", "opencode-ai", "1.18.33", "opencode"
    # Its MCP tools call the TypeScript SDK's callTool with `onprogress` (so
    # the request carries a progressToken), `resetTimeoutOnProgress: true`
    # and `timeout` from the server's `timeout` setting.
    resets_timeout_on_progress = True

    def prepare(self, home, api, mcp):
        if mcp["transport"] == "stdio":
            server = {"type": "local", "command": mcp["argv"]}
        else:
            server = {"type": "remote", "url": mcp["url"],
                      "headers": {"Authorization": "Bearer " + mcp["token"]}, "oauth": False}
        # `timeout`: ms a call may take; progress notifications reset it.
        server.update(enabled=True, timeout=mcp.get("timeout_ms", 60000))
        cfg = {
            "$schema": "https://opencode.ai/config.json",
            "provider": {"fake": {
                "npm": "@ai-sdk/openai-compatible", "name": "Fake",
                "options": {"baseURL": api.base + "/v1", "apiKey": "fake"},
                "models": {"fake-model": {"name": "Fake model", "tool_call": True, "attachment": True,
                                          "modalities": {"input": ["text", "image"], "output": ["text"]}}},
            }},
            "model": "fake/fake-model",
            "small_model": "fake/fake-model",
            "mcp": {"sandbox": server},
            "autoupdate": False,
            "share": "disabled",
        }
        path = os.path.join(home, "opencode.json")
        _write(path, json.dumps(cfg))
        env = dict(BASE_ENV, HOME=home, XDG_CONFIG_HOME=os.path.join(home, ".config"),
                   XDG_DATA_HOME=os.path.join(home, ".local", "share"), XDG_CACHE_HOME=os.path.join(home, ".cache"),
                   XDG_STATE_HOME=os.path.join(home, ".local", "state"), OPENCODE_CONFIG=path,
                   OPENCODE_DISABLE_MODELS_FETCH="1", OPENCODE_DISABLE_AUTOUPDATE="1", OPENCODE_DISABLE_SHARE="1",
                   OPENCODE_DISABLE_DEFAULT_PLUGINS="1", OPENCODE_DISABLE_LSP_DOWNLOAD="1",
                   OPENCODE_DISABLE_CLAUDE_CODE="1", OPENCODE_DISABLE_EXTERNAL_SKILLS="1")
        work = os.path.join(home, "work")
        os.makedirs(work, exist_ok=True)
        argv = [self.exe, "run", "--format", "json", "-m", "fake/fake-model", transcript.PROMPT]
        return argv, env, work


ALL = [Claude, Codex, Gemini, Opencode]
