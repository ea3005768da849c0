#!/usr/bin/env python3
"""Files in, artifacts out and the receipt, end to end: the
Nix-built server and session wrappers over MCP (standard library only).

Run by checks/run (as root, then as an unprivileged user) next to e2e.py,
whose minimal MCP client and test runner it uses. Prints one line per test,
`ok - LABEL: artifacts: name`, `FAIL - ...: reason`, and exits 1 when a test
failed.

  artifacts.py --label root --server OUT --sandbox python=OUT --sandbox shell=OUT \
               --plots OUT

--plots is a Python with numpy and matplotlib (python3.withPackages) made by
lib.mkSandbox. Its matplotlib test fails, never skips, when the host lacks
the package (checks/hostpkgs maps it to Debian's python3-matplotlib).
"""

import argparse
import base64
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

from e2e import Failed, McpClient, Suite, check, facts, manifest_of, usage_left_out

PNG_CODE = """import base64, os, struct, zlib
def chunk(kind, data):
    c = struct.pack('>I', len(data)) + kind + data
    return c + struct.pack('>I', zlib.crc32(kind + data))
def png(path, w, h, v):
    raw = b''.join(b'\\x00' + bytes([v]) * w for _ in range(h))
    data = (b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 0, 0, 0, 0))
            + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
    open(path, 'wb').write(data)
    return base64.b64encode(data).decode()
"""


