#!/usr/bin/env python3
"""The benchmark of the project's targets: every target measured in one run,
side by side with its baseline (standard library only; bench/run starts it).

  bench.py --server OUT --launcher OUT --fixtures DIR --tokens bench/tokens.mjs

--server is the Nix-built server package (bin/nix-sandbox-mcp, the three
presets), --launcher the Nix-built launcher package (release build), --fixtures
the repository's launcher/tests/fixtures (without it the fixture figures are
left out), --tokens the tokenizer (without it tokens are not counted; the
output says so). --context says where it runs (bench/vm.py: "cgroup v2, VM
under TCG"), in the header and the summary. Figures are printed section by
section, then one summary table: figure, value, target, PASS or MISS. A missed target is a
finding, not an error; the exit status is 1 only when a figure could not be
measured (a failed call, a missing piece). Nothing here is a test.
"""

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import async_load  # noqa: E402
import cgroups  # noqa: E402
import languages  # noqa: E402
import procs  # noqa: E402
from mcp_client import Client, HttpClient, McpError  # noqa: E402
from stats import cpu_times, mib, ms, steal_share, summary, table  # noqa: E402

MANIFEST = "share/nix-sandbox-mcp/manifest.json"
WARMUP = 5
DEADLINE = 120  # seconds; a guard against hangs of a direct run

# The floors: the interpreter alone, and bubblewrap alone (every namespace
# unshared, the host's /usr, as the jails are here) running `true`.
PYTHON_FLOOR = ["/usr/bin/python3", "-c", "print(1)"]
# What the launcher adds after a successful output that is one JSON value
# other than an object (Gemini CLI would take such a text for structured
# content): `print(1)` through MCP reads "1\nexit code 0".
JSON_NOTE = "\nexit code 0"
BWRAP_FLOOR = [
    "bwrap", "--unshare-all", "--die-with-parent", "--new-session",
    "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib",
    "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
    "--proc", "/proc", "--dev", "/dev", "/usr/bin/true",
]

CGROUP_KIND = "wrapper direct + run cgroups"
# The CPU floors of a cold run: a bare bwrap running the environment's own
# python3 (the target's), and one running the host's.
OWN_FLOOR = "bare bwrap + its python3 -c"
DEBIAN_FLOOR = "bare bwrap + Debian's python3 -c"
FILES_KIND = "MCP run with files (throwaway session)"
FILES = [{"path": "in.txt", "content": "1"}]
DEFAULT_MAX_SESSIONS = 32
MIGRATIONS = 40

# The targets. Never loosen one here to make a figure pass.
TARGET_RATIO = 1.10
TARGET_SESSION_P50_MS = 0.25
# How Node's clients (Claude Code, Gemini CLI, the TypeScript SDK) connect
# a server: a socketpair for stdin and one for stdout, not pipes.
OVER_SOCKETS = "over socketpairs, as Node clients connect"
# The same calls over streamable HTTP (`--http`), one kept-alive connection.
OVER_HTTP = "over streamable HTTP"
TARGET_CREATION_P50_MS = 40.0
TARGET_LOAD_P99_MS = 20.0
TARGET_PEAK_RSS_KIB = 8 * 1024
TARGET_IDLE_RSS_KIB = 15 * 1024
TARGET_TOKENS = 250
# Each environment beyond the three presets adds at most this many.
TARGET_TOKENS_PER_ENV = 15
# The template's three environments of its own (templates/custom-env/
# flake.nix), as the tool surface sees them: name, description, network,
# the limits that differ from the defaults. Served from the python preset's
# wrappers (only tools/list and the instructions are read).
TEMPLATE_ENVS = {
    "data-science": {"description": "Python with numpy, pandas and matplotlib", "limits": {"memory_mb": 2048}},
    "packaging": {"description": "Python with pip. It installs from PyPI and reaches nothing else.",
                  "network": {"allow": [{"host": "pypi.org"}, {"host": "files.pythonhosted.org"}]}},
    "tools": {"description": "Bash with jq, ripgrep and the usual tools"},
}
TARGET_START_MS = 50.0
# A verdict reached while the hypervisor took this share of the CPUs'
# time or more says so (the figure is the machine's as much as ours).
STEAL_NOTED = 0.02


class Unmeasured(Exception):
    """A figure could not be measured (as opposed to a target missed)."""


