#!/usr/bin/env python3
"""Coding agents in their jails, end to end (checks/agents/README.md).

Run by checks/agents/run as root, in a network namespace of its own (made
here with `unshare --net`): a veth holds 100.51.100.10, where the fake
model API (checks/clients/cli/fakeapi.py's, over HTTPS with a test CA)
answers as api.openai.com and a second server as other.test; the agent's
proxy resolves both from a hosts file (NIX_SANDBOX_EGRESS_HOSTS) and trusts
the test CA (NIX_SANDBOX_EGRESS_CA_ROOTS). The agents run as root, or with
--user as that uid (setpriv), each with a HOME and a project of its own:

- Codex (`agent-codex`, the bundled preset over the pinned npm binary):
  `codex exec` is told to fix a file of the project; the fake model calls
  Codex's shell tool with a script that edits it and looks for the real
  key in the jail (its environ, the agent's home, the project, /tmp, and
  the readable memory of the jail's codex process), and asks the proxy
  for a host it does not allow. While Codex waits for the next answer,
  this test reads every jail process's environ, memory and files from
  outside for the key. Then: the API got the real key on every request,
  the host's project is unchanged, `--diff` shows the edit, `--apply`
  writes it, and `--diff` is empty after.
- The terminal (`agent-shell`, bash as the agent) on a pseudo-terminal of
  this test: the agent's stdin is a terminal that is not this test's, its
  window size follows a resize, Ctrl-C interrupts a `sleep` and the shell
  goes on, and `--writable` lets the change land in the project at once.

  agents.py --label root --codex OUT --shell OUT [--user 65534]
"""

import argparse
import base64
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "e2e"))
sys.path.insert(0, str(HERE.parent / "clients" / "cli"))
import egress  # noqa: E402
from e2e import Failed, Suite, check  # noqa: E402
from fakeapi import (FakeAPI, Script, anthropic_tool_results, chat_tool_results,  # noqa: E402
                     gemini_tool_results, responses_tool_results)

SECRET = "sk-agents-real-9d2f61c07e3b4a58"
NAMES = ["api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com", "other.test"]
ORIGINAL = 'print("hello")\n'
FIXED = 'print("hello, jail")\n'
# What the model runs through Codex's shell tool, in the project. The key
# is searched for under a name the jail never holds whole: reversed in the
# script, put right in the scanning shell only (codex holds the script).
SCAN = r"""
sed -i 's/"hello"/"hello, jail"/' hello.py
r=@REVERSED@; n=; for ((i=${#r}-1; i>=0; i--)); do n+=${r:i:1}; done
readable=0
for p in /proc/[0-9]*; do
  e=$(tr '\0' '\n' <"$p/environ" 2>/dev/null) || continue
  readable=$((readable + 1))
  v=$(printf '%s\n' "$e" | grep '^@VAR@=' | head -n 1)
  [ -z "$v" ] || echo "key-var ${p#/proc/}: ${v#@VAR@=}"
  case $e in *"$n"*) echo "environ ${p#/proc/}: holds the key" ;; esac
done
echo "environs read: $readable"
echo "files: $(grep -r -l -a -F -- "$n" ~ /tmp /workspace . 2>/dev/null | wc -l)"
for p in /proc/[0-9]*; do
  [ "$(cat "$p/comm" 2>/dev/null)" = @COMM@ ] || continue
  if ! (: <"$p/mem") 2>/dev/null; then echo "memory ${p#/proc/}: unreadable"; continue; fi
  regions=0 found=0 large=0 unread=0 range= perms= held=0
  # smaps, read whole first (read byte by byte, each read walks the
  # page tables again): a region's line, then its counts, VmFlags last. A region whose
  # pages were never touched (none resident or swapped) holds nothing; a
  # larger one than 256 MiB (a runtime's reserved heap, read from here at
  # tens of MB a second) is left to the scan from outside, which reads
  # every page a process holds.
  while read -r first second _; do
    case $first in
      Rss: | Swap:) held=$((held + second)) ;;
      VmFlags:)
        case $perms in rw*) ;; *) continue ;; esac
        [ "$held" -gt 0 ] || continue
        start=$((16#${range%-*})) end=$((16#${range#*-}))
        if [ $((end - start)) -gt $((256 << 20)) ]; then large=$((large + 1)); continue; fi
        # A Bun agent has thousands of regions: 20 s of reading here, all
        # of them from outside.
        if [ "$SECONDS" -ge 20 ]; then unread=$((unread + 1)); continue; fi
        regions=$((regions + 1))
        if dd if="$p/mem" bs=1M iflag=skip_bytes,count_bytes skip=$start count=$((end - start)) 2>/dev/null | grep -q -a -F -- "$n"; then
          found=$((found + 1))
        fi ;;
      *-*) range=$first perms=$second held=0 ;;
    esac
  done <<<"$(cat "$p/smaps")"
  echo "memory ${p#/proc/}: $found of $regions regions ($large over 256 MiB and $unread past 20 s left out)"
done
exec 3<>/dev/tcp/127.0.0.1/3128
printf 'CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n' >&3
read -r line <&3
echo "other: $line"
"""


