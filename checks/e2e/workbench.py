#!/usr/bin/env python3
"""The writable project end to end (docs/workbench.md): the Nix-built
server with NIX_SANDBOX_PROJECT_WRITABLE=1 over a test project.

Run by checks/run as root and as an unprivileged user, with e2e.py's MCP
client and test runner. Prints one line per test (`ok - LABEL: workbench:
name`, `FAIL - ...: reason`) and exits 1 when a test failed.

  workbench.py --label root --server OUT --tight-shell OUT

A server of the project's owner (the unprivileged run) serves a layer per
session: a python session fixes the project's bug in place, compiles it
(`__pycache__`) and runs its unit tests there; the result says what
changed in one line; the diff resource, applied with `patch -p1` to a copy
of the project, gives the session's sources; another session does not see
the first one's changes; an edit on the host is seen by the next call; the
host's tree is byte for byte what it was. The `tight-shell` environment
(workspace_mb 64) writing 4 x 30 MiB into /project gets `No space left on
device` at 64 MiB, none of it on the host's disk, and the session goes on.
`--check` says `project: ok (...)`. Six sessions started at once with the
warm pool on each answer from a layer of their own. A root server serves the same: its
jails' uids get the project owner's files through an idmapped mount, and
its `--check` line says so; a file of another owner stays unmodifiable.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from e2e import DEADLINE, MANIFEST, Suite, check, manifest_of
from sessions import Server

CALC = "def add(a, b):\n    return a - b\n"
# A test package, as unittest's discovery from the project's root wants.
TEST = (
    "import unittest\nfrom calc import add\n\n\n"
    "class T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
)


def snapshot(root):
    """Every path under root: its kind, mode and content (symlinks as their
    targets, never followed)."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            if path.is_symlink():
                seen[rel] = ("link", st.st_mode, os.readlink(path))
            elif path.is_dir():
                seen[rel] = ("dir", st.st_mode)
            else:
                seen[rel] = ("file", st.st_mode, path.read_bytes())
    return seen


def disk_bytes(root):
    """The bytes held on disk under root (blocks, nothing followed)."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            try:
                total += (Path(dirpath) / name).lstat().st_blocks * 512
            except OSError:
                pass
    return total


class Bench:
    """A test project, a secret beside it, and the server over it."""

    def __init__(self, args, scratch, manifests=(), env=None):
        self.dir = Path(tempfile.mkdtemp(dir=scratch, prefix="bench-"))
        os.chmod(self.dir, 0o755)
        self.project = self.dir / "proj"
        self.outside = self.dir / "outside"
        (self.project / "tests").mkdir(parents=True)
        self.outside.mkdir()
        (self.project / "calc.py").write_text(CALC)
        (self.project / "tests" / "test_calc.py").write_text(TEST)
        (self.project / "tests" / "__init__.py").write_text("")
        (self.outside / "secret").write_text("host secret\n")
        (self.project / "out").symlink_to(self.outside)
        self.env = {"PROJECT_DIR": str(self.project), "NIX_SANDBOX_PROJECT_WRITABLE": "1", **(env or {})}
        self.before = snapshot(self.project)
        self.server = Server(args, scratch, env=self.env, manifests=manifests)
        self.client = self.server.client
        self.env = {**self.env, "HOME": self.server.home, "TMPDIR": self.server.home, "PATH": "/usr/bin:/bin"}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.client.close()

    def call(self, env, session, code):
        return self.server.call(env, session, code)[1]

    def diff(self, session):
        read = self.client.request("resources/read", {"uri": f"sandbox://{session}/project.diff"})
        return read["contents"][0]["text"]

    def log(self):
        return "".join(self.client.stderr)

    def layers(self):
        """The server's layers directory, from its start-up line."""
        for line in self.log().splitlines():
            if "mount points in " in line:
                return Path(line.split("mount points in ", 1)[1].split(" ", 1)[0])
        raise AssertionError(f"no layers directory in the log: {self.log()[-800:]}")


def t_build_in_place(args, scratch):
    with Bench(args, scratch) as b:
        out = b.call("python", "w", (
            "import subprocess, sys, compileall\n"
            "p = '/project/calc.py'\n"
            "fixed = open(p).read().replace('a - b', 'a + b')\n"
            "open(p, 'w').write(fixed)\n"
            "compileall.compile_dir('/project', quiet=1)\n"
            "t = subprocess.run([sys.executable, '-m', 'unittest', 'discover', '-s', 'tests', '-t', '.'],\n"
            "                   cwd='/project', capture_output=True, text=True)\n"
            "print(t.returncode, t.stderr.strip().splitlines()[-1])\n"))
        check("0 OK" in out, f"the tests did not pass in place: {out}")
        check("project: " in out and "(diff: sandbox://w/project.diff)" in out, f"no project line: {out}")
        d = b.diff("w")
        check(d.startswith("# project: "), d[:200])
        check("-    return a - b\n+    return a + b\n" in d, f"the edit is not in the diff: {d[:800]}")
        check(" files changed, +1 -1 (diff: sandbox://w/project.diff)" in out,
              f"not calc.py's one line and the bytecode: {out}")
        check("__pycache__/calc." in d and "Binary or special files" in d, f"the bytecode is not listed: {d[:800]}")
        # The diff gives the session's sources to a copy of the project.
        copy = b.dir / "copy"
        shutil.copytree(b.project, copy, symlinks=True)
        patch = subprocess.run(["patch", "-s", "-p1", "-d", str(copy)], input=d.encode(),
                               capture_output=True, timeout=DEADLINE)
        check(patch.returncode == 0, f"patch -p1 refused the diff: {patch.stderr.decode()} {patch.stdout.decode()}")
        check((copy / "calc.py").read_text() == CALC.replace("a - b", "a + b"), "the patched copy differs")
        # Another session sees the host's tree, not w's layer; the host's
        # own edit is seen by the next call of both.
        out = b.call("shell", "v", "cat /project/calc.py; ls /project")
        check("a - b" in out and "__pycache__" not in out and "project:" not in out, out)
        (b.project / "host.txt").write_text("from the host\n")
        for env, session in (("shell", "v"), ("python", "w")):
            code = "cat /project/host.txt" if env == "shell" else "print(open('/project/host.txt').read())"
            out = b.call(env, session, code)
            check("from the host" in out, f"{session}: {out}")
        (b.project / "host.txt").unlink()
        # Out through the project's own symlink, `..` and a planted link:
        # all in the layer.
        b.call("shell", "w", "cd /project; echo x > out/secret; echo x > out/planted; "
                             "ln -s ../../../../ up; echo x > up/escaped; echo y > ../escape; true")
        check(snapshot(b.project) == b.before, "the host's project changed")
        check((b.outside / "secret").read_text() == "host secret\n" and
              sorted(os.listdir(b.outside)) == ["secret"], "outside the project changed")
        check("host secret" not in b.diff("w"), "the diff read through the project's symlink")


