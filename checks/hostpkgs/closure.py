"""Makes a hostpkgs store path a closure of its own, as nixpkgs' are.

Run by the host's /usr/bin/python3 from host-tool.sh and buildRustPackage.nix:

  closure.py copy [--include] OUT DEB...
                                 copy the Debian packages' files into OUT
  closure.py fixup OUT GLIBC --libdir lib/PNAME
                                 patch every ELF file in OUT to the store

`copy` takes what `dpkg-query -L` lists, /usr dropped (/usr/bin/x and /bin/x
to OUT/bin/x, /usr/lib/x86_64-linux-gnu/x to OUT/lib/x, /usr/share/x to
OUT/share/x, /etc/x to OUT/etc/x), leaving out documentation, manual pages,
translations, headers (kept with --include, /usr/include to OUT/include, for
a compiler), Python packages' test suites and Go's testdata folders. A symlink to a file
it copied stays a (relative) symlink; one leading out of the packages (a font
of another package, an /etc/alternatives choice) becomes a copy of its
target. It records where each file came from in OUT/nix-support/origins,
which `fixup` reads and removes (glibc, never fixed up, keeps its own).

`fixup` reads the shared libraries every ELF file needs as the host resolves
them (ldd of its host original), copies those not of glibc (GLIBC, the
hostpkgs glibc, a store path of Debian's libc6) into OUT/LIBDIR (a folder
of the package's own name, as nixpkgs keeps a package's private libraries:
two packages of a profile may carry the same library), sets each ELF
file's RUNPATH to the store directories that hold its libraries and each
executable's interpreter to GLIBC's loader, then checks with GLIBC's loader
that every library resolves inside the store. A library the host cannot
resolve is reported and left out (the file would fail to load as it does on
the host). It also rewrites `#!` lines naming /bin or /usr/bin programs to
the package's own program or to one of --programs' (the shell's sh, bash).
"""

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys

MULTIARCH = "x86_64-linux-gnu"
LOADER = "ld-linux-x86-64.so.2"
# Parts of a package no program reads at run time.
DROPPED_SHARE = {"doc", "doc-base", "man", "info", "lintian", "bug", "locale", "bash-completion", "zsh",
                 "fish", "gdb", "menu", "pixmaps", "applications", "icons"}
DIST_PACKAGES = "lib/python3/dist-packages/"


def note(message):
    print(f"closure.py: {message}", file=sys.stderr, flush=True)


def destination(path, include=False):
    """Where a host path of a Debian package goes, relative to OUT, or None."""
    parts = path.strip("/").split("/")
    if parts[0] == "usr":
        parts = parts[1:]
    if not parts or not parts[0]:
        return None
    top, rest = parts[0], parts[1:]
    if top in ("bin", "sbin"):
        top = "bin"
    elif top in ("lib", "lib64"):
        top = "lib"
        if rest[:1] == [MULTIARCH]:
            rest = rest[1:]
        if rest[:1] == ["debug"]:
            return None
    elif top == "share":
        if rest[:1] and rest[0] in DROPPED_SHARE:
            return None
    elif top == "include":
        if not include:
            return None
    elif top not in ("etc", "libexec"):
        return None
    relative = "/".join([top] + rest)
    if relative.startswith(DIST_PACKAGES) and "tests" in rest:
        return None
    # Go's test data (ELF files of other machines among them), which the
    # go command never reads but for a package's own tests.
    if "testdata" in rest:
        return None
    return relative


def listed(debs):
    paths = []
    for deb in debs:
        out = subprocess.run(["dpkg-query", "-L", deb], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"closure.py: the host has no Debian package {deb} (apt-get install {deb})")
        paths += [line for line in out.stdout.splitlines() if line.startswith("/")]
    return paths


def copy_file(source, target):
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copyfile(source, target)
    os.chmod(target, 0o755 if os.stat(source).st_mode & 0o111 else 0o644)