class Spec:
    """How one agent CLI is driven in its jail: its key's variable and the
    header the proxy puts the key in (and how the real key reads there),
    its wire format's tool results, its shell tool's names, its process's
    `comm`, its files in the agent's home, and its headless command."""

    def __init__(self, var, header, value, results, tools, comm, home, argv):
        self.var, self.header, self.value = var, header, value
        self.results, self.tools, self.comm = results, tools, comm
        self.home, self.argv = home, argv


def codex_home(home):
    # A provider of the person's own naming the model API's real host.
    return {".codex/config.toml": "\n".join([
        'model = "nsm-fake-model"', 'model_provider = "jail"', 'approval_policy = "never"',
        "check_for_update_on_startup = false", "", "[analytics]", "enabled = false", "",
        "[model_providers.jail]", 'name = "jail"', 'base_url = "https://api.openai.com/v1"',
        'wire_api = "responses"', 'env_key = "OPENAI_API_KEY"', "request_max_retries = 0",
        "stream_max_retries = 0", "",
        # The tool's shell gets the jail's whole environment, key variable included.
        "[shell_environment_policy]", 'inherit = "all"', "ignore_default_excludes = true", ""])}


def claude_home(home):
    # Onboarding done, so that -p goes straight to the model.
    return {".claude.json": json.dumps({"hasCompletedOnboarding": True, "autoUpdates": False})}


def gemini_home(home):
    # The API-key login; no telemetry, updates or folder-trust question.
    return {".gemini/settings.json": json.dumps({
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "security": {"folderTrust": {"enabled": False}, "auth": {"selectedType": "gemini-api-key"}},
    })}


def opencode_home(home):
    # The bundled OpenAI provider with a model of the test's naming; its
    # shell and edits allowed, as `opencode run` cannot ask.
    return {".config/opencode/opencode.json": json.dumps({
        "$schema": "https://opencode.ai/config.json",
        "model": "openai/nsm-fake-model",
        "small_model": "openai/nsm-fake-model",
        "provider": {"openai": {"models": {"nsm-fake-model": {"name": "Fake model", "tool_call": True}}}},
        "permission": {"bash": "allow", "edit": "allow"},
        "autoupdate": False,
        "share": "disabled",
    })}


def responses_or_chat(body):
    return responses_tool_results(body) or chat_tool_results(body)


TASK = "Make hello.py greet the jail."
AGENTS = {
    "codex": Spec("OPENAI_API_KEY", "Authorization", f"Bearer {SECRET}", responses_tool_results,
                  ("shell", "exec_command", "shell_command", "container.exec"), "codex", codex_home,
                  ["exec", "--skip-git-repo-check", TASK]),
    # As the jail's uid its Bash tool is allowed by name, as the client
    # suite does as root (no skipping of every permission).
    "claude-code": Spec("ANTHROPIC_API_KEY", "x-api-key", SECRET, anthropic_tool_results, ("Bash",), "claude",
                        claude_home, ["-p", TASK, "--allowedTools", "Bash", "--output-format", "json"]),
    # Headless, a shell command needs the approval mode that runs tools.
    "gemini-cli": Spec("GEMINI_API_KEY", "x-goog-api-key", SECRET, gemini_tool_results, ("run_shell_command",),
                       "node", gemini_home, ["-p", TASK, "--approval-mode", "yolo", "--output-format", "json"]),
    "opencode": Spec("OPENAI_API_KEY", "Authorization", f"Bearer {SECRET}", responses_or_chat, ("bash",),
                     "opencode", opencode_home, ["run", "--format", "json", "-m", "openai/nsm-fake-model", TASK]),
}