class Server:
    """The Nix-built server over MCP stdio, with a HOME of its own."""

    def __init__(self, args, scratch, env=None, manifests=(), flags=()):
        self.home = tempfile.mkdtemp(dir=scratch, prefix="home-")
        base = {"HOME": self.home, "PATH": "/usr/bin:/bin", "RUST_LOG": "info"}
        argv = [args.server + "/bin/nix-sandbox-mcp", "--stdio", *flags]
        for manifest in manifests:
            argv += ["--manifest", str(manifest)]
        self.client = McpClient(argv, {**base, **(env or {})})
        init = self.client.initialize("nix-sandbox-mcp-artifacts")
        check("resources" in init.get("capabilities", {}), f"no resources capability: {init}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.client.close()

    def call(self, **arguments):
        """`run` with these arguments; (result, text of the first block, structured)."""
        result = self.client.request("tools/call", {"name": "run", "arguments": arguments})
        content = result.get("content", [])
        text = content[0].get("text", "") if content else ""
        return result, text, facts(result)

    def raw(self, method, params):
        """A request whose JSON-RPC error is an answer too: (result, error)."""
        self.client.next_id += 1
        self.client.send({"jsonrpc": "2.0", "id": self.client.next_id, "method": method, "params": params})
        while True:
            line = self.client.lines.get(timeout=120)
            check(line is not None, "the server closed stdout")
            message = json.loads(line)
            if message.get("id") == self.client.next_id:
                return message.get("result"), message.get("error")


def images(result):
    return [(c["mimeType"], base64.b64decode(c["data"]))
            for c in result.get("content", []) if c.get("type") == "image"]


def links(result):
    return [c for c in result.get("content", []) if c.get("type") == "resource_link"]


def succeeded(result, text):
    check(not result.get("isError"), f"the call failed: {text[-800:]}")


def refused(result, code):
    error = (facts(result)).get("error", {})
    check(result.get("isError") and error.get("code") == code, f"wanted {code}, got {result}")
    return error.get("message", "")


def t_files_in(args, scratch):
    files = [{"path": "data.csv", "content": "x,y\n1,2\n3,4\n"},
             {"path": "in/notes.txt", "content": "héllo"}]
    code = ("import csv\nrows = list(csv.reader(open('data.csv')))\n"
            "print(len(rows), rows[2][1], open('/workspace/in/notes.txt').read())")
    with Server(args, scratch) as s:
        for session in ("a", None):
            result, text, st = s.call(env="python", session=session, code=code, files=files)
            succeeded(result, text)
            check(text == "3 4 héllo\n", f"session {session}: {text!r}")
            check(st.get("session") == session, f"session {session}: {st}")
        result, text, _ = s.call(env="shell", code="wc -l < data.csv", files=files)
        check(text == "3\nexit code 0", f"shell: {text!r}")


def t_escapes(args, scratch):
    with Server(args, scratch) as s:
        code = "open('/workspace/ran', 'w').write('ran')"
        for path in ["../escape", "/etc/passwd", "a//b", ""]:
            for session in ("s", None):
                result, _, _ = s.call(env="python", session=session, code=code,
                                      files=[{"path": path, "content": "x"}])
                message = refused(result, "bad_file_path")
                check("nothing was run" in message, message)
        many = [{"path": f"f{i}", "content": ""} for i in range(21)]
        refused(s.call(env="python", code=code, files=many)[0], "files_too_large")
        # Links planted by code are never followed.
        result, text, _ = s.call(env="shell", session="links",
                                 code="ln -s /etc /workspace/etc && ln -s /tmp/victim /workspace/f")
        succeeded(result, text)
        for path in ["etc/x", "f"]:
            result, _, _ = s.call(env="shell", session="links", code="touch /workspace/ran",
                                  files=[{"path": path, "content": "escape", "replace": True}])
            check("symbolic link" in refused(result, "bad_file_path"), f"{path}: {result}")
        _, text, _ = s.call(env="shell", session="links",
                            code="test -e /workspace/ran || test -e /tmp/victim || echo clean")
        check(text == "clean\n", f"something ran or was written: {text!r}")
        _, text, _ = s.call(env="python", session="s", code="import os\nos.path.exists('/workspace/ran')")
        check(text == "False\n", f"the refused calls ran: {text!r}")


def t_binary(args, scratch):
    every, big = bytes(range(256)), os.urandom(6 << 20)
    b64 = lambda data: base64.b64encode(data).decode()
    sha = lambda data: hashlib.sha256(data).hexdigest()
    hashes = "import hashlib\nprint(' '.join(hashlib.sha256(open(p, 'rb').read()).hexdigest() for p in {!r}))"
    with Server(args, scratch, env={"NIX_SANDBOX_FILES_MB": "8"}) as s:
        files = [{"path": "all.bin", "base64": b64(every)}, {"path": "d/big.bin", "base64": b64(big)}]
        result, text, _ = s.call(env="python", session="b", files=files,
                                 code="x = 1\n" + hashes.format(["all.bin", "d/big.bin"]))
        succeeded(result, text)
        check(text == f"{sha(every)} {sha(big)}\n", f"hashes in the jail: {text!r}")
        code = "open('/workspace/ran', 'w').write('ran')"
        result, _, _ = s.call(env="python", session="b", code=code,
                              files=[{"path": "new", "content": "n"}, {"path": "all.bin", "content": "x"}])
        message = refused(result, "file_exists")
        check("`all.bin` exists in /workspace" in message and '"replace": true' in message, message)
        _, text, _ = s.call(env="python", session="b", code="import os\nprint(x, sorted(os.listdir('.')))")
        check(text == "1 ['all.bin', 'd', 'outputs']\n", f"a refused call wrote: {text!r}")
        result, text, _ = s.call(env="python", session="b", code="print(open('all.bin').read())",
                                 files=[{"path": "all.bin", "content": "x", "replace": True}])
        check(text == "x\n", f"replace: {text!r}")
        result, _, _ = s.call(env="python", code=code, files=[{"path": "o", "base64": b64(bytes(8 << 20) + b"!")}])
        check("NIX_SANDBOX_FILES_MB" in refused(result, "files_too_large"), f"{result}")
    # The default bound, 50 MiB, gets through stdio to the release build.
    data = os.urandom(50 << 20)
    with Server(args, scratch) as s:
        result, text, _ = s.call(env="python", code=hashes.format(["big"]), files=[{"path": "big", "base64": b64(data)}])
        check(text == f"{sha(data)}\n", f"50 MiB: {text[:200]!r}")


def t_png(args, scratch):
    with Server(args, scratch, flags=("--warm-jails", "4")) as s:
        # A session's call, a run given files, and a plain run served by a
        # warm jail: with warm jails on, each returns its outputs.
        for session, files in (("img", [{"path": "x", "content": ""}]), (None, [{"path": "x", "content": ""}]),
                               (None, None)):
            for _ in range(20):
                result, text, st = s.call(env="python", session=session,
                                          code=PNG_CODE + "print(png('outputs/plot.png', 64, 48, 200))",
                                          **({"files": files} if files else {}))
                # A plain run that found no warm jail ready ran in the run
                # wrapper (no outputs): the next one finds the refill.
                if session or files or st.get("warm"):
                    break
                time.sleep(0.1)
            succeeded(result, text)
            want = base64.b64decode(text.splitlines()[0])
            check(images(result) == [("image/png", want)],
                  f"session {session}: images {[(m, len(b)) for m, b in images(result)]}, wanted {len(want)} bytes")
            check(st["outputs"][0]["path"] == "plot.png" and st["outputs"][0]["shown"], f"{st['outputs']}")
    # With the pool off too, a plain run whose code names its outputs gets
    # a jail of the agent's started for it, and the image back.
    with Server(args, scratch, flags=("--warm-jails", "0")) as s:
        result, text, st = s.call(env="python", code=PNG_CODE + "print(png('outputs/plot.png', 64, 48, 200))")
        succeeded(result, text)
        want = base64.b64decode(text.splitlines()[0])
        check(images(result) == [("image/png", want)] and not st.get("warm"), f"pool off: {st}")
        # So does node's, as the node driver runs it once too.
        result, text, st = s.call(env="node", code=(
            "const fs = require('fs')\nfs.mkdirSync('outputs', { recursive: true })\n"
            "fs.writeFileSync('outputs/from-node.txt', 'node\\n')\nconsole.log(__filename)\n"))
        succeeded(result, text)
        check(text.startswith("[stdin]\n") and [o["path"] for o in st.get("outputs", [])] == ["from-node.txt"]
              and "- from-node.txt (text/plain, 5 B)" in text and not st.get("warm"), f"node, pool off: {text!r} {st}")


# A run that leaves everything it can for the next: a file in /tmp,
# /workspace and the home, a background process, an environment variable
# and an interpreter global; and the jail's pid namespace with its pid 1's
# start time, never seen twice (a freed namespace's inode number is reused,
# but only by a jail started after the one that freed it).
LEAVER = """import os, sys, subprocess, builtins
paths = ['/tmp/left', '/workspace/left', os.path.expanduser('~/left')]
procs = [open(f'/proc/{p}/cmdline').read() for p in os.listdir('/proc') if p.isdigit()]
print('ns', os.readlink('/proc/self/ns/pid'), open('/proc/1/stat').read().rsplit(')', 1)[1].split()[19])
print('seen', [p for p in paths if os.path.exists(p)], os.environ.get('LEFT'), getattr(builtins, 'LEFT', None),
      [p for p in procs if 'left-behind' in p])
for p in paths:
    try:
        open(p, 'w').write('x')
    except OSError:
        pass
os.environ['LEFT'] = '1'
builtins.LEFT = 1
subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', 'left-behind'], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
"""


def t_warm(args, scratch):
    with Server(args, scratch, flags=("--warm-jails", "4")) as s:
        namespaces, warm = set(), 0
        for i in range(6):
            result, text, st = s.call(env="python", code=LEAVER)
            succeeded(result, text)
            ns = text.splitlines()[0]
            check(ns not in namespaces, f"run {i}: a jail served twice ({ns})")
            namespaces.add(ns)
            check("seen [] None None []" in text, f"run {i} saw what an earlier run left: {text}")
            warm += bool(st.get("warm"))
            time.sleep(0.5)  # the pool's replacement starts after each run
        check(warm >= 4, f"only {warm} of 6 runs were served by a warm jail")
        result, text, st = s.call(env="python", session="s", code=LEAVER)
        check("seen [] None None []" in text, f"a new session saw what a run left: {text}")
        # The control below needs this call to have left all it tries to.
        check(not result.get("isError") and "Traceback" not in text,
              f"the session's first call did not leave everything: {text}")
        # The control: a jail that serves twice (a session's) shows the
        # attack everything the first call left.
        result, text, st = s.call(env="python", session="s", code=LEAVER)
        check("seen ['/tmp/left', '/workspace/left', '" in text and "] 1 1 ['" in text,
              f"the attack missed what a reused jail holds: {text}")


# Plain runs that a warm jail serves read as the run wrapper's: the same
# text, exit code, signal, timeout and flood facts; a flood's last line
# (how far past the bound each stopped differs: so does the count dropped).
SAME_EITHER_WAY = [
    ("python", "print('one')\n1 + 1\n", None),
    ("python", "def f():\n    raise ValueError('no')\nf()\n", None),
    ("python", "print('x'\n", None),
    ("python", "import sys\nprint('before')\nsys.exit(3)\n", None),
    ("python", "import sys\nprint(sys.argv, __name__, __file__)\nraise SystemExit('bye')\n", None),
    ("python", "import time\nprint('begun', flush=True)\ntime.sleep(60)\n", 3),
    ("shell", "echo out; echo err >&2; exit 4", None),
    ("shell", "set -e\nfalse\necho never\n", None),
    ("shell", "echo before; kill -ABRT $$", None),
    ("node", "console.log('one')\n1 + 1\n", None),
    ("node", "console.log(process.argv.length, typeof fs, __filename)\nprocess.exit(3)\n", None),
    ("node", "setTimeout(() => console.log('later'), 100)\nconsole.error('now')\nprocess.exitCode = 5\n", None),
    ("node", "console.log('begun')\nsetInterval(() => {}, 1000)\n", 3),
]


def t_warm_reads_cold(args, scratch):
    with Server(args, scratch, flags=("--warm-jails", "4")) as hot, \
            Server(args, scratch, flags=("--warm-jails", "0")) as cold:
        def served_warm(**arguments):
            for _ in range(40):
                result, text, st = hot.call(**arguments)
                if st.get("warm"):
                    return result, text, st
                time.sleep(0.25)  # the pool refills after the run
            raise Failed(f"no warm jail served {arguments}")

        for env, code, timeout_s in SAME_EITHER_WAY + [("shell", "echo first; yes", None)]:
            arguments = {"env": env, "code": code, **({"timeout_s": timeout_s} if timeout_s else {})}
            c_result, c_text, c_st = cold.call(**arguments)
            check("error" not in c_st and not c_st.get("warm"), f"{arguments}: {c_result}")
            h_result, h_text, h_st = served_warm(**arguments)
            if code.endswith("yes"):
                last = c_text.splitlines()[-1]
                check(last.startswith("stopped: stdout passed 64 MiB") and h_text.splitlines()[-1] == last
                      and h_text.startswith("first\n"), f"a flood: {h_text[-300:]!r} / {c_text[-300:]!r}")
            else:
                check(usage_left_out(h_text) == usage_left_out(c_text), f"{env} {code!r}: warm {h_text!r}, cold {c_text!r}")
            check(bool(h_result.get("isError")) == bool(c_result.get("isError")), f"{code!r}: isError differs")
            for fact in ("exit_code", "signal", "timed_out", "flooded"):
                check(h_st.get(fact) == c_st.get(fact), f"{code!r}: {fact} {h_st.get(fact)} / {c_st.get(fact)}")


def t_budget(args, scratch):
    code = PNG_CODE + "for i in range(10):\n    png(f'outputs/p{i}.png', 8, 8, i * 20)\n"
    with Server(args, scratch) as s:
        result, text, st = s.call(env="python", session="budget", code=code)
        succeeded(result, text)
        check(len(images(result)) == 4, f"{len(images(result))} images shown, wanted 4")
        check(text.count("not shown: over 4 images per call") == 6, text)
        check(len(links(result)) == 6, f"the 6 not shown are not all linked: {links(result)}")
        check(sum(1 for o in st["outputs"] if o["shown"]) == 4 and len(st["outputs"]) == 10, f"{st['outputs']}")


def t_csv_resource(args, scratch):
    csv = "city,n\nParis,3\nLyon,5\n"
    with Server(args, scratch) as s:
        result, text, _ = s.call(env="python", session="tab",
                                 code=f"open('outputs/sum.csv', 'w').write({csv!r})")
        succeeded(result, text)
        linked = links(result)
        uri = "sandbox://tab/outputs/sum.csv"
        check([(l["uri"], l["mimeType"], l["size"]) for l in linked] == [(uri, "text/csv", len(csv))],
              f"{linked}")
        read, error = s.raw("resources/read", {"uri": uri})
        check(error is None, f"resources/read: {error}")
        check(read["contents"] == [{"uri": uri, "mimeType": "text/csv", "text": csv}], f"{read}")
        listed, error = s.raw("resources/list", {})
        check(error is None and [r["uri"] for r in listed["resources"]] == [uri], f"{listed} {error}")
        _, error = s.raw("resources/read", {"uri": "sandbox://gone/outputs/sum.csv"})
        check(error and "session `gone` is not open" in error["message"], f"{error}")


def t_receipt(args, scratch):
    with Server(args, scratch) as s:
        for env, arguments in [
            ("python", {"code": "print(1)"}),
            ("python", {"code": "print(1)", "session": "r"}),
            ("python", {"code": "print(1)", "files": [{"path": "a", "content": ""}]}),
            ("shell", {"code": "echo 1", "session": "r2"}),
        ]:
            result, text, st = s.call(env=env, **arguments)
            succeeded(result, text)
            want = os.path.realpath(args.sandboxes[env])
            check(st.get("store_path") == want, f"{env} {arguments}: store_path {st.get('store_path')}, wanted {want}")
            check("nixpkgs_rev" in st and st["nixpkgs_rev"] is None,
                  f"nixpkgs_rev {st.get('nixpkgs_rev')!r} (hostpkgs has no nixpkgs revision)")


def tree(directory):
    return sorted(str(p.relative_to(directory)) for p in Path(directory).rglob("*") if p.is_file())


def t_mirror(args, scratch):
    out = Path(scratch) / "mirror"
    code = PNG_CODE + "png('outputs/p.png', 4, 4, 9)\nopen('outputs/t.csv', 'w').write('a,b\\n')"
    with Server(args, scratch, env={"NIX_SANDBOX_OUTPUT_DIR": str(out)}) as s:
        result, text, _ = s.call(env="python", session="m1", code=code)
        succeeded(result, text)
        check(f"outputs mirrored to {out}/m1" in text, text)
        png = images(result)[0][1]
        check(tree(out) == ["m1/p.png", "m1/t.csv"], f"{tree(out)}")
        check((out / "m1/p.png").read_bytes() == png, "the mirrored PNG differs")
    with Server(args, scratch) as s:
        home = Path(s.home)
        result, text, _ = s.call(env="python", session="m1", code=code)
        succeeded(result, text)
        check("mirrored" not in text, text)
        check(tree(out) == ["m1/p.png", "m1/t.csv"], f"{tree(out)}")
        leftovers = [p for p in tree(home) if not p.startswith(".local/share/jail.nix/")]
        check(leftovers == [], f"written in the server's HOME: {leftovers}")


def t_mplbackend(args, scratch):
    with Server(args, scratch) as s:
        result, text, _ = s.call(env="python", code="import os\nprint(os.environ.get('MPLBACKEND'))")
        check(text == "Agg\n", f"the python preset's MPLBACKEND: {text!r}")


def t_matplotlib(args, scratch):
    manifest = Path(args.plots) / "share/nix-sandbox-mcp/manifest.json"
    name = next(iter(manifest_of(args.plots)["environments"]))
    with Server(args, scratch, manifests=[manifest]) as s:
        code = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('t')\nplt.show()"
        result, text, st = s.call(env=name, session="plot", code=code)
        check(st.get("exit_code") == 0,
              f"matplotlib failed (the host needs python3-matplotlib: apt-get install python3-matplotlib): {text[-600:]}")
        shown = images(result)
        check(len(shown) == 1 and shown[0][0] == "image/png" and shown[0][1].startswith(b"\x89PNG"),
              f"plt.show() gave {[(m, len(b)) for m, b in shown]}: {text[-400:]}")
        check("figure-1.png" in text, text)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", default=os.environ.get("USER") or str(os.getuid()))
    parser.add_argument("--server", required=True)
    parser.add_argument("--sandbox", action="append", default=[], metavar="PRESET=OUT")
    parser.add_argument("--plots", required=True)
    args = parser.parse_args()
    args.sandboxes = dict(s.split("=", 1) for s in args.sandbox)
    missing = {"python", "shell"} - args.sandboxes.keys()
    if missing:
        parser.error(f"--sandbox missing for {sorted(missing)}")

    suite = Suite(f"{args.label}: artifacts")
    with tempfile.TemporaryDirectory(prefix="nsm-artifacts-") as scratch:
        os.chmod(scratch, 0o755)
        suite.test("files passed in are read by the code (session, run without one, shell)", t_files_in, args, scratch)
        suite.test("path escapes, too many or too large files, and planted symbolic links are refused "
                   "before anything runs", t_escapes, args, scratch)
        suite.test("binary files by base64, by hash in the jail; file_exists, then replace; the bound; 50 MiB",
                   t_binary, args, scratch)
        suite.test("a PNG written to outputs comes back as image/png content with the same bytes, plain runs too "
                   "(warm jails on, and off)",
                   t_png, args, scratch)
        suite.test("warm jails: each serves one run, and no run sees a file, process, variable or global an "
                   "earlier one left", t_warm, args, scratch)
        suite.test("warm jails: a plain run a warm jail serves reads as the run wrapper's (traceback, last "
                   "expression, sys.exit, SystemExit text, argv, timeout, set -e, flood)", t_warm_reads_cold,
                   args, scratch)
        suite.test("ten images: four shown, six listed with a note and linked", t_budget, args, scratch)
        suite.test("a CSV in outputs is a resource link; resources/read and resources/list serve it",
                   t_csv_resource, args, scratch)
        suite.test("the receipt: store_path is the sandbox's store path, nixpkgs_rev null",
                   t_receipt, args, scratch)
        suite.test("NIX_SANDBOX_OUTPUT_DIR mirrors outputs there, and nothing is written without it",
                   t_mirror, args, scratch)
        suite.test("the python preset sets MPLBACKEND=Agg", t_mplbackend, args, scratch)
        suite.test("plt.show() in a matplotlib environment comes back as an image", t_matplotlib, args, scratch)
    return 1 if suite.failed else 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except Failed as e:
        print(f"FAIL - artifacts: {e}", flush=True)
        raise SystemExit(1)
