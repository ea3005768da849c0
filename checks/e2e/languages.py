#!/usr/bin/env python3
"""Compiled languages end to end: the optional presets through the Nix-built server.

Run by checks/run (as root, then as an unprivileged user) next to e2e.py,
whose MCP client and test runner it uses, and by the VM test inside its
guest on cgroup v2 (checks/vm/tests/languages.py, as root and as a user
under her systemd manager). Prints one line per test, `ok - LABEL:
languages: name`, `FAIL - ...: reason`, and `info - LABEL: ...` lines of
facts (where the server found its runs' limits, how each allocation past
the limit ended, the session's build times), and exits 1 when a test
failed.

  languages.py --label root --server OUT

OUT is checks/flakes/languagesServer.nix's `languages-server`: mkServer with
`presets = [ "go" "rust" "java" "c" "cpp" "network-tools" ]` (in the VM,
checks/vm/configurations.nix's `languages`, the same through the
home-manager module, with longer limits for an emulated CPU: the limits
the tests expect are read from OUT's manifest). The server gets
XDG_RUNTIME_DIR and DBUS_SESSION_BUS_ADDRESS when this script has them, so
that under a user's systemd manager it asks her manager for its runs'
cgroups, as under a desktop client. For each
language, through `run` as the model calls it: hello world; a compile error
(the compiler's message and its exit code); a runtime panic or exception; a
program allocating past `memory_mb` (the runtime's own out-of-memory
message, then the server's note naming the memory limit); a program that
never ends (the timeout, the process tree killed; all languages at once);
and in a session, a second build that reuses the first's cache: the
unchanged source's program is not built again (its file's mtime stays) and
the language's own cache (GOCACHE, rustc's incremental directory) is kept.
Then network-tools: its tools run, and its jail has loopback only.
"""

import argparse
import os
import re
import sys
import tempfile
import time

from e2e import Suite, check, manifest_of, usage_left_out
from sessions import Server, unpack

CACHE = "/tmp/build-cache"