class TLSServer(egress.Server):
    """The fake model's HTTPS server, which ends each connection as a TLS
    server does: a close_notify first. The fake API ends an event stream
    by closing the connection; without close_notify that end cannot be
    told from a cut, and the proxy (rightly) passes it on as a cut."""

    def shutdown_request(self, request):
        try:
            request.settimeout(2)
            request.unwrap()
        except (OSError, ValueError):
            pass
        super().shutdown_request(request)


class AgentAPI(FakeAPI):
    """The fake model, over HTTPS on the test's address, calling the
    agent's shell tool; every request's key header kept; `on_result`
    runs when a request carries the tool's result (the agent waits)."""

    def __init__(self, spec, script, context, on_result):
        super().__init__(Script(script))
        handler = self.httpd.RequestHandlerClass
        self.httpd.server_close()
        self.httpd = TLSServer((egress.ADDR, 443), handler)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        # A fault of this test's model is said, never seen only as the
        # proxy's 502 for a connection closed without an answer.
        self.httpd.handle_error = lambda request, address: traceback.print_exc()
        self.thread = __import__("threading").Thread(target=self.httpd.serve_forever, daemon=True)
        self.spec = spec
        self.on_result = on_result
        self.keys = []
        self.scans = []

    def _record(self, h, method, body, kind, answer=None):
        self.keys.append(h.headers.get(self.spec.header))
        if isinstance(body, dict) and self.spec.results(body) and not self.scans:
            self.scans.append(self.on_result())
        super()._record(h, method, body, kind, answer)

    def _decide(self, tools, n_results):
        # Gemini's tools are lists of declarations.
        tools = [d for t in tools or [] if isinstance(t, dict)
                 for d in (t["functionDeclarations"] if "functionDeclarations" in t else [t])]
        for tool in tools:
            if not isinstance(tool, dict):
                continue
            schema = tool.get("parameters") or tool.get("input_schema") or tool.get("parametersJsonSchema") or {}
            props = schema.get("properties") or {}
            name = tool.get("name")
            if name not in self.spec.tools:
                continue
            self.tool_names.add(name)
            if n_results >= len(self.script.steps):
                return ("text", "Done: hello.py greets the jail.")
            script = self.script.steps[n_results]
            if "cmd" in props:
                args = {"cmd": script}
            elif props.get("command", {}).get("type") == "array":
                args = {"command": ["bash", "-c", script]}
            else:
                args = {"command": script}
            for key, value in (("yield_time_ms", 120000), ("timeout_ms", 120000), ("max_output_tokens", 4000),
                               ("shell", "bash"), ("login", False), ("timeout", 120000),
                               ("description", "Greet the jail")):
                if key in props:
                    args[key] = value
            return ("call", name, args, n_results, None)
        return ("text", "Sandbox check")


def strings(value):
    """Every string in a JSON value, in order, a line each."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def tool_output(api):
    """The text of the first tool result the agent sent back."""
    for record in api.records:
        body = record.get("body")
        if isinstance(body, dict):
            for item in api.spec.results(body):
                return "\n".join(strings(item))
    return ""


class Agent:
    """One agent command as the test's user, with its environment."""

    def __init__(self, out, name, env, user):
        self.argv = [f"{out}/bin/agent-{name}"]
        if user is not None:
            self.argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *self.argv]
        self.env = env

    def run(self, *args, timeout=240, **kw):
        return subprocess.run([*self.argv, *args], env=self.env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=timeout, **kw)