def copy(out, debs, include=False):
    origins = {}  # OUT-relative path -> host file it is a copy of
    by_host = {}  # host real path -> OUT-relative path
    links = []
    for path in listed(debs):
        relative = destination(path, include)
        if relative is None:
            continue
        if os.path.islink(path):
            links.append((path, relative))
        elif os.path.isdir(path):
            by_host.setdefault(os.path.realpath(path), relative)
        elif os.path.isfile(path) and relative not in origins:
            copy_file(path, os.path.join(out, relative))
            origins[relative] = path
            by_host.setdefault(os.path.realpath(path), relative)
    # Links after files, so that one to a copied file stays a link; a link
    # whose place a file already took (/lib64's loader) is left out.
    for path, relative in links:
        target = os.path.join(out, relative)
        if os.path.lexists(target):
            continue
        real = os.path.realpath(path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if real in by_host:
            os.symlink(os.path.relpath(os.path.join(out, by_host[real]), os.path.dirname(target)), target)
        elif os.path.isfile(real):
            copy_file(real, target)
            origins[relative] = real
        elif os.path.isdir(real):
            shutil.copytree(real, target, symlinks=False)
        else:
            note(f"{path} points to {real}, which does not exist: left out")
    os.makedirs(os.path.join(out, "nix-support"), exist_ok=True)
    with open(os.path.join(out, "nix-support", "origins"), "w") as f:
        json.dump(origins, f, indent=0, sort_keys=True)


def elf_kind(path):
    """(is_elf, has_interpreter, is_dynamic) of a file, from its program headers."""
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            return False, False, False
        phoff, = struct.unpack_from("<Q", head, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    types = {struct.unpack_from("<I", table, i * phentsize)[0] for i in range(phnum)}
    return True, 3 in types, 2 in types


LDD_LINE = re.compile(r"^\s*(\S+) => (not found|\S+)")


def resolved(host_file):
    """The libraries the host's loader finds for a file: [(name, path)]."""
    out = subprocess.run(["ldd", host_file], capture_output=True, text=True)
    libs = []
    for line in out.stdout.splitlines():
        m = LDD_LINE.match(line)
        if m:
            libs.append((m.group(1), m.group(2)))
    return libs


def glibc_files(glibc):
    with open(os.path.join(glibc, "nix-support", "origins")) as f:
        origins = json.load(f)
    return {os.path.realpath(host): os.path.join(glibc, relative) for relative, host in origins.items()}


def fixup(out, glibc, libdir, programs):
    origins_file = os.path.join(out, "nix-support", "origins")
    origins = {}
    if os.path.exists(origins_file):
        with open(origins_file) as f:
            origins = json.load(f)
    of_glibc = glibc_files(glibc)
    own = {os.path.realpath(host): os.path.join(out, relative) for relative, host in origins.items()}
    libdir = os.path.join(out, libdir)
    copied = {}  # library name -> host real path copied to OUT/lib/NAME
    queue = []
    for root, _, files in os.walk(out):
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                relative = os.path.relpath(path, out)
                queue.append((path, origins.get(relative, path)))
    patched = []
    unpatched = []
    while queue:
        path, host = queue.pop()
        is_elf, interp, dynamic = elf_kind(path)
        if not is_elf:
            patch_shebang(path, out, programs, unpatched)
            continue
        if not dynamic:
            continue
        runpath = []
        for name, where in resolved(host):
            if where == "not found":
                note(f"{os.path.relpath(path, out)}: the host has no {name}; left out")
                continue
            real = os.path.realpath(where)
            if real in of_glibc:
                store = of_glibc[real]
            elif real in own:
                store = own[real]
            else:
                store = os.path.join(libdir, name)
                if name not in copied:
                    copy_file(real, store)
                    copied[name] = real
                    own[real] = store
                    queue.append((store, real))
                elif copied[name] != real:
                    note(f"{name}: {copied[name]} and {real} both wanted; kept the first")
            directory = os.path.dirname(store)
            if directory not in runpath:
                runpath.append(directory)
        args = []
        if interp:
            args += ["--set-interpreter", os.path.join(glibc, "lib", LOADER)]
        if runpath:
            args += ["--set-rpath", ":".join(runpath)]
        elif not interp:
            args += ["--remove-rpath"]
        os.chmod(path, os.stat(path).st_mode | 0o200)
        subprocess.run(["patchelf"] + args + [path], check=True)
        patched.append(path)
    if unpatched:
        note(f"{len(unpatched)} #! lines name a program not in bin/ of the package or --programs, "
             f"left as they are: {', '.join(unpatched[:5])}{', ...' if len(unpatched) > 5 else ''}")
    check(out, glibc, patched)
    # Only glibc's list stays (for the others' fixup): in a profile, the
    # lists of two packages would collide.
    if os.path.exists(origins_file):
        os.remove(origins_file)
        if not os.listdir(os.path.dirname(origins_file)):
            os.rmdir(os.path.dirname(origins_file))


def check(out, glibc, patched):
    """Every library of every patched file resolves in the store, with GLIBC's loader."""
    loader = os.path.join(glibc, "lib", LOADER)
    bad = []
    for path in patched:
        got = subprocess.run([loader, "--list", path], capture_output=True, text=True)
        for line in got.stdout.splitlines():
            m = LDD_LINE.match(line)
            if m and m.group(2) != "not found" and not m.group(2).startswith("/nix/store/"):
                bad.append(f"{os.path.relpath(path, out)}: {m.group(1)} => {m.group(2)}")
    if bad:
        sys.exit("closure.py: libraries resolve outside the store:\n  " + "\n  ".join(bad))


SHEBANG = re.compile(rb"^#!\s*(/usr/bin/|/bin/)(\S+)(.*)$")


def patch_shebang(path, out, programs, unpatched):
    if not os.access(path, os.X_OK):
        return
    with open(path, "rb") as f:
        first = f.readline()
        rest = f.read()
    m = SHEBANG.match(first.rstrip(b"\n"))
    if not m:
        return
    program, args = m.group(2).decode(), m.group(3)
    if program == "env" and args.strip():
        words = args.split()
        program, args = words[0].decode(), b"".join(b" " + w for w in words[1:])
    for home in [out] + programs:
        candidate = os.path.join(home, "bin", program)
        if os.path.exists(candidate):
            with open(path, "wb") as f:
                f.write(b"#!" + candidate.encode() + args + b"\n" + rest)
            return
    unpatched.append(f"{os.path.relpath(path, out)} ({program})")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("copy")
    c.add_argument("--include", action="store_true", help="keep /usr/include (headers), for a compiler")
    c.add_argument("out")
    c.add_argument("debs", nargs="+")
    f = sub.add_parser("fixup")
    f.add_argument("out")
    f.add_argument("glibc")
    f.add_argument("--libdir", required=True, help="where, under OUT, the libraries copied go")
    f.add_argument("--programs", action="append", default=[], metavar="STORE_PATH",
                   help="a package whose bin/ #! lines may name (repeatable), after the package's own")
    args = parser.parse_args()
    if args.command == "copy":
        copy(args.out, args.debs, args.include)
    else:
        fixup(args.out, args.glibc, args.libdir, args.programs)


if __name__ == "__main__":
    main()