# Per language: hello, a compile error and what the compiler says, a
# runtime failure and what it says, an allocation past the limit and the
# runtime's own words, a program that never ends, and a program listing
# the build cache: one line `out NAME MTIME_NS` per built program (MTIME of
# its `main`, or Java's `.main-class`), then `own N` (entries of the
# language's own cache, -1 without one).
LANGUAGES = {
    "go": {
        "hello": 'package main\nimport "fmt"\nfunc main() { fmt.Println("hello from go") }\n',
        "broken": 'package main\nfunc main() { nope() }\n',
        "broken_says": "undefined: nope",
        "panic": 'package main\nfunc main() { panic("boom") }\n',
        "panic_says": "panic: boom",
        "oom": ('package main\nimport "fmt"\nfunc main() {\n var keep [][]byte\n'
                ' for { b := make([]byte, 64<<20); for i := range b { b[i] = 1 }; keep = append(keep, b)'
                '; fmt.Println(len(keep)) }\n}\n'),
        "oom_says": "out of memory",
        "forever": 'package main\nimport "time"\nfunc main() { for { time.Sleep(time.Second) } }\n',
        "lister": ('package main\nimport ("fmt"; "os")\nfunc main() {\n'
                   ' es, _ := os.ReadDir("' + CACHE + '/out")\n'
                   ' for _, e := range es { if st, err := os.Stat("' + CACHE + '/out/" + e.Name() + "/main"); err == nil {'
                   ' fmt.Println("out", e.Name(), st.ModTime().UnixNano()) } }\n'
                   ' own, err := os.ReadDir("' + CACHE + '/go-build"); n := len(own); if err != nil { n = -1 }\n'
                   ' fmt.Println("own", n)\n}\n'),
    },
    "rust": {
        "hello": 'fn main() { println!("hello from rust"); }\n',
        "broken": 'fn main() { nope(); }\n',
        "broken_says": "cannot find function `nope`",
        "panic": 'fn main() { panic!("boom"); }\n',
        "panic_says": "panicked",
        "oom": ('fn main() { let mut keep: Vec<Vec<u8>> = Vec::new();'
                ' loop { keep.push(vec![1u8; 64 << 20]); println!("{}", keep.len()); } }\n'),
        "oom_says": "memory allocation of",
        "forever": 'fn main() { loop { std::thread::sleep(std::time::Duration::from_secs(1)); } }\n',
        "lister": ('use std::fs; use std::time::UNIX_EPOCH;\nfn main() {\n'
                   ' for e in fs::read_dir("' + CACHE + '/out").unwrap() { let e = e.unwrap();'
                   ' if let Ok(m) = fs::metadata(e.path().join("main")) {'
                   ' println!("out {} {}", e.file_name().to_string_lossy(),'
                   ' m.modified().unwrap().duration_since(UNIX_EPOCH).unwrap().as_nanos()); } }\n'
                   ' let n = fs::read_dir("' + CACHE + '/rust-incremental").map(|d| d.count() as i64).unwrap_or(-1);\n'
                   ' println!("own {}", n);\n}\n'),
    },
    "java": {
        "hello": 'public class Hello { public static void main(String[] a) { System.out.println("hello from java"); } }\n',
        "broken": 'public class Broken { public static void main(String[] a) { nope(); } }\n',
        "broken_says": "cannot find symbol",
        "panic": 'public class Boom { public static void main(String[] a) { throw new IllegalStateException("boom"); } }\n',
        "panic_says": 'Exception in thread "main" java.lang.IllegalStateException: boom',
        "oom": ('import java.util.*;\npublic class Hog { public static void main(String[] a) {'
                ' List<long[]> keep = new ArrayList<>(); while (true) { keep.add(new long[8 << 20]);'
                ' System.out.println(keep.size()); } } }\n'),
        "oom_says": "java.lang.OutOfMemoryError",
        "forever": 'public class Forever { public static void main(String[] a) throws Exception { while (true) Thread.sleep(1000); } }\n',
        "lister": ('import java.io.File;\npublic class Lister { public static void main(String[] a) {\n'
                   ' for (File d : new File("' + CACHE + '/out").listFiles()) { File m = new File(d, ".main-class");'
                   ' if (m.exists()) System.out.println("out " + d.getName() + " " + m.lastModified() * 1000000L); }\n'
                   ' System.out.println("own -1"); } }\n'),
    },
    "c": {
        "hello": '#include <stdio.h>\nint main(void) { puts("hello from c"); return 0; }\n',
        "broken": 'int main(void) { return nope; }\n',
        "broken_says": "undeclared",
        "panic": ('#include <stdio.h>\n#include <stdlib.h>\n'
                  'int main(void) { fprintf(stderr, "boom\\n"); abort(); }\n'),
        "panic_says": "boom",
        "oom": ('#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n'
                'int main(void) { for (int i = 1;; i++) { char *p = malloc(64 << 20);'
                ' if (!p) { perror("malloc"); return 1; } memset(p, 1, 64 << 20); printf("%d\\n", i); } }\n'),
        "oom_says": "Cannot allocate memory",
        "forever": '#include <unistd.h>\nint main(void) { for (;;) sleep(1); }\n',
        "lister": ('#define _POSIX_C_SOURCE 200809L\n#include <dirent.h>\n#include <stdio.h>\n#include <sys/stat.h>\n'
                   'int main(void) { DIR *d = opendir("' + CACHE + '/out"); struct dirent *e; char p[4096]; struct stat st;\n'
                   ' while ((e = readdir(d))) { snprintf(p, sizeof p, "' + CACHE + '/out/%s/main", e->d_name);'
                   ' if (stat(p, &st) == 0) printf("out %s %lld\\n", e->d_name,'
                   ' (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec); }\n'
                   ' puts("own -1"); return 0; }\n'),
    },
    "cpp": {
        "hello": '#include <iostream>\nint main() { std::cout << "hello from cpp" << std::endl; }\n',
        "broken": 'int main() { return nope; }\n',
        "broken_says": "was not declared",
        "panic": '#include <stdexcept>\nint main() { throw std::runtime_error("boom"); }\n',
        "panic_says": "what():  boom",
        "oom": ('#include <cstring>\n#include <iostream>\n#include <vector>\n'
                'int main() { std::vector<char*> keep; for (;;) { char *p = new char[64 << 20];'
                ' std::memset(p, 1, 64 << 20); keep.push_back(p); std::cout << keep.size() << std::endl; } }\n'),
        "oom_says": "std::bad_alloc",
        "forever": '#include <unistd.h>\nint main() { for (;;) sleep(1); }\n',
        "lister": ('#include <chrono>\n#include <filesystem>\n#include <iostream>\nnamespace fs = std::filesystem;\n'
                   'int main() { for (auto &d : fs::directory_iterator("' + CACHE + '/out")) {'
                   ' auto m = d.path() / "main"; if (fs::exists(m)) std::cout << "out " << d.path().filename().string()'
                   ' << " " << std::chrono::duration_cast<std::chrono::nanoseconds>(fs::last_write_time(m)'
                   '.time_since_epoch()).count() << "\\n"; }\n std::cout << "own -1\\n"; }\n'),
    },
}