def agent_tests(suite, name, agent, project, scratch, context):
    """`name`'s command (AGENTS) told to fix hello.py in `project`."""
    spec = AGENTS[name]
    state = agent.run("--project", str(project), "--state")
    check(state.returncode == 0, f"--state exited {state.returncode}: {state.stderr}")
    home = Path(state.stdout.strip()) / "home"
    home.mkdir(parents=True, exist_ok=True)
    for path, text in spec.home(home).items():
        (home / path).parent.mkdir(parents=True, exist_ok=True)
        (home / path).write_text(text)
    owner = project.stat()
    for path in [home.parent, *home.rglob("*"), home]:
        os.chown(path, owner.st_uid, owner.st_gid)
    launcher = {}

    def scan_from_outside():
        return egress.scan(launcher["pid"], SECRET.encode()) if "pid" in launcher else (["no launcher pid"], {})

    scan = SCAN.replace("@REVERSED@", SECRET[::-1]).replace("@VAR@", spec.var).replace("@COMM@", spec.comm)
    # One plain command (Gemini CLI's shell tool refuses `$(...)` in what
    # it is given; the script itself may use it).
    scan = f"echo {base64.b64encode(scan.encode()).decode()} | base64 -d | bash"
    api = AgentAPI(spec, [scan], context, scan_from_outside).start()
    try:
        proc = subprocess.Popen([*agent.argv, "--project", str(project), *spec.argv], env=agent.env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        launcher["pid"] = proc.pid  # setpriv execs the launcher: the same pid
        out, err = proc.communicate(timeout=300)
    finally:
        api.stop()
    shown = tool_output(api)
    (scratch / f"{name}.out").write_text(f"{out}\n--- stderr\n{err}\n--- tool\n{shown}\n--- requests\n"
                                         + "\n".join(f"{r.get('method')} {r.get('path')} {r.get('kind')}"
                                                     for r in api.records) + "\n")

    def ran():
        check(proc.returncode == 0, f"exited {proc.returncode}: {err[-1500:]}")
        check(api.tool_names, f"no shell tool offered; records: {[r['kind'] for r in api.records]}")
        check(shown, f"no tool result came back; stdout {out[-800:]}")
    suite.test(f"{name} completes a task through its shell tool", ran)

    def real_key():
        check(api.keys, "the API got no request")
        check(all(k == spec.value for k in api.keys),
              f"{spec.header} values the API got: {sorted(set(str(k)[:24] for k in api.keys))}")
    suite.test(f"{name}: the model API got the real key on every request", real_key)

    def placeholder_only():
        values = set(re.findall(r"key-var \d+: (\S*)", shown))
        placeholder = f"nix-sandbox-placeholder-{spec.var}"
        check(values == {placeholder}, f"the jail's {spec.var} values: {values}: {shown[:300]}")
        check("holds the key" not in shown and "files: 0" in shown, shown[:600])
        check(int((re.findall(r"environs read: (\d+)", shown) or ["0"])[0]) > 1, shown[:600])
        memory = re.findall(r"memory (\d+): (.*)", shown)
        check(memory, f"no {spec.comm} process found in the jail: {shown[:600]}")
        for pid, said in memory:
            check(said == "unreadable" or said.startswith("0 of "), f"{spec.comm} {pid}'s memory: {said}")
        check(SECRET not in shown and SECRET not in out and SECRET not in err, "the key was printed")
    suite.test(f"{name}: inside the jail, environ, home, project and the agent's memory hold no key",
               placeholder_only)

    def outside():
        check(api.scans, f"no scan ran while {name} waited")
        found, scanned = api.scans[0]
        check(scanned.get("processes", 0) > 0 and scanned.get("regions", 0) > 0, f"nothing scanned: {scanned}")
        check(not found, f"the key is in {found[:5]}")
    suite.test(f"{name}: from outside, every jail process's environ, memory and files hold no key", outside)

    def refused():
        check(re.search(r"other: HTTP/1\.[01] 403", shown), f"other.test: {shown[-300:]}")
        check("network: refused other.test:443" in err, f"no refusal line: {err[-600:]}")
    suite.test(f"{name}: a host other than the model API is refused", refused)

    def diff_and_apply():
        check((project / "hello.py").read_text() == ORIGINAL, "the host's project changed before --apply")
        diff = agent.run("--project", str(project), "--diff")
        check(diff.returncode == 0, diff.stderr)
        check(diff.stdout.startswith("# project: 1 file changed, +1 -1"), diff.stdout[:300])
        check('-print("hello")' in diff.stdout and '+print("hello, jail")' in diff.stdout, diff.stdout)
        applied = agent.run("--project", str(project), "--apply")
        check(applied.returncode == 0, applied.stderr)
        check((project / "hello.py").read_text() == FIXED, (project / "hello.py").read_text())
        again = agent.run("--project", str(project), "--diff")
        check(again.stdout.startswith("# project: no changes"), again.stdout[:300])
    suite.test(f"{name}: the project is unchanged until --apply, then changed as the diff said", diff_and_apply)


def read_until(fd, pattern, timeout=30):
    """Reads the terminal until `pattern` (a regex) shows; the text read."""
    text, end = "", time.time() + timeout
    while time.time() < end:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            text += chunk.decode("utf-8", "replace")
            if re.search(pattern, text):
                return text
    raise Failed(f"no {pattern!r} on the terminal; got {text[-400:]!r}")


def on_terminal(agent, project):
    """`agent --writable` running interactive bash in `project` on a
    pseudo-terminal of this test: (its pid, the terminal's master). The
    command starts with SIGINT and SIGQUIT ignored, as a script's
    background job does (an ignored signal stays so across exec): Ctrl-C
    must still reach the agent's commands."""
    pid, fd = pty.fork()
    if pid == 0:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGQUIT, signal.SIG_IGN)
        os.chdir(project)
        os.execvpe(agent.argv[0], [*agent.argv, "--writable", "--norc", "--noprofile", "-i"], agent.env)
    return pid, fd


