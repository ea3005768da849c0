#!/usr/bin/env python3
"""Tests of the benchmark's own tools: the CPU steal it reports beside each
step, the bare relay (relay.rs) and the JSON-RPC floor (floor/) the
session round trips are compared with, and the languages step's direct
builds, its baseline (no server, no timing).

  python3 bench/test_bench.py      ends with `bench tools: N passed, N failed`
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench  # noqa: E402
import languages  # noqa: E402
import procs  # noqa: E402
from mcp_client import Client, McpError  # noqa: E402
from stats import cpu_times, steal_share  # noqa: E402


def proc_stat(directory, user, idle, steal):
    """A /proc/stat whose first line has these ticks (the others 0)."""
    path = Path(directory) / "stat"
    path.write_text(f"cpu  {user} 0 0 {idle} 0 0 0 {steal} 0 0\ncpu0 {user} 0 0 {idle} 0 0 0 {steal} 0 0\n")
    return str(path)


class ProcessCpu(unittest.TestCase):
    def test_a_processs_cpu_time_is_read_to_the_microsecond(self):
        spin = subprocess.Popen([sys.executable, "-c", "import sys, time\nend = time.process_time() + 0.2\n"
                                 "while time.process_time() < end: pass\nprint(time.process_time(), flush=True)\n"
                                 "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            own = float(spin.stdout.readline())
            seen = procs.cpu_seconds(spin.pid)
            self.assertGreaterEqual(seen, own)
            self.assertLess(seen - own, 0.01)
            self.assertNotEqual(round(seen * 100), seen * 100, "a whole number of clock ticks")
        finally:
            spin.stdin.close()
            spin.wait()
        self.assertIsNone(procs.cpu_seconds(spin.pid))


class Steal(unittest.TestCase):
    def test_the_share_of_time_stolen_between_two_readings(self):
        with tempfile.TemporaryDirectory() as d:
            before = cpu_times(proc_stat(d, user=100, idle=800, steal=100))
            after = cpu_times(proc_stat(d, user=150, idle=1020, steal=130))
        # Busy: neither idle, iowait nor stolen.
        self.assertEqual(before, {"total": 1000, "steal": 100, "busy": 100})
        # 300 ticks passed, 30 of them stolen.
        self.assertAlmostEqual(steal_share(before, after), 0.1)

    def test_no_reading_or_no_time_passed_is_unknown(self):
        with tempfile.TemporaryDirectory() as d:
            same = cpu_times(proc_stat(d, user=1, idle=1, steal=0))
            self.assertIsNone(cpu_times(str(Path(d) / "missing")))
        self.assertIsNone(steal_share(None, same))
        self.assertIsNone(steal_share(same, same))

    def test_this_machine_reports_its_cpu_time(self):
        self.assertIsNotNone(cpu_times(), "/proc/stat has no cpu line")

    def test_verdicts_of_a_step_under_steal_say_so(self):
        rows = [["round trip", "0.30 ms", "< 0.25 ms", "MISS"], ["its p99", "0.60 ms", "-", "-"],
                ["print(1)", "1.02x", "<= 1.1x", "PASS"], ["peak RSS", "7.0 MiB", "< 8.0 MiB", "PASS"],
                ["tokens", "350", "<= 350", "PASS"]]
        bench.note_steal(rows, 0.01)
        self.assertEqual(rows[0][3], "MISS")
        bench.note_steal(rows, 0.12)
        self.assertEqual([row[3] for row in rows], ["MISS (steal 12%)", "-", "PASS (steal 12%)", "PASS", "PASS"])


class Relay(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rustc = shutil.which("rustc")
        if rustc is None:
            raise AssertionError("rustc is missing: bench/run builds relay.rs with it (install Rust)")
        cls.tmp = tempfile.TemporaryDirectory()
        cls.relay = os.path.join(cls.tmp.name, "relay")
        subprocess.run([rustc, "--edition", "2024", "-O", "-o", cls.relay, str(HERE / "relay.rs")], check=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_frames_go_through_both_ways_one_at_a_time(self):
        proc = subprocess.Popen([self.relay, "cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            for frame in (b'{"op":"exec","id":1}\n', b"x" * 100_000 + b"\n"):
                proc.stdin.write(frame)
                proc.stdin.flush()
                got = b""
                while len(got) < len(frame):
                    got += proc.stdout.read1(1 << 16)
                self.assertEqual(got, frame)
            proc.stdin.close()
            # The wrapper's end of input is passed on; both end.
            self.assertEqual(proc.stdout.read(), b"")
            self.assertEqual(proc.wait(timeout=10), 0)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def test_a_wrapper_that_cannot_start_is_said(self):
        proc = subprocess.run([self.relay, "/nonexistent/wrapper"], capture_output=True, timeout=10)
        self.assertEqual(proc.returncode, 2)
        self.assertIn(b"cannot run /nonexistent/wrapper", proc.stderr)


# A session wrapper's stand-in for the floor: answers each exec frame with
# the code it was given, status 1 for code "fail".
FAKE_AGENT = """
import json, sys
for line in sys.stdin:
    frame = json.loads(line)
    status = 1 if frame["code"] == "fail" else 0
    reply = {"id": frame["id"], "status": status, "stdout": "ran " + frame["code"], "stderr": "e"}
    sys.stdout.write(json.dumps(reply) + "\\n")
    sys.stdout.flush()