class LanguagesServer(Server):
    """The server, with the label its info lines carry and the limits of
    its environments (name -> limits, from its manifest)."""

    def __init__(self, args, scratch, env):
        super().__init__(args, scratch, env=env)
        self.label = f"{args.label}: languages"
        self.limits = {name: entry["limits"] for name, entry in manifest_of(args.server)["environments"].items()}

    def call(self, env, session, code):
        """Runs code in a session: (result, text, facts)."""
        return self.reprobed(env, lambda: Server.call(self, env, session, code))

    def reprobed(self, env, call):
        """call() -> (result, text, facts), made once more when the
        environment's start-up probe timed out. The server probes every
        environment at once when it starts; on the VM test's emulated CPUs
        one of six can miss the probe's 10 s, and the server then answers
        that environment's next call `sandbox_unavailable` once and probes
        it again at the call after (launcher/src/probe.rs, as
        checks/vm/guest/vmlib.py's reprobed). Said in an info line, never
        silent."""
        answer = call()
        text = answer[1]
        if answer[0].get("isError") and "sandbox_unavailable" in text and "did not finish within" in text:
            info(self.label, f"{env}: the start-up probe timed out; called again: {text.strip()}")
            answer = call()
        return answer


def run(server, env, code):
    """Runs code without a session: (result, text, facts)."""
    return server.reprobed(env, lambda: unpack(server.client.request(
        "tools/call", {"name": "run", "arguments": {"env": env, "code": code}})))


def runs_at_once(server, calls):
    """Sends every (env, code) as a run without a session before reading any
    answer; the answers in that order."""
    ids = []
    for env, code in calls:
        server.next_id += 1
        ids.append(server.next_id)
        server.client.send({"jsonrpc": "2.0", "id": server.next_id, "method": "tools/call",
                            "params": {"name": "run", "arguments": {"env": env, "code": code}}})
    return server.answers(ids)


def limit_of(facts):
    return (facts.get("limit") or {}).get("name")


def info(label, text):
    """A fact found (not a pass or a failure), said on its own line."""
    print(f"info - {label}: {text}", flush=True)


def t_hello(server, lang):
    result, text, facts = run(server, lang, LANGUAGES[lang]["hello"])
    check(not result.get("isError") and text.strip() == f"hello from {lang}", f"hello: {text[-400:]}")
    check(facts.get("exit_code") == 0, f"exit code {facts.get('exit_code')}: {text}")


def t_compile_error(server, lang):
    spec = LANGUAGES[lang]
    result, text, facts = run(server, lang, spec["broken"])
    check(result.get("isError"), f"a compile error is not an error: {result}")
    check(spec["broken_says"] in text, f"the compiler's message {spec['broken_says']!r} is not in: {text}")
    check(isinstance(facts.get("exit_code"), int) and facts["exit_code"] != 0,
          f"exit code {facts.get('exit_code')}: {text}")
    check(f"exit code {facts['exit_code']}" in text, f"the result does not say the exit code: {text}")


def t_panic(server, lang):
    spec = LANGUAGES[lang]
    result, text, facts = run(server, lang, spec["panic"])
    check(result.get("isError"), f"a panic is not an error: {result}")
    check(spec["panic_says"] in text, f"{spec['panic_says']!r} is not in: {text}")


