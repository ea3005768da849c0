"""The benchmark's languages step: hello world in each compiled language
preset (go, rust, java, c, cpp) through the server, beside the same
compiler run directly on this machine, in the same run (bench.py calls
`measure`; standard library only).

Kinds, per language, taking turns run by run (the order rotating):

- `compiler direct`: the language's build (the flags of lib/languages/)
  by the machine's own toolchain in /usr/bin (the Debian packages the
  harness's stand-in copies into the store), in a fresh directory with an
  empty cache, then the program: what an ephemeral run does, unjailed;
- `wrapper direct`: the environment's run wrapper run directly, the
  source on stdin (a fresh jail, an empty cache);
- `MCP, no session`: the same through the server;
- `MCP session, same source`: a session's call whose source it built
  before (the program is taken from its cache, not built again);
- `MCP session, changed source`: a session's call with a source new to it
  (one number changed), built with the language's own cache warm (Go's
  GOCACHE, rustc's incremental directory);
- `compiler direct, changed source`: the same unjailed, one directory and
  its cache kept across the runs.
"""

import itertools
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from mcp_client import McpError
from stats import ms, summary, table

DEADLINE = 300  # seconds; a guard against hangs of a direct build

# Each language: its file, hello world with `{n}` where a run puts a number
# (the greeting's end), the build and run of lib/languages/ by the
# machine's toolchain (argv lists; SRC, OUT and CACHE replaced).
LANGUAGES = {
    "go": {
        "file": "main.go",
        "hello": 'package main\nimport "fmt"\nfunc main() {{ fmt.Println("hello {n}") }}\n',
        "env": lambda cache: {"GOCACHE": f"{cache}/go-build", "GOPATH": f"{cache}/go", "CGO_ENABLED": "0",
                              "GOPROXY": "off", "GOTOOLCHAIN": "local"},
        "build": [["/usr/bin/go", "build", "-o", "OUT/main", "SRC"]],
        "run": ["OUT/main"],
    },
    "rust": {
        "file": "main.rs",
        "hello": 'fn main() {{ println!("hello {n}"); }}\n',
        "build": [["/usr/bin/rustc", "--edition", "2021", "-C", "incremental=CACHE/rust-incremental", "-o", "OUT/main",
                   "SRC"]],
        "run": ["OUT/main"],
    },
    "java": {
        "file": "Hello.java",
        "hello": 'public class Hello {{ public static void main(String[] a) {{ System.out.println("hello {n}"); }} }}\n',
        "build": [["/usr/bin/javac", "JVM", "-J-XX:TieredStopAtLevel=1", "-d", "OUT", "SRC"]],
        "run": ["/usr/bin/java", "JVM", "-cp", "OUT", "Hello"],
    },
    "c": {
        "file": "main.c",
        "hello": '#include <stdio.h>\nint main(void) {{ puts("hello {n}"); return 0; }}\n',
        "build": [["/usr/bin/gcc", "-std=c17", "-O2", "-Wall", "-o", "OUT/main", "SRC", "-lm"]],
        "run": ["OUT/main"],
    },
    "cpp": {
        "file": "main.cpp",
        "hello": '#include <iostream>\nint main() {{ std::cout << "hello {n}" << std::endl; }}\n',
        "build": [["/usr/bin/g++", "-std=c++20", "-O2", "-Wall", "-o", "OUT/main", "SRC"]],
        "run": ["OUT/main"],
    },
}

KINDS = ["compiler direct", "wrapper direct", "MCP, no session", "MCP session, same source",
         "MCP session, changed source", "compiler direct, changed source"]


def jvm_options(memory_mb):
    """The JVM options every jail gives (lib/jail/runtimeLimits.nix), which
    the java preset passes on the command line."""
    return [f"-XX:MaxRAM={memory_mb}m", "-XX:MaxRAMPercentage=75", "-XX:+UseSerialGC", "-XX:CICompilerCount=2"]


class Direct:
    """The language's build and run by the machine's toolchain, unjailed,
    in `directory` (its cache kept there across calls)."""

    def __init__(self, lang, directory, env, memory_mb):
        self.spec = LANGUAGES[lang]
        self.dir = Path(directory)
        self.env = {**env, **self.spec.get("env", lambda _: {})(self.dir / "cache")}
        self.jvm = jvm_options(memory_mb)

    def argv(self, template):
        out = []
        for word in template:
            if word == "JVM":
                # javac takes the JVM's options through -J.
                out += [f"-J{o}" for o in self.jvm] if template[0].endswith("javac") else self.jvm
                continue
            out.append(word.replace("SRC", self.spec["file"]).replace("OUT", str(self.dir / "out"))
                       .replace("CACHE", str(self.dir / "cache")))
        return out

    def __call__(self, code, want):
        work, out = self.dir / "work", self.dir / "out"
        for d in (work, out):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
        (self.dir / "cache").mkdir(exist_ok=True)
        (work / self.spec["file"]).write_text(code)
        for step in self.spec["build"]:
            proc = subprocess.run(self.argv(step), cwd=work, env=self.env, capture_output=True, timeout=DEADLINE)
            if proc.returncode != 0:
                raise McpError(f"{step[0]} directly exited {proc.returncode}: {proc.stderr[-400:]!r}")
        proc = subprocess.run(self.argv(self.spec["run"]), cwd=work, env=self.env, capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=DEADLINE)
        if proc.stdout.decode() != want:
            raise McpError(f"the program built directly printed {proc.stdout[-200:]!r}, {proc.stderr[-300:]!r}")