class DirectSession:
    """The baseline of a session: its environment's session wrapper run
    directly, the agent's frames written to its stdin and read from its
    stdout, no launcher and no MCP between (proto/src/frame.rs)."""

    def __init__(self, argv, env):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self.next_id = 0

    def call(self, code):
        """Runs `code`; its stdout. Raises Unmeasured on a failed call."""
        self.next_id += 1
        frame = {"op": "exec", "id": self.next_id, "code": code, "output_bytes": 65536}
        self.proc.stdin.write(json.dumps(frame).encode() + b"\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        reply = json.loads(line) if line else {}
        if reply.get("id") != self.next_id or reply.get("status") != 0:
            raise Unmeasured(f"`{code}` in a session wrapper run directly: {line[-300:]!r}")
        return reply["stdout"]

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Bench:
    def __init__(self, args, scratch):
        self.args = args
        self.scratch = scratch
        # First: on cgroup v2 this moves the benchmark into a leaf of its
        # cgroup, before it starts any server (cgroups.py).
        self.cgroups, self.no_cgroups = cgroups.setup()
        self.rows = []  # the summary: figure, value, target, verdict
        self.results = {}
        self.unmeasured = []
        self.server_bin = str(Path(args.server) / "bin/nix-sandbox-mcp")
        self.launcher_bin = str(Path(args.launcher) / "bin/nix-sandbox-mcp")
        self.manifest_path = Path(args.server) / MANIFEST
        self.manifest = json.loads(self.manifest_path.read_text())["environments"]
        empty = scratch / "no-sandboxes"
        empty.mkdir()
        # Only the three presets: no NIX_SANDBOX_ENVS, an empty NIX_SANDBOX_DIR.
        # The load's 32 sessions reserve 16 GiB of layers (512 MiB each), which
        # they leave empty: more than the default bound (MemTotal) of --vm's
        # 3 GiB guest. What is measured is time, not that bound.
        # Warm jails off but in the warm step, which compares the pool with
        # its absence: the others time what a run or a session costs when it
        # starts its jail (a warm pool would serve their calls instead).
        self.env = {"HOME": os.environ["HOME"], "PATH": "/usr/bin:/bin", "NIX_SANDBOX_DIR": str(empty),
                    "NIX_SANDBOX_LAYERS_MB": str(1 << 20), "NIX_SANDBOX_WARM_JAILS": "0"}
        # A user's systemd manager, when there is one: the launcher asks it
        # for a delegated scope (its runs' cgroups), as under a desktop client.
        for name in ("XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS"):
            if name in os.environ:
                self.env[name] = os.environ[name]
        self.jail_env = {"HOME": os.environ["HOME"], "PATH": "/usr/bin:/bin"}
        self.fixture_manifest = self.fixture_server = None
        if not args.fixtures:
            return
        # The fixtures' manifest with its wrappers and the built agent filled in.
        wrappers = Path(args.fixtures).resolve() / "wrappers"
        text = (Path(args.fixtures) / "manifests/fixtures.json").read_text()
        manifest = scratch / "fixtures.json"
        manifest.write_text(text.replace("@WRAPPERS@", str(wrappers)).replace(
            "@AGENT@", str(Path(args.launcher) / "bin/agent")))
        self.fixture_manifest = json.loads(manifest.read_text())["environments"]
        # The fixture jail runs the launcher package's jail-budget from there.
        # The unprivileged pass finds root's link there, which it may not
        # replace (the directory is root's): made only when not right.
        budget = Path(args.fixtures) / "bin/jail-budget"
        target = Path(args.launcher) / "bin/jail-budget"
        if not (budget.is_symlink() and Path(os.readlink(budget)) == target):
            budget.parent.mkdir(exist_ok=True)
            budget.unlink(missing_ok=True)
            budget.symlink_to(target)
        self.fixture_server = [self.launcher_bin, "--stdio", "--manifest", str(manifest),
                               "--allow-wrappers-outside-store"]

    # --- output -----------------------------------------------------------

    def row(self, figure, value, target=None, ok=None):
        verdict = "-" if ok is None else ("PASS" if ok else "MISS")
        self.rows.append([figure, value, target or "-", verdict])

    def not_run(self, figure, target, reason):
        self.rows.append([figure, "not measured", target or "-", "NOT RUN"])
        if reason not in self.unmeasured:
            self.unmeasured.append(reason)

    @staticmethod
    def section(title):
        print(f"\n== {title}", flush=True)

    @staticmethod
    def lines(lines):
        for line in lines:
            print("   " + line)
        sys.stdout.flush()

    # --- building blocks --------------------------------------------------

    def start(self, argv, extra_env=None, lean=False, sockets=False):
        client = Client(argv, {**self.env, **(extra_env or {})}, lean=lean, sockets=sockets)
        try:
            client.initialize()
            if self.args.warm_call:
                self.warm_up(client)
        except McpError:
            client.close()
            raise
        return client

    def warm_up(self, client):
        """--warm-call: an untimed print(1) in python once the server's
        start-up probes are done, made once more when the python probe did
        not finish within its time (an emulated CPU running the three
        probes at once can miss it; the server then answers the next call
        `sandbox_unavailable` and probes again at the one after), so that
        no timed call meets that. Said when it happens."""
        self.wait_idle(client.pid, settle=0.2)
        result, text = client.run("print(1)", env="python")
        if result.get("isError") and "sandbox_unavailable" in text and "did not finish within" in text:
            self.lines([f"(the server's start-up probe of python timed out; its warm-up call was made again: "
                        f"{text.strip()[:160]})"])
            result, text = client.run("print(1)", env="python")
        if result.get("isError") or not text.startswith("1" + JSON_NOTE):
            raise McpError(f"the warm-up print(1) gave {text[-300:]!r}")

    @staticmethod
    def mcp_print(client, env_name, files=None):
        result, text = client.run("print(1)", env=env_name, files=files)
        if result.get("isError") or not text.startswith("1" + JSON_NOTE):
            raise McpError(f"print(1) through MCP gave {result}")

    def direct(self, argv, code=None):
        proc = subprocess.run(argv, input=code, capture_output=True, env=self.jail_env, timeout=DEADLINE)
        if proc.returncode != 0 or proc.stdout != b"1\n":
            raise Unmeasured(f"{argv[0]} gave exit {proc.returncode}, {proc.stdout[-200:]!r}, {proc.stderr[-400:]!r}")

    def interleaved(self, kinds, runs, warmup=None):
        """Times each kind `runs` times (after --warmup), round robin, the order
        rotated every round so that no kind always follows another, each run
        --gap seconds after the one before. (Without a gap, a run that moves
        a process into a cgroup right after another did is cheaper than one
        on its own, as a model's calls are: see cgroups.py.)"""
        names = list(kinds)
        samples = {name: [] for name in names}
        warmup = self.args.warmup if warmup is None else warmup
        for i in range(warmup + runs):
            shift = i % len(names)
            for name in names[shift:] + names[:shift]:
                time.sleep(self.args.gap)
                t0 = time.perf_counter()
                kinds[name]()
                elapsed = time.perf_counter() - t0
                if i >= warmup:
                    samples[name].append(elapsed)
        return {name: summary(s) for name, s in samples.items()}

    @staticmethod
    def wait_idle(pid, settle=1.0):
        """Waits until `pid` has no jail (the start-up probes are done), at
        most 30 s, then `settle` seconds."""
        deadline = time.monotonic() + 30
        while procs.jails(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(settle)

    def stat_rows(self, stats, baseline=None):
        rows = []
        for name, s in stats.items():
            row = [name, ms(s["min"]), ms(s["p50"]), ms(s["p90"]), ms(s["p99"]), ms(s["mean"]), s["n"]]
            if baseline:
                base = stats[baseline]
                row.append(" / ".join(f"{s[p] / base[p]:.2f}x" for p in ("p50", "p90", "p99")))
            rows.append(row)
        header = ["what", "min", "p50", "p90", "p99", "mean", "n"] + ([f"vs {baseline} p50 / p90 / p99"] if baseline else [])
        return table(header, rows)

    # --- 1b. warm jails --------------------------------------------------------

    def warm(self):
        """Warm single-use jails (--warm-jails 4, the default) beside the pool
        off (--warm-jails 0: the run wrapper) in the same run: ephemeral
        print(1), session creation, a burst of 64 runs at once then one every
        100 ms, the memory of the idle warm jails, and the machine's CPU per
        run (the refill's start included)."""
        self.section(f"warm jails: print(1) with the pool warm and off ({self.args.runs} runs each, "
                     f"{self.args.gap * 1000:.0f} ms apart), sessions, a burst, idle memory, CPU per run")
        entry = self.manifest["python"]
        # The timed runs read each answer on the calling thread (lean), as
        # the session round trip's figure does: the target is the server's
        # time, and a reader thread's hand-over costs the client a
        # millisecond or more. The burst needs answers read apart: servers
        # of their own, below.
        hot = self.start([self.server_bin, "--stdio"], {"NIX_SANDBOX_WARM_JAILS": "4"}, lean=True)
        cold = None
        try:
            cold = self.start([self.server_bin, "--stdio"], {"NIX_SANDBOX_WARM_JAILS": "0"}, lean=True)
            self.wait_idle(cold.pid, settle=0.2)
            warm_hits = []

            def warm_print():
                result, text = hot.run("print(1)", env="python")
                if result.get("isError") or not text.startswith("1" + JSON_NOTE):
                    raise McpError(f"print(1) through MCP gave {result}")
                facts = (result.get("_meta") or {}).get("nix-sandbox-mcp/result", {})
                warm_hits.append(bool(facts.get("warm")))

            self.mcp_print(hot, "python")  # the first run of python starts its pool
            kinds = {
                "warm pool": warm_print,
                "pool off": lambda: self.mcp_print(cold, "python"),
                "wrapper direct": lambda: self.direct(entry["run"], b"print(1)\n"),
            }
            stats = self.interleaved(kinds, self.args.runs)
            self.lines(self.stat_rows(stats, baseline="pool off"))
            served = sum(warm_hits) / max(len(warm_hits), 1)
            self.lines([f"{served:.0%} of the warm pool's timed runs were served by a warm jail"])
            # Idle memory: the warm jails' processes once the pool is full, before
            # any session is open (a session's jail is not a warm one).
            time.sleep(2.0)
            jails = procs.jails(hot.pid)
            agents = [p for p in jails if procs.comm(p) == "agent"]
            rss = sum(procs.status_kib(p, "VmRSS") or 0 for p in jails)
            per_jail = rss / len(agents) if agents else None
            self.lines([f"idle: {len(agents)} warm jails, {len(jails)} processes, RSS {mib(rss)} in all "
                        f"(shared pages counted in each: an upper bound)"])
            # Session creation: a new session's first call, `x = 0`.
            names = iter(range(1 << 30))
            creations = {
                "new session, warm pool": lambda: hot.run("x = 0", env="python", session=f"w{next(names)}"),
                "new session, pool off": lambda: cold.run("x = 0", env="python", session=f"c{next(names)}"),
            }
            created = self.interleaved(creations, min(self.args.runs, 20), warmup=1)
            self.lines(self.stat_rows(created, baseline="new session, pool off"))
            # CPU per run, machine-wide (the pool's refills included), 20 runs
            # each, the kinds taking turns over 3 rounds, the median round of
            # each; beside them the floor: a bare bwrap running the
            # environment's own python3 -c (the store bound whole: one
            # bind), and one running Debian's (/usr), whose start differs.
            cpu, rounds = {}, {}
            own = BWRAP_FLOOR[:-1] + ["--ro-bind", "/nix/store", "/nix/store",
                                      self.interpreter(entry["run"][0], "python3"), "-c", "print(1)"]
            debian = BWRAP_FLOOR[:-1] + ["/usr/bin/python3", "-c", "print(1)"]
            kinds = (("warm pool", lambda: self.mcp_print(hot, "python")),
                     ("pool off", lambda: self.mcp_print(cold, "python")),
                     (OWN_FLOOR, lambda: self.direct_true(own)),
                     (DEBIAN_FLOOR, lambda: self.direct_true(debian)))
            for _ in range(3):
                for name, once in kinds:
                    spent = self.cpu_per_run(once, 20, settle=1.0)  # the last refill
                    if spent is not None:
                        rounds.setdefault(name, []).append(spent)
            cpu = {name: statistics.median(values) for name, values in rounds.items()}
            self.lines(["CPU per run (machine-wide, the refill included), the median of 3 rounds: " +
                        ", ".join(f"{k} {v:.1f} ms (" + " / ".join(f"{r:.1f}" for r in rounds[k]) + ")"
                                  for k, v in cpu.items())])
            # A burst of 64 at once, then one every 100 ms, on servers whose
            # answers a reader thread hands to each caller.
            hot.close()
            cold.close()
            hot = self.start([self.server_bin, "--stdio"], {"NIX_SANDBOX_WARM_JAILS": "4"})
            cold = self.start([self.server_bin, "--stdio"], {"NIX_SANDBOX_WARM_JAILS": "0"})
            self.mcp_print(hot, "python")  # starts its pool
            burst = {}
            for name, server in (("warm pool", hot), ("pool off", cold)):
                times = []

                def one(server=server, times=times):
                    t0 = time.perf_counter()
                    self.mcp_print(server, "python")
                    times.append(time.perf_counter() - t0)

                time.sleep(1.0)
                threads = [threading.Thread(target=one) for _ in range(64)]
                t0 = time.perf_counter()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                wall = time.perf_counter() - t0
                after = []
                for _ in range(20):
                    time.sleep(0.1)
                    t1 = time.perf_counter()
                    self.mcp_print(server, "python")
                    after.append(time.perf_counter() - t1)
                burst[name] = {"burst": summary(times), "burst_wall_s": wall, "after": summary(after)}
                if len(times) != 64:
                    raise Unmeasured(f"{64 - len(times)} of the burst's runs failed ({name})")
            for name, b in burst.items():
                self.lines([f"{name}: 64 at once p50 {ms(b['burst']['p50'])}, p99 {ms(b['burst']['p99'])}, "
                            f"all in {b['burst_wall_s']:.2f} s; then 1 every 100 ms p50 {ms(b['after']['p50'])}, "
                            f"p99 {ms(b['after']['p99'])}"])
        finally:
            hot.close()
            if cold:
                cold.close()
        self.results["warm"] = {"print": stats, "served_warm": served, "sessions": created, "cpu_ms": cpu,
                                "idle_rss_kib": rss, "idle_jails": len(agents), "burst": burst}
        w, c = stats["warm pool"], stats["pool off"]
        self.row("warm: print(1) p50 / p99, pool warm", f"{ms(w['p50'])} / {ms(w['p99'])}", "p50 <= 3 ms",
                 w["p50"] <= 3.0)
        self.row("warm: print(1) p50 / p99, pool off", f"{ms(c['p50'])} / {ms(c['p99'])}")
        sw, sc = created["new session, warm pool"], created["new session, pool off"]
        self.row("warm: session creation p50, pool warm / off", f"{ms(sw['p50'])} / {ms(sc['p50'])}", "<= 5 ms",
                 sw["p50"] <= 5.0)
        bw, bc = burst["warm pool"], burst["pool off"]
        self.row("warm: burst of 64, p50 warm / off", f"{ms(bw['burst']['p50'])} / {ms(bc['burst']['p50'])}",
                 "no slower than off", bw["burst"]["p50"] <= bc["burst"]["p50"] * TARGET_RATIO)
        self.row("warm: idle memory per warm jail (RSS, upper bound)",
                 "-" if per_jail is None else mib(per_jail))
        if len(cpu) == 4:
            floor = cpu[OWN_FLOOR]
            self.row("warm: CPU per run, warm / off / bare bwrap + its python3 -c / + Debian's (machine-wide)",
                     f"{cpu['warm pool']:.1f} / {cpu['pool off']:.1f} / {floor:.1f} / {cpu[DEBIAN_FLOOR]:.1f} ms",
                     "off <= bare (its python3)", cpu["pool off"] <= floor * TARGET_RATIO)

    # --- 1. ephemeral runs, launcher memory, tokens --------------------------

    def ephemeral(self):
        self.section(f"ephemeral print(1), Nix-built server vs its wrapper run directly ({self.args.runs} runs each, "
                     f"{self.args.gap * 1000:.0f} ms apart)")
        entry = self.manifest["python"]
        client = self.start([self.server_bin, "--stdio"])
        try:
            tools = client.request("tools/list", {})["tools"]
            self.wait_idle(client.pid)
            # What the server found for its runs' limits (its self-test).
            said = [line.split("self-test: ", 1)[1].strip() for line in list(client.stderr)
                    if "self-test: cgroups:" in line]
            self.lines([f"the server's {said[0]}" if said else "the server said nothing of its cgroups"])
            exe = os.readlink(f"/proc/{client.pid}/exe")
            idle = procs.status_kib(client.pid, "VmRSS")
            kinds = {
                "MCP run (server)": lambda: self.mcp_print(client, "python"),
                # A run given files runs in a throwaway session jail, whose
                # outputs come back: what outputs from every run would cost.
                FILES_KIND: lambda: self.mcp_print(client, "python", FILES),
                "wrapper direct": lambda: self.direct(entry["run"], b"print(1)\n"),
                "python3 -c (floor)": lambda: self.direct(PYTHON_FLOOR),
                "bwrap true (floor)": lambda: self.direct_true(BWRAP_FLOOR),
            }
            run_cgroups = self.cgroups
            if run_cgroups:
                kinds[CGROUP_KIND] = lambda: self.direct_in_cgroups(run_cgroups, entry)
            stats = self.interleaved(kinds, self.args.runs)
            costs = run_cgroups.start_costs(self.args.start_costs) if run_cgroups else {}
            self.wait_idle(client.pid)
            idle_after = procs.status_kib(client.pid, "VmRSS")
            instructions = client.init_result.get("instructions", "")
        finally:
            client.close()
        self.lines(self.stat_rows(stats, baseline="wrapper direct"))
        mcp, direct = stats["MCP run (server)"], stats["wrapper direct"]
        ratio = mcp["p50"] / direct["p50"]
        lines = [f"MCP overhead p50: {mcp['p50'] - direct['p50']:.2f} ms over the wrapper run directly"]
        if CGROUP_KIND in stats:
            cg = stats[CGROUP_KIND]
            how = "created in it by clone3" if run_cgroups.version == "v2" else "moved into it"
            lines.append(f"the MCP path gives the wrapper a run cgroup, the direct run does not; the wrapper run "
                         f"directly with one ({how}, as the launcher does on {run_cgroups.version}) costs "
                         f"{cg['p50'] - direct['p50']:.2f} ms more at p50 ({CGROUP_KIND!r})")
            for what, times in costs.items():
                cost = summary(times)
                lines.append(f"{what}, a fresh {run_cgroups.version} cgroup each, {self.args.start_costs} times, 50 ms apart: "
                             f"min {ms(cost['min'])}, p50 {ms(cost['p50'])}, p99 {ms(cost['p99'])}")
                self.results.setdefault("cgroup_start_costs", {})[what] = cost
        else:
            lines.append(f"(the cost of the run's cgroup is not measured apart: {self.no_cgroups})")
        self.lines(lines)
        self.results["ephemeral"] = stats
        self.row("ephemeral print(1): MCP / wrapper direct, p50", f"{ratio:.2f}x ({ms(mcp['p50'])} / {ms(direct['p50'])})",
                 f"<= {TARGET_RATIO}x", ratio <= TARGET_RATIO)
        self.row("ephemeral print(1) through MCP, p90 / p99", f"{ms(mcp['p90'])} / {ms(mcp['p99'])}")
        added = f"{ms(mcp['p50'] - direct['p50'])}"
        if CGROUP_KIND in stats:
            added += f"; a run cgroup alone adds {ms(stats[CGROUP_KIND]['p50'] - direct['p50'])}"
        self.row("ephemeral: MCP minus wrapper direct, p50", added)
        files = stats[FILES_KIND]
        self.row("ephemeral with files (a throwaway session): MCP / wrapper direct, p50",
                 f"{ratio_of(files, direct, 'p50')} ({ms(files['p50'])} / {ms(direct['p50'])})")
        self.row("floors p50: python3 -c / bwrap true",
                 f"{ms(stats['python3 -c (floor)']['p50'])} / {ms(stats['bwrap true (floor)']['p50'])}")

        self.section("launcher memory at rest (VmRSS of the server process, " + exe + ")")
        self.lines([f"idle after start: {mib(idle)}", f"idle after {len(kinds) * (self.args.runs + self.args.warmup)} calls: {mib(idle_after)}"])
        self.results["idle_rss_kib"] = {"after_start": idle, "after_runs": idle_after}
        self.row("launcher idle RSS after start", mib(idle), "< 15 MiB", idle < TARGET_IDLE_RSS_KIB)
        self.row("launcher idle RSS after the ephemeral runs", mib(idle_after), "< 15 MiB", idle_after < TARGET_IDLE_RSS_KIB)

        self.tokens(instructions, tools)

    def direct_in_cgroups(self, run_cgroups, entry):
        argv = entry["run"]
        dirs = run_cgroups.create(entry["limits"])
        try:
            status, out, err = run_cgroups.run(
                dirs, argv, b"print(1)\n", {**self.jail_env, "NIX_SANDBOX_CGROUP": ":".join(map(str, dirs))},
                DEADLINE)
        finally:
            run_cgroups.remove(dirs)
        if status != 0 or out != b"1\n":
            raise Unmeasured(f"{argv[0]} in cgroups gave exit {status}, {err[-400:]!r}")

    @staticmethod
    def interpreter(wrapper, name):
        """The program `name` a run `wrapper` (an environment's) puts first
        on its jail's PATH (`--setenv PATH`), its symlinks resolved: what
        its jail runs."""
        text = Path(wrapper).read_text(errors="replace")
        found = re.search(r"--setenv PATH (\S+)", text)
        for directory in found.group(1).split(":") if found else []:
            program = Path(directory) / name
            if program.exists():
                return str(program.resolve())
        raise Unmeasured(f"no {name} on the jail's PATH in {wrapper}")

    def cpu_per_run(self, once, runs, settle, needed=False):
        """The machine's busy CPU time per call of `once`, in ms: `runs`
        calls `--gap` apart, counted until `settle` seconds after the last
        (what the calls left running finishes, a warm pool's refill among
        it). None where /proc/stat does not say, or Unmeasured if `needed`."""
        before = cpu_times()
        for _ in range(runs):
            time.sleep(self.args.gap)
            once()
        time.sleep(settle)
        after = cpu_times()
        if not (before and after):
            if needed:
                raise Unmeasured("/proc/stat gives no CPU times")
            return None
        return (after["busy"] - before["busy"]) / os.sysconf("SC_CLK_TCK") / runs * 1000

    def direct_true(self, argv):
        proc = subprocess.run(argv, capture_output=True, env=self.jail_env, timeout=DEADLINE)
        if proc.returncode != 0:
            raise Unmeasured(f"bwrap floor gave exit {proc.returncode}: {proc.stderr[-400:]!r}")

    def count_tokens(self, instructions, tools, surface):
        """o200k tokens of the instructions and of the tools (compact JSON,
        as a client hands them on), both written to `surface`."""
        tools_json = json.dumps(tools, separators=(",", ":"), ensure_ascii=False)
        surface.write_text(f"{instructions}\n\n{tools_json}\n")
        proc = subprocess.run(
            [self.args.node, self.args.tokens], input=json.dumps([instructions, tools_json]).encode(),
            capture_output=True, timeout=DEADLINE,
        )
        if proc.returncode != 0:
            raise Unmeasured(f"the tokenizer failed: {proc.stderr[-400:]!r}")
        counts = json.loads(proc.stdout)
        offers = "offers" if "session" in tools[0]["inputSchema"].get("properties", {}) else "does not offer"
        lines = [
            f"instructions: {counts[0]} tokens ({len(instructions)} chars)",
            f"tools/list (compact JSON of the tools): {counts[1]} tokens ({len(tools_json)} chars); "
            f"the run tool {offers} `session`",
            f"total: {sum(counts)} tokens (the text counted is in {surface})",
        ]
        return {"instructions": counts[0], "tools": counts[1], "total": sum(counts)}, lines

    def tokens(self, instructions, tools):
        self.section("tokens of tools/list + instructions (o200k, gpt-tokenizer), three presets")
        if not self.args.tokens:
            # They do not depend on the host: one count, the host pass's.
            self.lines(["not counted in this pass (no --tokens): bench/run's pass on the host counts them"])
            self.row("tokens: tools/list + instructions", "not counted here (the host pass counts them)")
            return
        counts, lines = self.count_tokens(instructions, tools, Path(self.args.work) / "surface.txt")
        self.lines(lines)
        self.results["tokens"] = counts
        self.row("tokens: tools/list + instructions", str(counts["total"]), f"<= {TARGET_TOKENS}",
                 counts["total"] <= TARGET_TOKENS)
        self.section("tokens of tools/list + instructions, the template's six environments")
        six_instructions, six_tools = self.template_surface()
        six, lines = self.count_tokens(six_instructions, six_tools, Path(self.args.work) / "surface-six.txt")
        self.lines(lines)
        per_env = (six["total"] - counts["total"]) / len(TEMPLATE_ENVS)
        self.results["tokens_six"] = {**six, "per_extra_env": per_env}
        self.row("tokens: tools/list + instructions, 6 environments", f"{six['total']} ({per_env:.1f} per extra)",
                 f"<= {TARGET_TOKENS_PER_ENV} per extra", per_env <= TARGET_TOKENS_PER_ENV)

    def template_surface(self):
        """The instructions and tools/list of the server with the template's
        three environments of its own beside the presets."""
        python = self.manifest["python"]
        extra = {}
        for name, fields in TEMPLATE_ENVS.items():
            env = json.loads(json.dumps(python))
            env["description"] = fields["description"]
            env["network"] = fields.get("network", False)
            env["limits"].update(fields.get("limits", {}))
            extra[name] = env
        path = Path(self.args.work) / "template-envs.json"
        path.write_text(json.dumps({"version": 1, "environments": extra}))
        client = self.start([self.server_bin, "--stdio", "--manifest", str(path)])
        try:
            return client.init_result.get("instructions", ""), client.request("tools/list", {})["tools"]
        finally:
            client.close()

    # --- 2. the fixture wrappers ---------------------------------------------

    def fixtures(self):
        self.section(f"ephemeral print(1), release launcher vs fixture wrapper run directly ({self.args.fixture_runs} "
                     f"runs each, {self.args.gap * 1000:.0f} ms apart)")
        entry = self.fixture_manifest["python"]
        client = self.start(self.fixture_server)
        try:
            tools = client.request("tools/list", {})["tools"]
            instructions = client.init_result.get("instructions", "")
            self.wait_idle(client.pid, settle=0.2)
            stats = self.interleaved({
                "MCP run (launcher, fixture)": lambda: self.mcp_print(client, "python"),
                "fixture wrapper direct": lambda: self.direct(entry["run"], b"print(1)\n"),
            }, self.args.fixture_runs)
        finally:
            client.close()
        self.lines(self.stat_rows(stats, baseline="fixture wrapper direct"))
        mcp, direct = stats["MCP run (launcher, fixture)"], stats["fixture wrapper direct"]
        ratio = mcp["p50"] / direct["p50"]
        self.results["fixtures"] = stats
        self.row("fixture print(1): MCP / wrapper direct, p50", f"{ratio:.2f}x ({ms(mcp['p50'])} / {ms(direct['p50'])})",
                 f"<= {TARGET_RATIO}x", ratio <= TARGET_RATIO)
        # The fixtures offer sessions in all three environments: the surface
        # as it grows with them (their descriptions are the fixtures' own).
        self.section("tokens of tools/list + instructions, fixture server (sessions in its three environments)")
        counts, lines = self.count_tokens(instructions, tools, Path(self.args.work) / "surface-fixtures.txt")
        self.lines(lines)
        self.results["tokens_fixtures"] = counts
        self.row("tokens, fixture server (with sessions)", str(counts["total"]))

    # --- 3. sessions ----------------------------------------------------------

    def packages(self):
        """Packages on demand: print(1) in python with jq added, through the
        harness's packages-server, each kind beside a plain print(1) on the
        same server: composed by a fresh server (empty cache: nix-instantiate and
        nix-store --realise, the store holding the composition after the
        first), found in the server's memory, found on disk by a new server."""
        if not self.args.packages_server:
            raise Unmeasured("no --packages-server")
        self.section("packages on demand: python + jq (ratios to print(1) on the same server)")
        argv = [str(Path(self.args.packages_server) / "bin/nix-sandbox-mcp"), "--stdio"]
        samples = {"plain": [], "composed": [], "in memory": [], "on disk": []}

        def timed(kind, client, **arguments):
            t0 = time.perf_counter()
            result, text = client.run(**arguments)
            samples[kind].append(time.perf_counter() - t0)
            if result.get("isError") or text != "1" + JSON_NOTE:
                raise McpError(f"{kind}: {text[-400:]!r}")

        for i in range(self.args.package_runs):
            home = self.scratch / f"packages-{i}"
            home.mkdir()
            env = {"HOME": str(home), "XDG_CACHE_HOME": str(home / "cache")}
            for kinds in (["plain", "composed", "in memory"], ["on disk"]):
                client = self.start(argv, env)
                try:
                    # Untimed: a server's first call waits for its start-up probes.
                    client.run("print(1)", env="python")
                    for kind in kinds:
                        if kind == "plain":
                            timed(kind, client, code="print(1)", env="python")
                        else:
                            # The same program: what is measured is the composition.
                            timed(kind, client, code="print(1)", env="python", packages=["jq"])
                finally:
                    client.close()
        stats = {kind: summary(s) for kind, s in samples.items()}
        self.results["packages"] = stats
        plain = stats["plain"]["p50"]
        lines = []
        for kind in ("composed", "in memory", "on disk"):
            ratio = stats[kind]["p50"] / plain
            lines.append(f"{kind}: {ratio:.2f}x ({ms(stats[kind]['p50'])} / {ms(plain)} p50)")
            self.row(f"packages=[jq], {kind} / plain run, p50", f"{ratio:.2f}x ({ms(stats[kind]['p50'])})")
        self.lines(lines)

    def devshell(self):
        """The environment `project` (the project's dev shell, docs/devshell.md)
        over a test flake of the stand-in package set whose dev shell brings gcc:
        its first call after the dev shell changed (cold: the server runs
        `nix print-dev-env` and builds the jail's closure) beside `nix
        print-dev-env --json` of the same flake run directly with the server's
        flags, then a later call (cached), beside a plain call in `shell`, all
        taking turns on one server. Each cold round gives the dev shell a new
        variable, so Nix evaluates and builds it anew both ways."""
        if not (self.args.devshell_hostpkgs and self.args.nixpkgs_lib):
            raise Unmeasured("no --devshell-hostpkgs and --nixpkgs-lib")
        runs = max(3, self.args.devshell_runs)
        self.section(f"the dev shell environment `project`: cold and cached calls ({runs} each, taking turns)")
        here = self.scratch / "devshell"
        project = here / "project"
        project.mkdir(parents=True)
        self.scratch.chmod(0o711)
        here.chmod(0o755)
        nix = ["nix", "--extra-experimental-features", "nix-command flakes"]
        nonce = iter(range(10**6))

        def write(n):
            (project / "flake.nix").write_text(DEVSHELL_FLAKE.replace("@HOSTPKGS@", self.args.devshell_hostpkgs)
                                               .replace("@NONCE@", f"bench-{os.getpid()}-{n}"))
            for path in [project, *project.iterdir()]:
                os.chmod(path, 0o755 if path.is_dir() else 0o644)

        write(next(nonce))
        subprocess.run(nix + ["flake", "lock", "--override-input", "nixpkgs/nixpkgs-lib",
                              f"path:{self.args.nixpkgs_lib}", str(project)],
                       check=True, capture_output=True, timeout=DEADLINE)
        (project / "flake.lock").chmod(0o644)
        home = here / "home"
        home.mkdir(mode=0o755)
        client = self.start([self.server_bin, "--stdio"], {
            "PROJECT_DIR": str(project), "NIX_SANDBOX_PROJECT_DEVSHELL": "1", "HOME": str(home),
            "XDG_CACHE_HOME": str(home / "cache")})
        code = 'cc --version >/dev/null && echo "nonce=$BENCH_NONCE"'

        def project_call(expect=None):
            result, text = client.run(code, env="project")
            if result.get("isError") or "nonce=bench-" not in text or (expect and f"nonce={expect}" not in text):
                raise McpError(f"env project gave {text[-400:]!r}")

        def cold():
            n = next(nonce)
            write(n)
            project_call(f"bench-{os.getpid()}-{n}")

        def direct():
            write(next(nonce))
            proc = subprocess.run(nix + ["--option", "accept-flake-config", "false", "print-dev-env", "--json",
                                         "--no-update-lock-file", "--no-write-lock-file",
                                         f"{project}#devShells.x86_64-linux.default"],
                                  capture_output=True, env={**self.env, "HOME": str(home)}, timeout=DEADLINE)
            if proc.returncode != 0 or b"BENCH_NONCE" not in proc.stdout:
                raise Unmeasured(f"nix print-dev-env gave exit {proc.returncode}: {proc.stderr[-400:]!r}")

        def plain():
            result, text = client.run("echo up", env="shell")
            if result.get("isError") or not text.startswith("up"):
                raise McpError(f"env shell gave {text[-300:]!r}")

        try:
            # Untimed: the start-up probes, and the first build of the closure's
            # shared parts (gcc, bash, coreutils).
            plain()
            cold()
            # One untimed round each: every cold run builds, and a warm-up
            # round would cost a build.
            cold_stats = self.interleaved({"project, first call (built)": cold,
                                           "nix print-dev-env, run directly": direct}, runs, warmup=1)
            project_call()
            warm_stats = self.interleaved({"project, later call (cached)": project_call,
                                           "shell, plain call": plain}, runs)
        finally:
            client.close()
        self.lines(self.stat_rows(cold_stats, "nix print-dev-env, run directly"))
        self.lines(self.stat_rows(warm_stats, "shell, plain call"))
        self.results["devshell"] = {**cold_stats, **warm_stats}
        built, nix_direct = cold_stats["project, first call (built)"]["p50"], cold_stats[
            "nix print-dev-env, run directly"]["p50"]
        cached, shell = warm_stats["project, later call (cached)"]["p50"], warm_stats["shell, plain call"]["p50"]
        self.row("env project, first call (built) / nix print-dev-env run directly, p50",
                 f"{built / nix_direct:.2f}x ({ms(built)} / {ms(nix_direct)})")
        self.row("env project, later call (cached) / a plain call in shell, p50",
                 f"{cached / shell:.2f}x ({ms(cached)} / {ms(shell)})")

    def languages(self):
        """Hello world in each language preset of the harness's
        languages-server, beside its compiler run directly (languages.py)."""
        if not self.args.languages_server:
            raise Unmeasured("no --languages-server")
        server = Path(self.args.languages_server)
        manifest = json.loads((server / MANIFEST).read_text())["environments"]
        missing = languages.toolchain_missing(manifest)
        if missing:
            raise Unmeasured(f"{missing} is missing here: the direct builds need the Debian toolchains "
                             f"(golang-go, rustc, default-jdk-headless, gcc, g++)")
        runs = self.args.language_runs
        self.section(f"hello world per language: through MCP, the wrapper and the compiler run directly "
                     f"({runs} runs each after 1 warm-up round, the kinds taking turns)")
        client = self.start([str(server / "bin/nix-sandbox-mcp"), "--stdio"])
        try:
            self.wait_idle(client.pid)
            results, rows, lines = languages.measure(client, manifest, self.scratch, self.jail_env, runs, warmup=1)
        finally:
            client.close()
        self.lines(lines)
        self.results["languages"] = results
        for figure, value in rows:
            self.row(figure, value)

    def progress(self):
        """A run streaming output on the Nix-built server, with and without
        a progressToken (notifications every second carrying the newest
        output lines, from a fixed ring the pipe readers fill): the server's
        own CPU time per GiB of output it read, and its resident memory,
        which progress must leave flat. The kinds take turns, three rounds.
        The stream is bursts of 2.5 MB every quarter second, about 50 MB in
        all: under the 64 MiB past which a flood is stopped. Then a `yes`
        with no end, which the server stops: its CPU until then."""
        seconds, rounds = self.args.flood_seconds, 3
        self.section(f"progress under a stream: 2.5 MB every 0.25 s for {seconds} s in shell, without and with a "
                     f"progressToken, {rounds} rounds taking turns (the server's CPU time per GiB read; VmRSS sampled "
                     f"every 20 ms); then `yes` with no end, stopped by the server")
        code = (f"for i in $(seq {seconds * 4}); do head -c 2500000 /dev/zero | tr '\\0' y; echo; sleep 0.25; "
                f"done")
        client = self.start([self.server_bin, "--stdio"])
        kinds = {"without": None, "with": {"progressToken": "bench-flood"}}
        figures = {label: {"cpu_s": 0.0, "bytes": 0, "rss_before": 0, "rss_peak": 0, "notifications": 0}
                   for label in kinds}
        try:
            self.wait_idle(client.pid)
            for i in range(rounds):
                order = list(kinds) if i % 2 == 0 else list(reversed(kinds))
                for label in order:
                    one, total = self.flood(client, code, kinds[label]), figures[label]
                    total["cpu_s"] += one["cpu_s"]
                    total["bytes"] += one["bytes"]
                    total["rss_before"] = max(total["rss_before"], one["rss_before"])
                    total["rss_peak"] = max(total["rss_peak"], one["rss_peak"])
                    total["notifications"] += one["notifications"]
            stopped = [self.flood(client, "yes", None, flooded=True) for _ in range(rounds)]
        finally:
            client.close()
        for f in figures.values():
            f["cpu_s_per_gib"] = f["cpu_s"] / max(f["bytes"] / (1 << 30), 1e-9)
        without, with_ = figures["without"], figures["with"]
        if with_["notifications"] < rounds * (seconds - 1):
            raise Unmeasured(f"only {with_['notifications']} progress notifications in {rounds} runs of {seconds} s")
        self.lines([f"{label}: {f['bytes'] / (1 << 30):.2f} GiB read with {f['cpu_s']:.2f} s of server CPU "
                    f"({f['cpu_s_per_gib']:.2f} s/GiB); VmRSS {mib(f['rss_before'])} before, {mib(f['rss_peak'])} "
                    f"peak; {f['notifications']} progress notifications" for label, f in figures.items()])
        self.results["progress"] = figures
        ratio = with_["cpu_s_per_gib"] / without["cpu_s_per_gib"]
        self.row("server CPU per GiB of a flood read, with progress vs without",
                 f"{with_['cpu_s_per_gib']:.2f} s vs {without['cpu_s_per_gib']:.2f} s ({ratio:.2f}x)", "<= 1.10x",
                 ratio <= 1.10)
        grew = with_["rss_peak"] - without["rss_peak"]
        self.row("server peak VmRSS in the stream, with progress minus without", f"{grew / 1024:+.1f} MiB",
                 "<= 1 MiB", grew <= 1024)
        cpu = summary([one["cpu_s"] for one in stopped])
        most = max(one["cpu_s"] for one in stopped) * 1000
        self.lines([f"`yes` with no end ({rounds} runs): stopped after {stopped[0]['bytes'] / (1 << 20):.0f} MiB read "
                    f"(the stop is 1024 times output_bytes); server CPU p50 {ms(cpu['p50'])}, max {ms(most)}; "
                    f"wall time p50 {ms(summary([one['wall_s'] for one in stopped])['p50'])}"])
        self.results["flood_stopped"] = stopped
        self.row("`yes` with no end: server CPU until the server stops it, max of 3", ms(most), "< 1 s",
                 most < 1000)

    @staticmethod
    def flood(client, code, meta, flooded=False):
        """One streaming call: the server's CPU seconds during it, the bytes
        it read (kept and dropped), its VmRSS before and at its peak, the
        progress notifications received; `flooded`: the server must have
        stopped it as a flood."""
        peak, stop = [0], threading.Event()

        def sample():
            while not stop.wait(0.02):
                peak[0] = max(peak[0], procs.status_kib(client.pid, "VmRSS") or 0)

        before = procs.status_kib(client.pid, "VmRSS") or 0
        client.progress_seen = 0
        cpu = procs.cpu_seconds(client.pid)
        sampler = threading.Thread(target=sample)
        sampler.start()
        wall = time.monotonic()
        try:
            result, text = client.run(code, env="shell", meta=meta)
        finally:
            wall = time.monotonic() - wall
            stop.set()
            sampler.join()
        cpu = procs.cpu_seconds(client.pid) - cpu
        facts = (result.get("_meta") or {}).get("nix-sandbox-mcp/result") or {}
        if (bool(result.get("isError")) != flooded or not text.startswith("y") or "stdout_dropped_bytes" not in facts
                or (facts.get("flooded") == "stdout") != flooded):
            raise Unmeasured(f"the stream gave {text[:200]!r}, facts {facts}")
        read = len(text.encode()) + facts["stdout_dropped_bytes"]
        return {"cpu_s": cpu, "bytes": read, "rss_before": before, "rss_peak": max(peak[0], before),
                "notifications": client.progress_seen, "wall_s": wall}

    def sessions(self):
        """Sessions on the Nix-built server, and on the fixture wrappers with
        the release launcher (the figures are labelled by which)."""
        kinds = [("Nix-built", [self.server_bin, "--stdio"], self.manifest)]
        if self.fixture_manifest:
            kinds.append(("fixtures", self.fixture_server, self.fixture_manifest))
        for label, argv, manifest in kinds:
            if not manifest.get("python", {}).get("session"):
                reason = f"the {label} python environment has no session wrapper (manifest session = [])"
                self.section(f"sessions ({label}): not measured: {reason}")
                for figure, target in [
                    ("session x += 1 round trip p50", f"< {TARGET_SESSION_P50_MS} ms"),
                    (f"session x += 1 round trip p50 {OVER_SOCKETS}", f"< {TARGET_SESSION_P50_MS} ms"),
                    (f"session x += 1 round trip p50 {OVER_HTTP}", None),
                    ("session creation p50", None),
                    (f"{self.args.sessions} sessions x {self.args.calls} calls: errors", "0"),
                    ("launcher peak RSS under load", None),
                    ("agent RSS per session", None),
                ]:
                    self.not_run(f"{figure} ({label})", target, reason)
                continue
            # The defaults (32 sessions per client, 32 in all) are what is measured.
            needed = max(self.args.sessions, self.args.creations + 1)
            if needed > DEFAULT_MAX_SESSIONS:
                argv = argv + ["--max-sessions", str(needed), "--max-sessions-total", str(needed)]
            try:
                self.session_calls(label, argv, manifest)
                self.session_load(label, argv, manifest)
            except (McpError, Unmeasured) as e:
                self.unmeasured.append(f"sessions ({label}): {e}")
                print(f"   could not measure: {e}", flush=True)

    def session_calls(self, label, argv, manifest):
        n, creations = self.args.session_calls, self.args.creations
        relay, floor = self.args.relay, self.args.json_floor
        self.section(f"sessions ({label}): creation ({creations} sessions), then `x += 1` round trips ({n} calls), "
                     f"each kind in turn, then {self.args.spaced_calls} of MCP and the wrapper direct "
                     f"{self.args.spaced_gap:g} s apart")
        # One call at a time: the thread that sends reads the answer, on the
        # MCP side as on the wrapper's (mcp_client.py, `lean`). The kinds
        # take turns call by call (the order rotating), so a change in the
        # machine's speed during the run weighs on all of them alike.
        wrapper = manifest["python"]["session"]
        client = self.start(argv, lean=True)
        opened = []
        try:
            # The same server as Node's clients start it: its stdin and
            # stdout a socketpair each, not pipes.
            node_like = self.start(argv, lean=True, sockets=True)
            opened.append(node_like)
            # And over streamable HTTP, one kept-alive connection.
            token = self.scratch / "http-token"
            token.write_text(secrets.token_hex(16) + "\n")
            token.chmod(0o600)
            web = HttpClient([a for a in argv if a != "--stdio"], self.env, str(token))
            opened.append(web)
            web.initialize()
            self.wait_idle(web.pid, settle=0.2)
            self.wait_idle(node_like.pid, settle=0.2)
            self.wait_idle(client.pid, settle=0.2)
            created, direct_created = [], []
            for i in range(creations):
                t0 = time.perf_counter()
                self.session_call(client, f"new{i}", "x = 0")
                created.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                direct = DirectSession(wrapper, self.jail_env)
                try:
                    direct.call("x = 0")
                    direct_created.append(time.perf_counter() - t0)
                finally:
                    direct.close()
            agents = self.agents(client.pid)
            # MCP and the wrapper direct first: the spaced calls take those two.
            opened.append(DirectSession(wrapper, self.jail_env))
            kinds = {"x += 1 round trip": lambda code: self.session_call(client, "bench", code),
                     "round trip, wrapper direct": opened[-1].call,
                     f"x += 1 round trip {OVER_SOCKETS}": lambda code: self.session_call(node_like, "bench", code),
                     f"x += 1 round trip {OVER_HTTP}": lambda code: self.session_call(web, "bench", code)}
            if relay:
                opened.append(DirectSession([relay, *wrapper], self.jail_env))
                kinds["round trip, through a bare relay"] = opened[-1].call
            if floor:
                least = Client([floor, *wrapper], self.jail_env, lean=True)
                opened.append(least)
                least.initialize()
                kinds["round trip, through a JSON-RPC floor"] = (
                    lambda code: self.session_call(least, "bench", code))
            for call in kinds.values():
                call("x = 0")
            names = list(kinds)
            calls = {name: [] for name in names}
            for i in range(WARMUP * 4 + n):
                for k in range(len(names)):
                    name = names[(i + k) % len(names)]
                    t0 = time.perf_counter()
                    kinds[name]("x += 1")
                    if i >= WARMUP * 4:
                        calls[name].append(time.perf_counter() - t0)
            # As a model makes them: calls apart, each finding the machine
            # idle and the processes' caches gone cold (MCP and the wrapper
            # direct only, taking turns).
            spaced = {name: [] for name in names[:2]}
            for i in range(self.args.spaced_calls):
                for name in names[:2] if i % 2 else names[1::-1]:
                    time.sleep(self.args.spaced_gap)
                    t0 = time.perf_counter()
                    kinds[name]("x += 1")
                    spaced[name].append(time.perf_counter() - t0)
            made = WARMUP * 4 + n + self.args.spaced_calls
            for server, expected in ((client, made), (node_like, WARMUP * 4 + n), (web, WARMUP * 4 + n)):
                _, text = self.session_call(server, "bench", "print(x)")
                if text != f"{expected}{JSON_NOTE}":
                    raise Unmeasured(f"the session lost its state: x is {text!r}, not {expected}")
        finally:
            client.close()
            for direct in opened:
                direct.close()
        apart = {name: summary(samples) for name, samples in spaced.items() if samples}
        stats = {"session creation (first call)": summary(created),
                 "creation, wrapper direct": summary(direct_created),
                 **{name: summary(samples) for name, samples in calls.items()},
                 **{f"{name}, {self.args.spaced_gap:g} s apart": s for name, s in apart.items()}}
        self.lines(self.stat_rows(stats))
        self.lines(["one call at a time, each side read by the thread that sent it (no reader thread): "
                    "the same client costs in both"] + self.agent_lines(agents, creations))
        if relay:
            self.lines(["the bare relay (bench/relay.rs) runs the wrapper and copies bytes both ways from one thread "
                        "waiting in poll(2): the cost of a process between client and wrapper, without the launcher's work"])
        if floor:
            self.lines(["the JSON-RPC floor (bench/floor) answers MCP's initialize and tools/call with serde_json and "
                        "blocking reads, one thread: what parsing and answering a call costs, without the launcher's "
                        "runtime, protocol library, session table, checks and limits"])
        self.results[f"sessions {label}"] = {**stats, "agents": agents}
        rt, rt_direct = stats["x += 1 round trip"], stats["round trip, wrapper direct"]
        self.row(f"session x += 1 round trip p50 ({label}): MCP / wrapper direct",
                 f"{ratio_of(rt, rt_direct, 'p50')} ({ms(rt['p50'])} / {ms(rt_direct['p50'])})",
                 f"< {TARGET_SESSION_P50_MS} ms", rt["p50"] < TARGET_SESSION_P50_MS)
        self.row(f"session x += 1 round trip p99 ({label}): MCP / wrapper direct",
                 f"{ratio_of(rt, rt_direct, 'p99')} ({ms(rt['p99'])} / {ms(rt_direct['p99'])})")
        node = stats[f"x += 1 round trip {OVER_SOCKETS}"]
        self.row(f"session x += 1 round trip p50 {OVER_SOCKETS} ({label}): MCP / wrapper direct",
                 f"{ratio_of(node, rt_direct, 'p50')} ({ms(node['p50'])} / {ms(rt_direct['p50'])})",
                 f"< {TARGET_SESSION_P50_MS} ms", node["p50"] < TARGET_SESSION_P50_MS)
        web = stats[f"x += 1 round trip {OVER_HTTP}"]
        self.row(f"session x += 1 round trip p50 {OVER_HTTP} ({label}): MCP over HTTP / over pipes",
                 f"{ratio_of(web, rt, 'p50')} ({ms(web['p50'])} / {ms(rt['p50'])})")
        if relay:
            hop = stats["round trip, through a bare relay"]
            self.row(f"session x += 1 round trip p50 ({label}): MCP / bare relay",
                     f"{ratio_of(rt, hop, 'p50')} ({ms(rt['p50'])} / {ms(hop['p50'])}; the relay over direct "
                     f"+{ms(hop['p50'] - rt_direct['p50'])})")
        if floor:
            least = stats["round trip, through a JSON-RPC floor"]
            self.row(f"session x += 1 round trip p50 ({label}): MCP / JSON-RPC floor",
                     f"{ratio_of(rt, least, 'p50')} ({ms(rt['p50'])} / {ms(least['p50'])}; the floor over direct "
                     f"+{ms(least['p50'] - rt_direct['p50'])})")
        if apart:
            far, far_direct = apart["x += 1 round trip"], apart["round trip, wrapper direct"]
            self.row(f"session x += 1 round trip p50, calls {self.args.spaced_gap:g} s apart ({label}): "
                     f"MCP / wrapper direct",
                     f"{ratio_of(far, far_direct, 'p50')} ({ms(far['p50'])} / {ms(far_direct['p50'])})")
        new, new_direct = stats["session creation (first call)"], stats["creation, wrapper direct"]
        self.row(f"session creation p50 ({label}): MCP / wrapper direct",
                 f"{ratio_of(new, new_direct, 'p50')} ({ms(new['p50'])} / {ms(new_direct['p50'])})",
                 f"< {TARGET_CREATION_P50_MS:.0f} ms", new["p50"] < TARGET_CREATION_P50_MS)
        if agents:
            self.row(f"agent RSS per session, median ({label})", mib(statistics.median(a["agent"] for a in agents)))

    def direct_load(self, manifest, sessions, calls):
        """The baseline of session_load: `sessions` session wrappers run
        directly, `calls` round trips each from as many threads at once;
        the latencies (seconds)."""
        argv = manifest["python"]["session"]
        directs = [DirectSession(argv, self.jail_env) for _ in range(sessions)]
        latencies, errors, lock = [], [], threading.Lock()
        ready = threading.Barrier(sessions)
        creating = self.creation_slots()

        def worker(direct):
            mine = []
            try:
                with creating:
                    direct.call("x = 0")
                ready.wait(DEADLINE)
                for _ in range(calls):
                    t0 = time.perf_counter()
                    direct.call("x += 1")
                    mine.append(time.perf_counter() - t0)
            except (Unmeasured, threading.BrokenBarrierError, OSError, ValueError) as e:
                with lock:
                    errors.append(str(e))
            with lock:
                latencies.extend(mine)

        try:
            threads = [threading.Thread(target=worker, args=(d,)) for d in directs]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            for d in directs:
                d.close()
        if errors:
            raise Unmeasured(f"{len(errors)} direct session calls failed: {errors[0]}")
        return latencies

    def creation_slots(self):
        """What a load's session creation holds: --create-at-once sessions
        are created at a time (0: all at once, no limit)."""
        n = self.args.create_at_once
        return threading.BoundedSemaphore(n) if n > 0 else contextlib.nullcontext()

    def created_how(self):
        n = self.args.create_at_once
        return f" (the sessions created {n} at a time first, untimed)" if n > 0 else ""

    def session_load(self, label, argv, manifest):
        sessions, calls = self.args.sessions, self.args.calls
        self.section(f"sessions ({label}): {sessions} sessions x {calls} calls at once{self.created_how()}")
        client = self.start(argv)
        errors, latencies, lock = [], [], threading.Lock()
        creating = self.creation_slots()
        ready = threading.Barrier(sessions + 1)
        peak = {"rss": 0}
        stop = threading.Event()

        def worker(i):
            name = f"load{i}"
            mine = []

            def call(code, what):
                try:
                    return self.session_call(client, name, code)[1]
                except Exception as e:  # any failure is an error of the run, counted
                    with lock:
                        errors.append(f"{name} {what}: {e}")
                    return None

            with creating:
                call("x = 0", "creation")
            try:
                ready.wait(DEADLINE)
            except threading.BrokenBarrierError:
                return
            for _ in range(calls):
                t0 = time.perf_counter()
                if call("x += 1", "call") is not None:
                    mine.append(time.perf_counter() - t0)
            text = call("print(x)", "final read")
            if text is not None and text != f"{calls}{JSON_NOTE}":
                with lock:
                    errors.append(f"{name}: x is {text.strip()!r} after {calls} calls")
            with lock:
                latencies.extend(mine)

        def sample():
            while not stop.wait(0.02):
                peak["rss"] = max(peak["rss"], procs.status_kib(client.pid, "VmRSS") or 0)

        try:
            self.wait_idle(client.pid, settle=0.2)
            before = procs.status_kib(client.pid, "VmRSS")
            threads = [threading.Thread(target=worker, args=(i,)) for i in range(sessions)]
            sampler = threading.Thread(target=sample)
            sampler.start()
            for t in threads:
                t.start()
            try:
                ready.wait(DEADLINE)
            except threading.BrokenBarrierError:
                raise Unmeasured(f"the {sessions} sessions were not all created within {DEADLINE} s") from None
            t0 = time.perf_counter()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
            agents = self.agents(client.pid)
            stop.set()
            sampler.join()
            hwm = procs.status_kib(client.pid, "VmHWM")
        finally:
            stop.set()
            client.close()
        direct = summary(self.direct_load(manifest, sessions, calls))
        lean, lean_direct, lean_wall = self.async_load(argv, manifest, sessions, calls)
        done = len(latencies)
        stats = summary(latencies) if latencies else None
        lines = [f"errors: {len(errors)}; calls answered: {done} of {sessions * calls}; wall {wall:.2f} s; "
                 f"throughput {done / wall:.0f} calls/s"]
        if stats:
            lines.append(f"latency p50 {ms(stats['p50'])}, p90 {ms(stats['p90'])}, p99 {ms(stats['p99'])}, "
                         f"max {ms(max(latencies) * 1000)}")
        lines.append(f"the same load on {sessions} session wrappers run directly (no launcher): p50 "
                     f"{ms(direct['p50'])}, p90 {ms(direct['p90'])}, p99 {ms(direct['p99'])}")
        repeats = self.args.load_repeats
        together = "" if repeats == 1 else f", {repeats} loads together"
        lines.append(f"one asyncio client instead (one thread, answers matched by id, as MCP clients do; "
                     f"the same for the wrappers run directly){together}: "
                     f"{repeats * sessions * calls / lean_wall:.0f} calls/s, "
                     f"p50 {ms(lean['p50'])}, p90 {ms(lean['p90'])}, p99 {ms(lean['p99'])}{each_p99(lean)}; "
                     f"wrappers directly: p50 {ms(lean_direct['p50'])}, p90 {ms(lean_direct['p90'])}, "
                     f"p99 {ms(lean_direct['p99'])}{each_p99(lean_direct)}")
        lines.append(f"launcher RSS: {mib(before)} before, {mib(peak['rss'])} peak sampled, VmHWM {mib(hwm)}")
        lines.extend(errors[:5])
        self.lines(lines + self.agent_lines(agents, sessions))
        self.results[f"load {label}"] = {"errors": errors, "wall_s": wall, "latency": stats, "direct": direct,
                                         "asyncio": lean, "asyncio_direct": lean_direct,
                                         "rss_before_kib": before,
                                         "vmhwm_kib": hwm, "agents": agents}
        self.row(f"{sessions} sessions x {calls} calls: errors ({label})", str(len(errors)), "0", not errors)
        self.row(f"{sessions} x {calls}, one asyncio client{together}: throughput, p50 / p99 ({label})",
                 f"{repeats * sessions * calls / lean_wall:.0f} calls/s, {ms(lean['p50'])} / {ms(lean['p99'])}"
                 f"{each_p99(lean)}",
                 f"p99 < {TARGET_LOAD_P99_MS:.0f} ms", lean["p99"] < TARGET_LOAD_P99_MS)
        self.row(f"{sessions} x {calls}, one asyncio client: MCP / wrapper direct, p50 / p99 ({label})",
                 f"{ratio_of(lean, lean_direct, 'p50')} / {ratio_of(lean, lean_direct, 'p99')} "
                 f"(direct {ms(lean_direct['p50'])} / {ms(lean_direct['p99'])})")
        if stats:
            self.row(f"{sessions} x {calls}, {sessions} client threads: throughput, p50 / p99 ({label})",
                     f"{done / wall:.0f} calls/s, {ms(stats['p50'])} / {ms(stats['p99'])}")
            self.row(f"{sessions} x {calls}, {sessions} client threads: MCP / wrapper direct, p50 / p99 ({label})",
                     f"{ratio_of(stats, direct, 'p50')} / {ratio_of(stats, direct, 'p99')} "
                     f"(direct {ms(direct['p50'])} / {ms(direct['p99'])})")
        self.row(f"launcher peak RSS (VmHWM) under {sessions} x {calls} ({label})", mib(hwm),
                 f"< {mib(TARGET_PEAK_RSS_KIB)}", hwm < TARGET_PEAK_RSS_KIB)
        if agents:
            self.row(f"agent RSS per session under load, median ({label})",
                     mib(statistics.median(a["agent"] for a in agents)))

    def async_load(self, argv, manifest, sessions, calls):
        """The load of session_load from one asyncio client (async_load.py),
        --load-repeats times, each through a fresh server and on fresh
        wrappers run directly, the two kinds taking turns: the summaries of
        all the repeats' calls together (each repeat's p99 beside them), and
        the server's wall time in all.

        One load's timed part lasts 130 to 200 ms here, so its p99 is its 16
        slowest calls: one pause of the machine of 20 ms, which holds every
        call in flight, decides it alone. The calls of several loads
        together weigh such a pause by how often it comes."""
        mcp, direct, wall = [], [], 0.0
        try:
            for _ in range(self.args.load_repeats):
                latencies, took = async_load.mcp(argv, self.env, sessions, calls)
                mcp.append(latencies)
                wall += took
                latencies, _ = async_load.direct(manifest["python"]["session"], self.jail_env, sessions, calls)
                direct.append(latencies)
        except (async_load.Failed, OSError, ValueError, TimeoutError) as e:
            raise Unmeasured(f"{sessions} sessions from one asyncio client: {e}") from None
        pooled, pooled_direct = summary(sum(mcp, [])), summary(sum(direct, []))
        pooled["each_p99"] = [summary(one)["p99"] for one in mcp]
        pooled_direct["each_p99"] = [summary(one)["p99"] for one in direct]
        return pooled, pooled_direct, wall

    @staticmethod
    def session_call(client, session, code):
        result, text = client.run(code, env="python", session=session)
        if result.get("isError"):
            raise McpError(f"`{code}` in session {session}: {text[-300:]!r}")
        return result, text

    @staticmethod
    def agents(server_pid):
        """RSS (KiB) of every agent under the server (argv[0] named agent), and
        of each agent with its descendants (the interpreter)."""
        found = []
        for pid in procs.descendants(server_pid):
            argv = procs.cmdline(pid)
            if argv and os.path.basename(argv[0]) == "agent":
                rss = procs.status_kib(pid, "VmRSS")
                tree = [procs.status_kib(p, "VmRSS") or 0 for p in procs.descendants(pid)]
                if rss is not None:
                    found.append({"pid": pid, "agent": rss, "with_interpreter": rss + sum(tree)})
        return found

    @staticmethod
    def agent_lines(agents, expected):
        if not agents:
            return [f"no agent process found under the server (expected {expected})"]
        med = lambda key: mib(statistics.median(a[key] for a in agents))
        top = lambda key: mib(max(a[key] for a in agents))
        return [f"agents found: {len(agents)} (expected {expected}); RSS per agent median {med('agent')}, "
                f"max {top('agent')}; agent + interpreter median {med('with_interpreter')}, max {top('with_interpreter')}"]

    # --- 4. start-up ------------------------------------------------------------

    def fork(self):
        """A session started from another (`from: src`) and from a checkpoint
        (`from: src@1`) against a new session, round robin, with 1 MiB and
        1 GiB in the source's /workspace, then 1 GiB in its project layer
        on a server with a writable project: the ratio to creation shows
        whether the time grows with the size."""
        runs = max(3, self.args.fork_runs)
        if not self.fixture_server:
            raise Unmeasured("no --fixtures: the fork step needs a session jail of 2.5 GiB of workspace_mb")
        # The fixtures' shell with room for the source's 1 GiB and its
        # checkpoint on its tmpfs, counted in its memory (a Nix-built
        # wrapper's sizes are its build's).
        manifest = json.loads(Path(self.fixture_server[3]).read_text())
        shell = manifest["environments"]["shell"]
        shell["session"] += ["fork", "60", "2560", "4096"]
        shell["limits"].update(workspace_mb=2560, memory_mb=4096)
        # Where a root server's jail uids can run it.
        here = self.scratch / "fork"
        here.mkdir(exist_ok=True)
        self.scratch.chmod(0o711)
        here.chmod(0o755)
        run = here / "run"
        run.write_text(f'#!/bin/sh\nJAIL_MEMORY_MB=4096 exec {shell["run"][0]} "$@"\n')
        run.chmod(0o755)
        shell["run"] = [str(run)] + shell["run"][1:]
        manifest["environments"] = {"shell": shell}
        path = self.scratch / "fork.json"
        path.write_text(json.dumps(manifest))
        argv = self.fixture_server[:3] + [str(path)] + self.fixture_server[4:]
        settings = {"NIX_SANDBOX_MAX_CHECKPOINTS": "2", "NIX_SANDBOX_MAX_SESSIONS": "8"}
        # The project's layer (docs/workbench.md) is on the same tmpfs as
        # /workspace and is checkpointed with it: a server with a writable
        # project, its own new sessions the baseline, measures a fork of 1 GiB
        # written into /project.
        project = here / "project"
        project.mkdir(exist_ok=True)
        project.chmod(0o755)
        (project / "README").write_text("the benchmark's project\n")
        servers = (({}, (("1 MiB", 1, "/workspace"), ("1 GiB", 1024, "/workspace"))),
                   ({"PROJECT_DIR": str(project), "NIX_SANDBOX_PROJECT_WRITABLE": "1"},
                    (("1 GiB", 1024, "/project"),)))
        results = {}
        for extra, cases in servers:
            client = self.start(argv, {**settings, **extra})
            try:
                for label, mib, where in cases:
                    results[f"{label} in {where}"] = self.fork_case(client, label, mib, where, runs)
            finally:
                client.close()
        self.results["fork"] = results

    def fork_case(self, client, label, mib, where, runs):
        """One size in one place: a source session writes it and is
        checkpointed, then forks of it, rollbacks to that checkpoint and new
        sessions are timed round robin."""
        src = f"src{mib}{where.replace('/', '-')}"
        # In files of at most 128 MiB: the jail's file size limit.
        parts = max(1, mib // 128)
        make = (f"cd {where} && for i in $(seq {parts}); do head -c {mib // parts}M /dev/zero > big$i; done "
                f"&& echo made")
        result, text = client.run(make, env="shell", session=src)
        if result.get("isError") or f"checkpoint: {src}@1" not in text:
            raise McpError(f"making the {label} source in {where} gave {text[-300:]!r}")
        self.section(f"fork and rollback with {label} in {where} ({runs} each)")
        counter = iter(range(10**6))

        def timed(**more):
            name = f"s{next(counter)}"
            result, text = client.run("true", env="shell", session=name, **more)
            if result.get("isError"):
                raise McpError(f"{more or 'a new session'} gave {text[-300:]!r}")
            client.run("true", env="shell", session=name, end=True)

        kinds = {"new session": timed, "fork (from: src)": lambda: timed(**{"from": src}),
                 "rollback (from: src@1)": lambda: timed(**{"from": f"{src}@1"})}
        stats = self.interleaved(kinds, runs)
        self.lines(self.stat_rows(stats, "new session"))
        base = stats["new session"]["p50"]
        for name in ("fork (from: src)", "rollback (from: src@1)"):
            p50 = stats[name]["p50"]
            self.row(f"{name.split(' ')[0]}, {label} in {where}, p50 vs new session",
                     f"{ms(p50)} ({p50 / base:.2f}x)", "new session + 10 ms", p50 <= base + 10.0)
        client.run("true", env="shell", session=src, end=True)
        return stats

    def store_view(self):
        """A jail's /nix/store through one bind of the view jail-budget
        mounts (as every jail starts) beside one bubblewrap bind per store
        path (as jails started before), for closures of 11, 40 and 100
        paths: the machine's CPU per start of jail-budget and a bare
        bubblewrap running true, the view's making included."""
        runs = 40
        self.section(f"the store view: jail-budget + bare bwrap, one bind per path vs one view ({runs} starts each)")
        found = re.search(r"--store-view (\S+)", Path(self.manifest["python"]["run"][0]).read_text())
        if not found:
            raise Unmeasured("the python run wrapper names no --store-view")
        budget = str(Path(self.args.launcher) / "bin/jail-budget")
        paths = sorted(str(p) for p in Path("/nix/store").iterdir() if not p.name.startswith(".") and p.is_dir())
        results = {}
        for size in (11, 40, 100):
            if len(paths) < size:
                raise Unmeasured(f"/nix/store holds fewer than {size} directories")
            listed = self.scratch / f"store-paths-{size}"
            listed.write_text("".join(f"{p}\n" for p in paths[:size]))
            binds = [arg for p in paths[:size] for arg in ("--ro-bind", p, p)]
            kinds = {
                "one bind per path": [budget, "--", *BWRAP_FLOOR[:-1], *binds, BWRAP_FLOOR[-1]],
                "one view": [budget, "--store-view", found.group(1), "--store-paths", str(listed), "--",
                             *BWRAP_FLOOR[:-1], "--ro-bind", found.group(1), "/nix/store", BWRAP_FLOOR[-1]],
            }
            cpu = {}
            for name, argv in kinds.items():
                self.direct_true(argv)
                cpu[name] = self.cpu_per_run(lambda argv=argv: self.direct_true(argv), runs, settle=0.5, needed=True)
            results[size] = cpu
            self.lines([f"{size} paths: " + ", ".join(f"{k} {v:.1f} ms" for k, v in cpu.items())])
            per, view = cpu["one bind per path"], cpu["one view"]
            self.row(f"store view: CPU per bare start, {size} paths, per-path binds / view",
                     f"{per:.1f} / {view:.1f} ms ({view / per:.2f}x)" if per else f"{per:.1f} / {view:.1f} ms")
        self.results["store_view"] = results

    def cold_layers(self):
        """Where a cold run's CPU goes, each layer taken away in turn: the
        python preset's run wrapper run directly; jail-budget started with
        the argv that wrapper computes (no wrapper shell); the same without
        the store view (the store bound whole); bubblewrap alone with the
        jail's arguments (no jail-budget: no kernel budgets, bubblewrap
        makes the IPC namespace); a bare bwrap running the same python3
        (the warm step's floor). The machine's CPU per print(1), the kinds
        taking turns over 3 rounds, the median round of each. As uid 65534
        (through setpriv as root): a root server runs its wrappers as uids
        of their own."""
        runs, rounds = 30, 3
        self.section(f"where a cold run's CPU goes: the python run wrapper, its layers taken away in turn "
                     f"({rounds} rounds of {runs} runs)")
        wrapper = self.manifest["python"]["run"][0]
        text = Path(wrapper).read_text()
        budget = re.search(r"^exec (\S+/bin/jail-budget) ", text, re.M)
        seccomp = re.search(r"SECCOMP_FILTERS=\((\S+)\)", text)
        if not (budget and seccomp):
            raise Unmeasured("the python run wrapper's jail-budget line or seccomp filter is not where expected")
        # The wrapper with its last line printing the argv it would exec.
        printer = self.scratch / "print-argv"
        printer.write_text(text.replace(f"exec {budget.group(1)} ", f"printf '%s\\0' {budget.group(1)} ", 1))
        printer.chmod(0o755)
        env = {"PATH": "/usr/bin:/bin", "SHELL": "/bin/sh"}
        printed = subprocess.run([str(printer), "-"], capture_output=True, env=env, timeout=DEADLINE, check=True)
        argv = [a.decode() for a in printed.stdout.split(b"\0")[:-1]]
        if "--add-seccomp-fd" not in argv:
            raise Unmeasured(f"the wrapper's argv has no seccomp descriptor: {argv[-6:]}")
        # The filter on a descriptor of this process, named in the argv.
        fd = os.open(seccomp.group(1), os.O_RDONLY)
        at = argv.index("--add-seccomp-fd") + 1
        argv[at] = str(fd)
        as_jail = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
        python = argv[-2]
        split = argv.index("--")
        budget_argv, bwrap_argv = argv[:split], argv[split + 1:]
        view = budget_argv.index("--store-view")
        view_dir = budget_argv[view + 1]
        if budget_argv[view + 2] != "--store-paths" or view_dir not in bwrap_argv:
            raise Unmeasured(f"the wrapper's store view is not where expected: {budget_argv[view:view + 4]}")
        # bubblewrap's arguments with the store bound whole where the view was.
        whole = [("/nix/store" if a == view_dir else a) for a in bwrap_argv]
        kinds = {
            "run wrapper": [wrapper, "-"],
            "jail-budget, no wrapper shell": argv,
            "no store view": budget_argv[:view] + budget_argv[view + 4:] + ["--", *whole],
            "bwrap with the jail's arguments": [whole[0], "--unshare-ipc", *whole[1:]],
            "bare bwrap + its python3": [*BWRAP_FLOOR[:-1], "--ro-bind", "/nix/store", "/nix/store", python, "-"],
        }
        def once(name, command):
            os.lseek(fd, 0, os.SEEK_SET)
            done = subprocess.run(as_jail + command, input=b"print(1)", capture_output=True, env=env,
                                  pass_fds=(fd,), timeout=DEADLINE)
            if done.stdout != b"1\n":
                raise Unmeasured(f"{name} gave {done.stdout[-80:]!r}: {done.stderr[-300:]!r}")

        cpu = {name: [] for name in kinds}
        try:
            for _ in range(rounds):
                for name, command in kinds.items():
                    time.sleep(0.3)
                    cpu[name].append(self.cpu_per_run(lambda name=name, command=command: once(name, command), runs,
                                                      settle=0.3, needed=True))
        finally:
            os.close(fd)
        median = {name: statistics.median(values) for name, values in cpu.items()}
        self.lines([f"{name}: {median[name]:.1f} ms (rounds " + ", ".join(f"{v:.1f}" for v in values) + ")"
                    for name, values in cpu.items()])
        self.results["cold_layers"] = cpu
        self.row("cold run CPU, as uid 65534: run wrapper / no wrapper shell / no store view / bwrap with the "
                 "jail's arguments / bare bwrap + python3",
                 " / ".join(f"{median[name]:.1f}" for name in kinds) + " ms")

    def startup(self):
        n = self.args.starts
        self.section(f"start to the first answered initialize ({n} starts each)")
        kinds = {
            "server package (bin/nix-sandbox-mcp script)": [self.server_bin, "--stdio"],
            "launcher binary, same manifest": [self.launcher_bin, "--stdio", "--manifest", str(self.manifest_path)],
        }
        stats = {}
        for name, argv in kinds.items():
            samples = []
            for _ in range(n + 1):
                t0 = time.perf_counter()
                client = Client(argv, self.env)
                try:
                    client.initialize()
                    samples.append(time.perf_counter() - t0)
                finally:
                    client.close()
            stats[name] = summary(samples[1:])  # the first start warms the page cache
        self.lines(self.stat_rows(stats))
        self.results["startup"] = stats
        for name, label in zip(kinds, ["server package", "launcher binary"]):
            p50 = stats[name]["p50"]
            self.row(f"start to first initialize, {label}, p50", ms(p50), f"< {TARGET_START_MS:.0f} ms", p50 < TARGET_START_MS)


# The dev shell step's test project: the stand-in package set's mkShell with
# gcc and a variable that changes with each cold round.
DEVSHELL_FLAKE = """{
  inputs.nixpkgs.url = "path:@HOSTPKGS@";
  outputs =
    { self, nixpkgs }:
    let
      pkgs = nixpkgs.legacyPackages.x86_64-linux;
    in
    {
      devShells.x86_64-linux.default = pkgs.mkShell {
        packages = [ pkgs.gcc ];
        BENCH_NONCE = "@NONCE@";
      };
    };
}
"""


def note_steal(rows, steal):
    """Marks the verdicts on time of `rows` (a step's summary rows: a
    target in ms, or a ratio) reached while the hypervisor took `steal` of
    the CPUs' time, from STEAL_NOTED up; memory and tokens are left be."""
    if steal is None or steal < STEAL_NOTED:
        return
    for row in rows:
        timed = " ms" in row[2] or row[2].endswith("x")
        if row[3] != "-" and timed:
            row[3] += f" (steal {steal:.0%})"


def each_p99(stats):
    """The p99 of each load pooled in `stats` (Bench.async_load), said in
    brackets; nothing for one load."""
    if len(stats["each_p99"]) < 2:
        return ""
    return " (each load's p99: " + " / ".join(f"{p:.1f}" for p in stats["each_p99"]) + " ms)"


def ratio_of(a, b, key):
    """a[key] / b[key] of two summaries, as `1.23x`."""
    return f"{a[key] / b[key]:.2f}x"


def machine():
    model = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = next((l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Model name")), "")
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({model or platform.processor()}), Linux {platform.release()}"


def parser():
    """bench.py's options (bench/vm.py checks what it passes on with them)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True)
    parser.add_argument("--launcher", required=True)
    parser.add_argument("--built-from", default="?", help="which source the server was built from")
    parser.add_argument("--fixtures", help="launcher/tests/fixtures (without it: no fixture figures)")
    parser.add_argument("--tokens", help="bench/tokens.mjs (without it: tokens not counted)")
    parser.add_argument("--context", help="where this runs, said in the header and the summary")
    parser.add_argument("--node", default="/usr/bin/node")
    parser.add_argument("--work", required=True, help="where results.json and surface.txt go")
    parser.add_argument("--runs", type=int, default=200, help="ephemeral runs of each kind")
    parser.add_argument("--fixture-runs", type=int, default=100)
    parser.add_argument("--gap", type=float, default=0.03, help="seconds between two timed ephemeral runs")
    parser.add_argument("--warmup", type=int, default=WARMUP, help="untimed rounds before the timed ephemeral runs")
    parser.add_argument("--warm-call", action="store_true",
                        help="an untimed print(1) on each server before its figures (bench/vm.py: under emulation "
                             "a start-up probe can time out; the call is made again then, and said)")
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--session-calls", type=int, default=2000, help="timed `x += 1` calls in one session")
    parser.add_argument("--spaced-calls", type=int, default=20,
                        help="then timed `x += 1` calls --spaced-gap apart, as a model makes them")
    parser.add_argument("--spaced-gap", type=float, default=0.1, help="seconds before each spaced call")
    parser.add_argument("--creations", type=int, default=10, help="sessions created one after another")
    parser.add_argument("--sessions", type=int, default=32, help="sessions at once")
    parser.add_argument("--calls", type=int, default=50, help="calls per session at once")
    parser.add_argument("--load-repeats", type=int, default=3,
                        help="loads from one asyncio client, each on a fresh server, their calls taken together")
    parser.add_argument("--create-at-once", type=int, default=0, metavar="N",
                        help="create the load's sessions N at a time (0: all at once; bench/vm.py: an emulated "
                             "CPU cannot start 32 within a call's time)")
    parser.add_argument("--start-costs", type=int, default=MIGRATIONS, metavar="N",
                        help="processes started in a fresh cgroup, each way (with run cgroups)")
    parser.add_argument("--packages-server", help="checks/flakes/packagesServers.nix's packages-server (as root only)")
    parser.add_argument("--package-runs", type=int, default=5, help="fresh servers composing python + jq")
    parser.add_argument("--relay", help="bench/relay.rs built (without it: no relay baseline for the round trips)")
    parser.add_argument("--json-floor", help="bench/floor built (without it: no JSON-RPC floor for the round trips)")
    parser.add_argument("--languages-server", help="checks/flakes/languagesServer.nix's languages-server (without it: "
                                                   "no languages step)")
    parser.add_argument("--language-runs", type=int, default=10, help="hello world runs of each kind, per language")
    parser.add_argument("--flood-seconds", type=int, default=5, help="the flooding run of the progress step")
    parser.add_argument("--fork-runs", type=int, default=10, help="forks, rollbacks and new sessions of each size")
    parser.add_argument("--devshell-hostpkgs", help="checks/hostpkgs, the stand-in package set the dev shell step's "
                                                    "flake takes (without it and --nixpkgs-lib: no devshell step)")
    parser.add_argument("--nixpkgs-lib", help="the nixpkgs lib in the store that checks/flake.lock names")
    parser.add_argument("--devshell-runs", type=int, default=5, help="cold and cached calls of env project, each")
    parser.add_argument("--only", choices=["ephemeral", "warm", "cold_layers", "store_view", "fixtures", "sessions",
                                           "progress", "fork", "startup", "packages", "languages", "devshell"],
                        help="one step only")
    return parser


def main():
    args = parser().parse_args()
    # The unprivileged pass gets a fresh --work under its own home.
    Path(args.work).mkdir(parents=True, exist_ok=True)

    started = time.monotonic()
    print(f"nix-sandbox-mcp benchmark, {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC")
    print(f"machine: {machine()}; load average at start {os.getloadavg()[0]:.2f}")
    print(f"built from {args.built_from}\nserver: {args.server}\nlauncher: {args.launcher}")
    if args.context:
        print(f"context: {args.context}")
    with tempfile.TemporaryDirectory(prefix="nsm-bench-") as tmp:
        bench = Bench(args, Path(tmp))
        steps = [bench.ephemeral, bench.warm, bench.cold_layers, bench.store_view, bench.sessions, bench.progress,
                 bench.fork, bench.startup]
        if args.fixtures:
            steps.insert(1, bench.fixtures)
        if args.packages_server:
            steps.append(bench.packages)
        if args.languages_server:
            steps.append(bench.languages)
        if args.devshell_hostpkgs:
            steps.append(bench.devshell)
        if args.only:
            steps = [step for step in steps if step.__name__ == args.only]
        steals = {}
        for step in steps:
            first_row, before = len(bench.rows), cpu_times()
            try:
                step()
            except (McpError, Unmeasured, subprocess.SubprocessError, OSError) as e:
                bench.unmeasured.append(f"{step.__name__}: {e}")
                print(f"   could not measure: {e}", flush=True)
            steal = steal_share(before, cpu_times())
            steals[step.__name__] = steal
            if steal is not None:
                bench.lines([f"CPU steal during {step.__name__}: {steal:.1%} of the CPUs' time went to other guests "
                             f"of the hypervisor"])
                note_steal(bench.rows[first_row:], steal)
        bench.results["steal"] = steals
        if bench.cgroups:
            bench.cgroups.teardown()
    context = f"{args.context}, " if args.context else ""
    # Before the summary's heading: bench/vm.py reads the table after it.
    print("\nCPU steal by step: " + ", ".join(
        f"{name} {'unknown' if steal is None else f'{steal:.1%}'}" for name, steal in steals.items()))
    print(f"\n== summary ({context}{datetime.date.today()}, {machine()}, load average at end {os.getloadavg()[0]:.2f}, "
          f"{time.monotonic() - started:.0f} s)")
    for line in table(["figure", "value", "target", "verdict"], bench.rows):
        print(line)
    for line in bench.unmeasured:
        print(f"NOT MEASURED: {line}")
    (Path(args.work) / "results.json").write_text(json.dumps(
        {"date": str(datetime.date.today()), "machine": machine(), "context": args.context, "results": bench.results,
         "summary": bench.rows, "unmeasured": bench.unmeasured}, indent=2) + "\n")
    sys.exit(1 if bench.unmeasured else 0)


if __name__ == "__main__":
    main()