def t_out_of_memory(server, lang):
    spec = LANGUAGES[lang]
    result, text, facts = run(server, lang, spec["oom"])
    check(result.get("isError"), f"an allocation past the limit did not fail: {text[-400:]}")
    # Which way it ended: the run's cgroup's kill is a kernel fact (certain);
    # the runtime's own error at its RLIMIT_DATA is the note's reading of it.
    how = ("killed by the run's cgroup" if (facts.get("limit") or {}).get("certain")
           else "the runtime's own error (RLIMIT_DATA), no cgroup kill")
    peak = facts.get("peak_memory_bytes")
    ending = " | ".join(text.strip().splitlines()[-3:])
    info(server.label, f"{lang}: past the memory limit: {how}; exit {facts.get('exit_code')}, "
                       f"signal {facts.get('signal')}, the run's peak "
                       f"{'not measured (no cgroup)' if peak is None else f'{peak / 2**20:.0f} MiB'}; "
                       f"the result ends: {ending}")
    # The runtime's own words come first, the server's note after them.
    own = text.find(spec["oom_says"])
    note = text.find(f"memory limit ({server.limits[lang]['memory_mb']} MiB)")
    check(own >= 0, f"the runtime's own message {spec['oom_says']!r} is not in: {text[-600:]}")
    check(note > own, f"no note naming the memory limit after it: {text[-600:]}")
    check(limit_of(facts) == "memory", f"the facts name limit {facts.get('limit')}: {text[-300:]}")


def t_timeouts(server):
    """Every language's endless program at once: each timed out, its tree killed."""
    calls = [(lang, spec["forever"]) for lang, spec in LANGUAGES.items()]
    answers = runs_at_once(server, calls)
    for (lang, _), (result, text, _) in zip(calls, answers):
        timeout = server.limits[lang]["timeout_s"]
        check(result.get("isError") and f"timed out after {timeout} s; the process tree was killed" in text,
              f"{lang}: {text[-300:]}")


LISTED = re.compile(r"^out ([0-9a-f]{64}) (-?\d+)$", re.M)


def listing(server, lang, session):
    result, text, _ = server.call(lang, session, LANGUAGES[lang]["lister"])
    check(not result.get("isError"), f"the lister failed: {text[-400:]}")
    own = re.search(r"^own (-?\d+)$", text, re.M)
    check(own, f"no `own` line: {text}")
    return dict(LISTED.findall(text)), int(own.group(1))


def t_session_cache(server, lang):
    session = f"cache-{lang}"
    hello = LANGUAGES[lang]["hello"]
    started = time.monotonic()
    result, text, _ = server.call(lang, session, hello)
    built_in = time.monotonic() - started
    check(not result.get("isError") and text.startswith(f"hello from {lang}"), f"first build: {text[-300:]}")
    first, own = listing(server, lang, session)
    check(len(first) == 2, f"wanted the hello's and the lister's programs in the cache, got {first}")
    if lang in ("go", "rust"):
        check(own > 0, f"the language's own cache is empty after two builds ({own})")
    # The same source again: its program is reused, not built again.
    started = time.monotonic()
    result, text, _ = server.call(lang, session, hello)
    reused_in = time.monotonic() - started
    check(not result.get("isError") and text.startswith(f"hello from {lang}"), f"second run: {text[-300:]}")
    second, _ = listing(server, lang, session)
    check(second == first, f"the cache changed: the unchanged source was built again: {first} -> {second}")
    # Said, not judged: times are the benchmark's (bench/run) to compare.
    info(server.label, f"{lang}: hello in a session, the first call {built_in:.2f} s (built), "
                       f"the same source again {reused_in:.2f} s (the cached program)")


C_OUTPUTS = ('#include <stdio.h>\n#include <sys/stat.h>\nint main(void) {\n  mkdir("outputs", 0755);\n'
             '  FILE *f = fopen("outputs/from-c.txt", "w");\n  fputs("c\\n", f);\n  fclose(f);\n'
             '  puts("wrote");\n  return 0;\n}\n')


def t_plain_run_outputs(server):
    """A plain run of a program environment whose source names its outputs
    gets a jail of the agent's (here, with the pool off, one started for
    it), and its outputs come back as a python or node run's do: listed, as
    no session keeps them to link."""
    result, text, facts = run(server, "c", C_OUTPUTS)
    check(not result.get("isError") and text.startswith("wrote\n"), f"{text[-400:]}")
    paths = [o["path"] for o in facts.get("outputs", [])]
    check(paths == ["from-c.txt"] and "- from-c.txt (text/plain, 2 B)" in text, f"outputs {paths}: {text[-300:]}")