def fresh(lang, scratch, env, memory_mb):
    """A build in a new directory each call (an empty cache), removed after."""
    def call(code, want):
        directory = tempfile.mkdtemp(dir=scratch, prefix=f"{lang}-")
        try:
            Direct(lang, directory, env, memory_mb)(code, want)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    return call


def wrapper(argv, env):
    def call(code, want):
        proc = subprocess.run(argv, input=code.encode(), capture_output=True, env=env, timeout=DEADLINE)
        if proc.returncode != 0 or proc.stdout.decode() != want:
            raise McpError(f"{argv[0]} gave exit {proc.returncode}, {proc.stdout[-200:]!r}, {proc.stderr[-400:]!r}")
    return call


def through(client, lang, session=None):
    def call(code, want):
        result, text = client.run(code, env=lang, session=session)
        # A result's text is the output, then the launcher's notes.
        if result.get("isError") or not text.startswith(want):
            raise McpError(f"{lang} through MCP{' in a session' if session else ''} gave {text[-400:]!r}")
    return call


def measure(client, manifest, scratch, env, runs, warmup):
    """Times every kind of every language in the manifest `runs` times
    after `warmup` rounds, the direct builds and the wrapper given `env`;
    (per language: kind -> summary, the summary's rows, the printed
    lines)."""
    results, rows, lines = {}, [], []
    for lang in [name for name in LANGUAGES if name in manifest]:
        entry = manifest[lang]
        memory_mb = entry["limits"]["memory_mb"]
        kept = Path(scratch) / f"{lang}-kept"
        kept.mkdir()
        counter = itertools.count(1)
        same = LANGUAGES[lang]["hello"].format(n=0)
        calls = {
            "compiler direct": fresh(lang, scratch, env, memory_mb),
            "wrapper direct": wrapper(entry["run"], env),
            "MCP, no session": through(client, lang),
            "MCP session, same source": through(client, lang, f"bench-{lang}-same"),
            "MCP session, changed source": through(client, lang, f"bench-{lang}-changed"),
            "compiler direct, changed source": Direct(lang, kept, env, memory_mb),
        }
        samples = {kind: [] for kind in KINDS}
        # The sessions' first builds, untimed: what follows is a session's
        # later call, with the program or the language's cache there.
        calls["MCP session, same source"](same, "hello 0\n")
        calls["MCP session, changed source"](LANGUAGES[lang]["hello"].format(n=0), "hello 0\n")
        calls["compiler direct, changed source"](LANGUAGES[lang]["hello"].format(n=0), "hello 0\n")
        for i in range(warmup + runs):
            shift = i % len(KINDS)
            for kind in KINDS[shift:] + KINDS[:shift]:
                n = 0 if kind == "MCP session, same source" else next(counter)
                code = LANGUAGES[lang]["hello"].format(n=n)
                t0 = time.perf_counter()
                calls[kind](code, f"hello {n}\n")
                elapsed = time.perf_counter() - t0
                if i >= warmup:
                    samples[kind].append(elapsed)
        stats = {kind: summary(s) for kind, s in samples.items()}
        results[lang] = stats
        base = stats["compiler direct"]["p50"]
        lines.append(f"{lang} ({', '.join(entry.get('packages', [])[:1]) or lang}):")
        lines += ["  " + line for line in table(
            ["what", "min", "p50", "p90", "mean", "n", "vs compiler direct p50"],
            [[kind, ms(s["min"]), ms(s["p50"]), ms(s["p90"]), ms(s["mean"]), s["n"], f"{s['p50'] / base:.2f}x"]
             for kind, s in stats.items()])]
        mcp, wrapped = stats["MCP, no session"]["p50"], stats["wrapper direct"]["p50"]
        same_p50 = stats["MCP session, same source"]["p50"]
        changed, changed_direct = stats["MCP session, changed source"]["p50"], \
            stats["compiler direct, changed source"]["p50"]
        rows.append([f"{lang} hello: MCP, no session / compiler direct, p50",
                     f"{mcp / base:.2f}x ({ms(mcp)} / {ms(base)}); wrapper direct {wrapped / base:.2f}x"])
        rows.append([f"{lang} hello in a session: same source / changed source, p50, vs compiler direct",
                     f"{same_p50 / base:.2f}x / {changed / base:.2f}x ({ms(same_p50)} / {ms(changed)}); "
                     f"changed source direct {changed_direct / base:.2f}x"])
    return results, rows, lines


def toolchain_missing(manifest):
    """The first of the direct builds' programs this machine lacks, or None."""
    for lang, spec in LANGUAGES.items():
        if lang in manifest:
            for program in [step[0] for step in spec["build"]] + [spec["run"][0]]:
                if program.startswith("/") and not os.access(program, os.X_OK):
                    return program
    return None