def t_sessions_at_once_warm(args, scratch):
    """With warm jails on, a session's jail and the pool's replacement start
    together (as root each makes a user namespace for its idmapped project
    mount); six sessions started at once all answer, each in its own layer."""
    with Bench(args, scratch, env={"NIX_SANDBOX_WARM_JAILS": "4"}) as b:
        for _ in range(3):
            names = [f"s{b.server.next_id}-{i}" for i in range(6)]
            code = "echo {0} > /project/{0}; ls /project | grep -c '^s' ; cat /project/{0}"
            answers = b.server.calls_at_once([("shell", name, code.format(name)) for name in names])
            for name, (result, text, _) in zip(names, answers):
                check(not result.get("isError") and text.startswith(f"1\n{name}\n"),
                      f"session {name}: {text[:400]} {b.log()[-800:]}")
        check(snapshot(b.project) == b.before, "the host's project changed")


def t_layer_bounded(args, scratch):
    tight = args.tight_shell
    with Bench(args, scratch, manifests=[Path(tight) / MANIFEST]) as b:
        name, entry = next(iter(manifest_of(tight)["environments"].items()))
        mb = entry["limits"]["workspace_mb"]
        out = b.call(name, "big", (
            "for i in 1 2 3 4; do head -c 30M /dev/zero > /project/big$i || break; done 2>&1; "
            "echo total $(( $(stat -c %s /project/big* | paste -sd+) ))"))
        check("No space left on device" in out, f"the writes past {mb} MiB were not stopped: {out}")
        total = int(out.split("total ", 1)[1].split()[0])
        check(total <= mb << 20, f"{total} bytes in a layer of {mb} MiB")
        held = disk_bytes(b.layers())
        check(held < 1 << 20, f"the layers hold {held} bytes of the host's disk")
        out = b.call(name, "big", "rm /project/big*; echo x > /project/small && echo written")
        check("written" in out, f"the session did not go on: {out}")
        check(snapshot(b.project) == b.before, "the host's project changed")


def t_check(args, scratch):
    with Bench(args, scratch) as b:
        checked = subprocess.run([args.server + "/bin/nix-sandbox-mcp", "--check"], env={**b.env, "RUST_LOG": "off"},
                                 capture_output=True, text=True, timeout=4 * DEADLINE)
        lines = [l for l in checked.stdout.splitlines() if l.startswith("project: ")]
        check(len(lines) == 1 and lines[0].startswith("project: ok (writable at /project through a copy-on-write")
              and lines[0].endswith("the host's tree unchanged)"), f"{checked.stdout}{checked.stderr}")
        check(snapshot(b.project) == b.before, "--check changed the host's project")


def t_root_other_owner(args, scratch):
    with Bench(args, scratch) as b:
        other = b.project / "other.txt"
        other.write_text("other's\n")
        other.chmod(0o666)
        os.chown(other, 4343, 4343)
        b.before = snapshot(b.project)
        out = b.call("shell", "w", "echo x >> /project/other.txt 2>&1 || echo refused; "
                     "echo idmapped=$(grep -c idmapped /proc/self/mountinfo)")
        check("refused" in out and "idmapped=0" in out, out)
        check(any("through a read-only idmapped mount" in l for l in b.log().splitlines()),
              f"the start does not say how: {b.log()[-1200:]}")
        check(snapshot(b.project) == b.before, "the host's project changed")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", default=os.environ.get("USER") or str(os.getuid()))
    parser.add_argument("--server", required=True)
    parser.add_argument("--tight-shell", required=True)
    args = parser.parse_args()
    suite = Suite(f"{args.label}: workbench")
    with tempfile.TemporaryDirectory(prefix="nsm-workbench-") as scratch:
        os.chmod(scratch, 0o755)
        suite.test("a session fixes, compiles and tests the project in place; the one-line summary; "
                   "the diff applies with patch -p1; sessions apart; the host's edits seen; "
                   "the host's tree unchanged", t_build_in_place, args, scratch)
        suite.test("six sessions started at once with warm jails on all answer, each in its own layer",
                   t_sessions_at_once_warm, args, scratch)
        suite.test("writes past workspace_mb into /project stop with ENOSPC, none on the host's disk",
                   t_layer_bounded, args, scratch)
        suite.test("--check writes through a layer and says `project: ok`", t_check, args, scratch)
        if os.getuid() == 0:
            suite.test("a root server's jail cannot modify another owner's file nor reach the idmapped "
                       "mount", t_root_other_owner, args, scratch)
    sys.exit(1 if suite.failed else 0)


if __name__ == "__main__":
    main()