def t_warm_reads_cold(args, scratch, manager):
    """A plain run of a program environment served by a warm jail (on a
    server of its own with the pool on; the suite's server has it off)
    reads as one the run wrapper served: a compile error's message and
    exit code, and a crash. Runs sent at once past what the pool holds (at
    most 4 warm jails) find none ready: the run wrapper serves them; later
    ones, one at a time, find the refill."""
    with LanguagesServer(args, scratch, {**manager, "NIX_SANDBOX_WARM_JAILS": "4"}) as server:
        compare_warm_and_cold(server)


def compare_warm_and_cold(server):
    for key in ("broken", "panic"):
        source = LANGUAGES["c"][key]
        seen = {}
        for result, text, facts in runs_at_once(server, [("c", source)] * 6):
            seen.setdefault(bool(facts.get("warm")), (result, text, facts))
        for _ in range(40):
            if True in seen:
                break
            result, text, facts = run(server, "c", source)
            if facts.get("warm"):
                seen[True] = (result, text, facts)
            time.sleep(0.25)
        check(set(seen) == {True, False}, f"{key}: served warm {sorted(seen)}")
        (h_result, h_text, h_facts), (c_result, c_text, c_facts) = seen[True], seen[False]
        h_text, c_text = usage_left_out(h_text), usage_left_out(c_text)
        check(h_text == c_text, f"{key}: warm {h_text[-400:]!r}, cold {c_text[-400:]!r}")
        check(bool(h_result.get("isError")) == bool(c_result.get("isError")), f"{key}: isError differs")
        for fact in ("exit_code", "signal", "timed_out"):
            check(h_facts.get(fact) == c_facts.get(fact), f"{key}: {fact} {h_facts.get(fact)} / {c_facts.get(fact)}")


def t_network_tools(server):
    code = ("curl --version | head -n 1; dig -v 2>&1 | head -n 1; nc -h 2>&1 | head -n 1; "
            "openssl version; ip -o link | cut -d: -f2 | tr -d ' '")
    result, text, _ = run(server, "network-tools", code)
    check(not result.get("isError"), f"{text}")
    lines = text.strip().splitlines()
    check(lines[0].startswith("curl "), f"curl: {text}")
    check(lines[1].startswith("DiG "), f"dig: {text}")
    check(lines[3].startswith("OpenSSL "), f"openssl: {text}")
    check(lines[-1] == "lo", f"interfaces besides loopback: {text}")
    check("HTTPS_PROXY" in run(server, "network-tools", "env")[1], "the egress proxy is not set")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True)
    parser.add_argument("--label", required=True)
    args = parser.parse_args()
    suite = Suite(f"{args.label}: languages")
    # A user's systemd manager, when this runs under one: the server asks it
    # for a delegated scope (its runs' cgroups).
    manager = {k: os.environ[k] for k in ("XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS") if k in os.environ}
    with tempfile.TemporaryDirectory(prefix="nsm-languages-") as scratch:
        # The server's PROJECT_DIR is in it, which a root server's jails enter.
        os.chmod(scratch, 0o755)
        with LanguagesServer(args, scratch, manager) as server:
            for lang in LANGUAGES:
                suite.test(f"{lang}: hello world", t_hello, server, lang)
                suite.test(f"{lang}: a compile error is the result, with the compiler's exit code",
                           t_compile_error, server, lang)
                suite.test(f"{lang}: a runtime panic or exception", t_panic, server, lang)
                suite.test(f"{lang}: past the memory limit, the runtime's own error, then the server's note",
                           t_out_of_memory, server, lang)
                suite.test(f"{lang}: a session's second build reuses the first's cache",
                           t_session_cache, server, lang)
            suite.test("every language's endless program times out, at once", t_timeouts, server)
            suite.test("c: a plain run's outputs come back", t_plain_run_outputs, server)
            suite.test("network-tools: its tools run, loopback only, the proxy set", t_network_tools, server)
            for line in server.client.stderr:
                if "self-test: cgroups:" in line:
                    info(server.label, "the server's " + line.split("self-test: ", 1)[1].strip())
        suite.test("c: a run served by a warm jail reads as the run wrapper's", t_warm_reads_cold, args, scratch,
                   manager)
    sys.exit(1 if suite.failed else 0)


if __name__ == "__main__":
    main()