"""


class Floor(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cargo = shutil.which("cargo")
        if cargo is None:
            raise AssertionError("cargo is missing: bench/run builds bench/floor with it (install Rust)")
        cls.tmp = tempfile.TemporaryDirectory()
        subprocess.run([cargo, "build", "--offline", "--quiet", "--manifest-path", str(HERE / "floor" / "Cargo.toml"),
                        "--target-dir", cls.tmp.name], check=True)
        cls.floor = os.path.join(cls.tmp.name, "debug", "json-floor")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_calls_are_answered_as_mcp_from_the_agents_replies(self):
        client = Client([self.floor, sys.executable, "-c", FAKE_AGENT], dict(os.environ), lean=True)
        try:
            client.initialize()
            self.assertEqual(client.init_result["protocolVersion"], "2025-06-18")
            result, text = client.run("x = 1", env="python", session="s")
            self.assertEqual(text, "ran x = 1")
            self.assertFalse(result["isError"])
            self.assertEqual(result["_meta"]["json-floor/result"], {"id": 1, "status": 0})
            result, text = client.run("fail")
            self.assertTrue(result["isError"])
            self.assertEqual(result["_meta"]["json-floor/result"]["id"], 2)
            with self.assertRaisesRegex(McpError, "method not found"):
                client.request("tools/list", {})
        finally:
            client.close()
        self.assertEqual(client.proc.returncode, 0)

    def test_a_wrapper_that_cannot_start_is_said(self):
        proc = subprocess.run([self.floor, "/nonexistent/wrapper"], capture_output=True, timeout=10)
        self.assertEqual(proc.returncode, 2)
        self.assertIn(b"cannot run /nonexistent/wrapper", proc.stderr)

    def test_a_wrapper_that_closes_is_said(self):
        # It takes the frame, then exits unanswered: the floor's write goes
        # through whenever the wrapper starts, and its read meets the end.
        client = Client([self.floor, "sh", "-c", "read -r frame"], dict(os.environ), lean=True)
        try:
            client.initialize()
            with self.assertRaisesRegex(McpError, "closed stdout"):
                client.run("x")
        finally:
            client.close()
        self.assertEqual(client.proc.returncode, 1)
        # The stderr reader thread may still be handing over the last line.
        for _ in range(50):
            if "the wrapper closed its output" in client.stderr_tail():
                break
            time.sleep(0.1)
        self.assertIn("the wrapper closed its output", client.stderr_tail())


class DirectBuilds(unittest.TestCase):
    """languages.py's `compiler direct` kinds: each language's hello built
    by this machine's toolchain with the preset's flags, and run."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.env = {"HOME": self.tmp.name, "PATH": "/usr/bin:/bin"}

    def tearDown(self):
        self.tmp.cleanup()

    def test_every_language_builds_and_prints_its_hello(self):
        missing = languages.toolchain_missing(languages.LANGUAGES)
        self.assertIsNone(missing, "bench/run's languages step needs the Debian toolchains (.ci/run installs them)")
        for lang, spec in languages.LANGUAGES.items():
            with self.subTest(lang):
                languages.fresh(lang, self.tmp.name, self.env, 1024)(spec["hello"].format(n=7), "hello 7\n")
                self.assertEqual(os.listdir(self.tmp.name), [], "a fresh build's directory is left")

    def test_a_kept_directory_keeps_the_languages_cache(self):
        kept = Path(self.tmp.name) / "kept"
        kept.mkdir()
        build = languages.Direct("go", kept, self.env, 1024)
        for n in (1, 2):
            build(languages.LANGUAGES["go"]["hello"].format(n=n), f"hello {n}\n")
        self.assertTrue(any((kept / "cache/go-build").iterdir()), "GOCACHE is empty after two builds")

    def test_the_jvm_gets_the_jails_options_and_javac_through_j(self):
        build = languages.Direct("java", self.tmp.name, self.env, 512)
        javac = build.argv(languages.LANGUAGES["java"]["build"][0])
        java = build.argv(languages.LANGUAGES["java"]["run"])
        self.assertIn("-J-XX:MaxRAM=512m", javac)
        self.assertIn("-XX:MaxRAM=512m", java)
        self.assertNotIn("JVM", javac + java)

    def test_a_failed_build_or_a_wrong_output_is_said(self):
        with self.assertRaisesRegex(McpError, "exited 1"):
            languages.fresh("c", self.tmp.name, self.env, 1024)("int main(void) { return nope; }\n", "")
        with self.assertRaisesRegex(McpError, "printed b'hello 1"):
            languages.fresh("c", self.tmp.name, self.env, 1024)(
                languages.LANGUAGES["c"]["hello"].format(n=1), "hello 2\n")


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=1).result
    failed = len(result.failures) + len(result.errors)
    print(f"bench tools: {result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