def off_terminal(pid, fd):
    """Ends what `on_terminal` started, if it still runs (a child of this
    test, never pid 0 or 1), and closes its terminal."""
    try:
        if pid > 1:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
    try:
        os.close(fd)
    except OSError:
        pass


def terminal_tests(suite, agent, project):
    pid, fd = on_terminal(agent, project)
    try:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))

        def say(line):
            os.write(fd, line.encode() + b"\r")

        def tty_and_size():
            say("PS1='$ '; echo tty=$(tty) size=$(stty size)")
            text = read_until(fd, r"tty=\S+ size=\d+ \d+")
            # bubblewrap binds the terminal of its stdin at /dev/console.
            check(re.search(r"tty=/dev/(pts/\d+|console) ", text), text[-200:])
            check("size=33 101" in text, f"the agent's window: {text[-200:]}")
            # No process of the jail holds this test's terminal.
            ours = os.readlink(f"/proc/{pid}/fd/0") if os.path.exists(f"/proc/{pid}/fd/0") else None
            for other in egress.jailed(pid):
                try:
                    held = {os.readlink(f"/proc/{other}/fd/{n}") for n in os.listdir(f"/proc/{other}/fd")}
                except OSError:
                    continue
                check(ours not in held, f"jail process {other} holds the person's terminal {ours}")
        suite.test("the agent gets a terminal of the launcher's, as large as the person's", tty_and_size)

        def resize():
            # A foreground command that waits for SIGWINCH, as a TUI does.
            say("""bash -c 'trap "echo winch \\$(stty size); exit" WINCH; while :; do sleep 0.2; done'""")
            time.sleep(1.5)
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
            read_until(fd, r"winch 40 120")
        suite.test("a resize reaches the agent (SIGWINCH, the new size)", resize)

        def ctrl_c():
            say("sleep 30")
            time.sleep(1.5)
            started = time.time()
            os.write(fd, b"\x03")
            say("echo status=$?")
            read_until(fd, r"status=130", timeout=10)
            check(time.time() - started < 8, "Ctrl-C did not stop the sleep")
            say("echo alive=$((6*7))")
            read_until(fd, r"alive=42")
        suite.test("Ctrl-C interrupts the agent's command and the agent goes on", ctrl_c)

        def writable():
            say("echo written > from-jail.txt; exit 7")
            status = wait_for(pid, 20)
            check(status is not None, "the command did not end after the agent's exit")
            check(os.waitstatus_to_exitcode(status) == 7, f"exit status {status}")
            check((project / "from-jail.txt").read_text() == "written\n", "not in the project")
        suite.test("--writable: the change lands in the project; the agent's status is the command's", writable)
    finally:
        off_terminal(pid, fd)


def wait_for(pid, timeout):
    """The wait status of child `pid` once it ends, or None after
    `timeout` seconds."""
    end = time.time() + timeout
    while time.time() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.1)
    return None


def alive(pids):
    """Those of `pids` still running (a zombie has ended)."""
    left = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            left.append(pid)
    return left


def lifetime_tests(suite, agent, project):
    """The jail never outlives its command: the person's terminal closing,
    SIGTERM, or the command killed outright each leave no process of the
    jail (its bubblewrap, the egress bridge, the agent) behind, even when
    the agent ignores SIGHUP, SIGINT and SIGTERM."""
    def started():
        pid, fd = on_terminal(agent, project)
        # An agent that ignores hangups and termination: only the
        # launcher's ending of the jail can stop it.
        os.write(fd, b"PS1='$ '; trap '' HUP INT TERM; echo up=$((6*7)); exec sleep 1000\r")
        read_until(fd, r"up=42")
        time.sleep(0.5)
        tree = egress.descendants(pid)
        check(egress.jailed(pid), f"no jail under the command: {tree}")
        return pid, fd, tree

    def ends(how, act):
        def test():
            pid, fd, tree = started()
            try:
                act(pid, fd)
                status = wait_for(pid, 15)
                check(status is not None, f"the command still runs after {how}")
                deadline, left = time.time() + 10, alive(tree)
                while left and time.time() < deadline:
                    time.sleep(0.2)
                    left = alive(tree)
                names = {p: Path(f"/proc/{p}/comm").read_text().strip() for p in left if os.path.exists(f"/proc/{p}")}
                check(not left, f"left after {how}: {names}")
            finally:
                off_terminal(pid, fd)
        return test

    suite.test("the person's terminal closing ends the jail, nothing left",
               ends("the terminal closed", lambda pid, fd: os.close(fd)))
    suite.test("SIGTERM to the command ends the jail, nothing left",
               ends("SIGTERM", lambda pid, fd: os.kill(pid, signal.SIGTERM)))
    suite.test("the command killed (SIGKILL) takes its jail with it, nothing left",
               ends("SIGKILL", lambda pid, fd: os.kill(pid, signal.SIGKILL)))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", required=True)
    parser.add_argument("--agent", action="append", default=[], metavar="NAME=OUT",
                        help="an agent of AGENTS and its built package (agent-NAME)")
    parser.add_argument("--shell", required=True)
    parser.add_argument("--user", type=int)
    parser.add_argument("--in-namespace", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.in_namespace:
        os.execvp("unshare", ["unshare", "--net", sys.executable, *sys.argv, "--in-namespace"])
    suite = Suite(f"agents {args.label}")
    egress.network_namespace()
    with tempfile.TemporaryDirectory(prefix="nsm-agents-") as tmp:
        scratch = Path(tmp)
        scratch.chmod(0o755)
        ca, context = egress.make_certs(scratch, NAMES)
        ca.chmod(0o644)
        hosts = scratch / "hosts"
        hosts.write_text(f"{egress.ADDR} {' '.join(NAMES)}\n")
        hosts.chmod(0o644)
        uid = os.getuid() if args.user is None else args.user
        home = scratch / "home"
        shell_project = scratch / "shell-project"
        for d in (home, shell_project):
            d.mkdir()
            os.chown(d, uid, uid)
        env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "TERM": "xterm-256color",
               "NIX_SANDBOX_EGRESS_HOSTS": str(hosts), "NIX_SANDBOX_EGRESS_CA_ROOTS": str(ca)}
        env.update({spec.var: SECRET for spec in AGENTS.values()})
        for name, out in (a.split("=", 1) for a in args.agent):
            project = scratch / f"project-{name}"
            project.mkdir()
            (project / "hello.py").write_text(ORIGINAL)
            for path in (project, project / "hello.py"):
                os.chown(path, uid, uid)
            try:
                agent_tests(suite, name, Agent(out, name, env, args.user), project, scratch, context)
            except (Failed, subprocess.TimeoutExpired) as e:
                print(f"FAIL - agents {args.label}: {name}: {e}")
                suite.failed += 1
            out_file = scratch / f"{name}.out"
            sys.stderr.write(f"=== {name}\n{out_file.read_text()}" if out_file.exists() else "")
        terminal_tests(suite, Agent(args.shell, "shell", env, args.user), shell_project)
        lifetime_tests(suite, Agent(args.shell, "shell", env, args.user), shell_project)
    sys.exit(1 if suite.failed else 0)


if __name__ == "__main__":
    main()
