"""The guest image of the VM test: a Debian 12 system built by debootstrap,
its kernel unpacked to an ELF vmlinux, a busybox initramfs, and the root
file system as an ext4 image (booted with qemu's -snapshot, so it never
changes); and in old/, Debian 11's kernel (Linux 5.10) with an initramfs
of its own modules, which boots the same root file system.

The recipe is this file and `init` beside it: the image is cached under
CACHE/<hash of the recipe>/ and rebuilt when either changes (the Debian
mirror moving on does not rebuild it: delete the cache for that).

  image.py [--cache DIR]     builds the image unless it is cached; prints its directory

Standard library only; needs root (debootstrap, chroot), debootstrap and
mkfs.ext4 (e2fsprogs).
"""

import argparse
import hashlib
import lzma
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# The older kernel of a second boot (`checks/vm/run --kernel old`, in
# old/): Debian 11's, Linux 5.10, with no mount_setattr and System V
# limits that no user namespace may write (both came later).
OLD_SUITE = "bullseye"

# What the guest runs: systemd with user managers (logind through
# libpam-systemd, dbus-user-session for `systemctl --user`) and, as on
# NixOS, nss-systemd (names for DynamicUser's users); the
# interpreters, modules and tools the harness's host-backed package set
# (checks/hostpkgs) links to in /usr, for the presets and the README
# snippets' data-science (numpy, pandas), and the toolchains of the
# language presets (Go, Rust, the JDK, GCC), which the benchmark's
# languages step also runs directly as its baseline; Debian's bubblewrap
# (the harness's bwrap is a shim that calls /usr/bin/bwrap); python3 for
# the test driver; busybox-static for the initramfs.
PACKAGES = [
    "systemd",
    "systemd-sysv",
    "dbus",
    "dbus-user-session",
    "libpam-systemd",
    "libnss-systemd",
    "python3",
    "python3-numpy",
    "python3-pandas",
    "nodejs",
    "golang-go",
    "rustc",
    "default-jdk-headless",
    "gcc",
    "g++",
    "bubblewrap",
    "jq",
    "ripgrep",
    "fd-find",
    "tree",
    "file",
    "gawk",
    "procps",
    "kmod",
    "busybox-static",
]

# The kernel modules the initramfs loads (with what they depend on): the
# root disk, the 9p shares (the host's /nix/store, the test driver), the
# virtconsole the results go out on, overlayfs (a writable project, a
# mounted fork). Debian builds all of them as modules.
MODULES = ["virtio_pci", "virtio_blk", "crc32c_generic", "ext4", "9pnet_virtio", "9p", "virtio_console", "overlay"]

# Units a test boot does not need (masked): timers, gettys, apt, what mounts
# or loads what the tests never use, what would write state a snapshot
# boot throws away.
MASKED = [
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    "logrotate.timer",
    "man-db.timer",
    "systemd-tmpfiles-clean.timer",
    "getty@tty1.service",
    "serial-getty@ttyS0.service",
    "getty.target",
    "console-getty.service",
    "systemd-timesyncd.service",
    "systemd-update-utmp.service",
    "systemd-update-utmp-runlevel.service",
    "systemd-journal-flush.service",
    "systemd-random-seed.service",
    "systemd-pstore.service",
    "systemd-firstboot.service",
    "modprobe@drm.service",
    "modprobe@fuse.service",
    "modprobe@configfs.service",
    "modprobe@efi_pstore.service",
    "modprobe@loop.service",
    "modprobe@dm_mod.service",
    "sys-kernel-config.mount",
    "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount",
    "sys-fs-fuse-connections.mount",
    "dev-hugepages.mount",
    "dev-mqueue.mount",
    "systemd-remount-fs.service",
    "systemd-fsck-root.service",
    "cron.service",
]

FILES = {
    "etc/hostname": "nsm-vm\n",
    "etc/hosts": "127.0.0.1 localhost nsm-vm\n::1 localhost\n",
    # The initramfs mounted the root read-write; the host's store and the
    # test driver come over 9p (tags set by checks/vm/run's qemu command).
    "etc/fstab": (
        "nixstore /nix/store 9p trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 0 0\n"
        "vmtest /mnt/vmtest 9p trans=virtio,version=9p2000.L,ro,cache=none,msize=512000 0 0\n"
    ),
    # The test driver: started once the system is up, its output on the
    # virtconsole (hvc0), the machine off when it ends however it ends.
    "etc/systemd/system/nsm-vm-test.service": """\
[Unit]
Description=nix-sandbox-mcp VM test driver
RequiresMountsFor=/nix/store /mnt/vmtest
After=multi-user.target
SuccessAction=poweroff-immediate
FailureAction=poweroff-immediate

[Service]
Type=oneshot
ExecStart=/usr/bin/python3 -u /mnt/vmtest/guest/driver.py
StandardOutput=tty
StandardError=journal+console
TTYPath=/dev/hvc0
TTYReset=no
TTYVHangup=no
""",
    "etc/systemd/journald.conf.d/vm.conf": "[Journal]\nStorage=volatile\n",
    # A unit that hangs fails within the run's time.
    "etc/systemd/system.conf.d/vm.conf": "[Manager]\nDefaultTimeoutStartSec=30s\n",
}
LINKS = {
    "etc/systemd/system/multi-user.target.wants/nsm-vm-test.service": "../nsm-vm-test.service",
    "etc/systemd/system/default.target": "/lib/systemd/system/multi-user.target",
}


def recipe_hash():
    digest = hashlib.sha256()
    for name in ["image.py", "init"]:
        digest.update(name.encode() + b"\0" + (HERE / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def default_cache():
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("NSM_VM_CACHE") or Path(base) / "nix-sandbox-mcp" / "vm")


def cached(cache):
    """The image directory when it is built, else None."""
    directory = Path(cache) / recipe_hash()
    return directory if (directory / "complete").exists() else None


class BuildError(Exception):
    pass


def sh(argv, log, timeout=900, **kwargs):
    """Runs argv, its output appended to log with the time it took."""
    started = time.monotonic()
    with open(log, "a") as out:
        out.write(f"$ {' '.join(map(str, argv))}\n")
        out.flush()
        try:
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, **kwargs)
        except subprocess.TimeoutExpired:
            raise BuildError(f"{argv[0]} took over {timeout} s (see {log})") from None
        out.write(f"# {time.monotonic() - started:.1f} s\n")
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(map(str, argv[:3]))} ... exited {proc.returncode} (see {log})")


def chroot_out(root, argv):
    return subprocess.run(["chroot", str(root), *argv], capture_output=True, text=True, check=True).stdout


def kernel(root, staging, log, suite=None):
    """Downloads linux-image-amd64's kernel package with the guest's apt
    (of `suite`, another Debian release's, when given: its source added
    for the download, then removed) and unpacks it to staging (inside
    root); returns its version."""
    source = root / "etc/apt/sources.list.d/other-kernel.list"
    pick = f"/{suite}" if suite else ""
    if suite:
        source.write_text(f"deb {MIRROR} {suite} main\n")
    try:
        sh(["chroot", str(root), "apt-get", "update", "-q"], log)
        depends = chroot_out(root, ["apt-cache", "depends", f"linux-image-amd64{pick}"])
        match = re.search(r"Depends: (linux-image-(\d\S*-amd64))", depends)
        if not match:
            raise BuildError(f"no kernel package in: {depends!r}")
        package, version = match.group(1), match.group(2)
        inside = "/" + str(staging.relative_to(root))
        sh(["chroot", str(root), "sh", "-c", f"cd {inside} && apt-get download -q {package}{pick}"], log)
    finally:
        source.unlink(missing_ok=True)
    debs = list(staging.glob("*.deb"))
    sh(["chroot", str(root), "dpkg-deb", "-x", inside + "/" + debs[0].name, inside], log)
    debs[0].unlink()
    sh(["chroot", str(root), "depmod", "-b", inside, version], log)
    return version


def vmlinux(vmlinuz):
    """The ELF kernel inside an xz-compressed bzImage: booted through PVH,
    the guest spends no time decompressing itself."""
    data = vmlinuz.read_bytes()
    at = data.find(b"\xfd7zXZ\x00")
    while at >= 0:
        try:
            elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data[at:])
        except lzma.LZMAError:
            elf = b""
        if elf.startswith(b"\x7fELF"):
            return elf
        at = data.find(b"\xfd7zXZ\x00", at + 1)
    raise BuildError(f"no xz-compressed ELF kernel in {vmlinuz}")


def module_order(modules_dir, wanted):
    """The .ko paths (relative to modules_dir) of `wanted` and their
    dependencies, each after what it needs."""
    deps = {}
    for line in (modules_dir / "modules.dep").read_text().splitlines():
        path, _, needs = line.partition(":")
        deps[path] = needs.split()
    by_name = {Path(p).name.removesuffix(".ko").replace("-", "_"): p for p in deps}
    order = []

    def visit(path):
        if path in order:
            return
        for need in deps[path]:
            visit(need)
        order.append(path)

    for name in wanted:
        if name not in by_name:
            raise BuildError(f"kernel module {name} not found in {modules_dir}")
        visit(by_name[name])
    return order


def cpio(entries):
    """A newc cpio archive of (path, mode, data) entries (directories have
    data None); the kernel unpacks it as the initramfs."""
    out = bytearray()
    for ino, (path, mode, data) in enumerate([*entries, ("TRAILER!!!", 0, b"")], start=1):
        data = data or b""
        name = path.encode() + b"\0"
        fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name), 0]
        out += b"070701" + b"".join(b"%08X" % f for f in fields) + name
        out += b"\0" * (-len(out) % 4) + data
        out += b"\0" * (-len(out) % 4)
    return bytes(out)


def initramfs(root, staging, version):
    modules_dir = staging / "lib/modules" / version
    order = module_order(modules_dir, MODULES)
    entries = [(d, 0o40755, None) for d in ["bin", "dev", "proc", "sys", "newroot", "lib", "lib/modules"]]
    entries.append(("bin/busybox", 0o100755, (root / "bin/busybox").read_bytes()))
    entries.append(("init", 0o100755, (HERE / "init").read_bytes()))
    for path in order:
        entries.append((f"lib/modules/{Path(path).name}", 0o100644, (modules_dir / path).read_bytes()))
    entries.append(("modules", 0o100644, "".join(Path(p).name + "\n" for p in order).encode()))
    return cpio(entries)


def configure(root):
    for path, text in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    links = {**LINKS, **{f"etc/systemd/system/{unit}": "/dev/null" for unit in MASKED}}
    for path, target in links.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).unlink(missing_ok=True)
        (root / path).symlink_to(target)
    for directory in ["nix/store", "mnt/vmtest"]:
        (root / directory).mkdir(parents=True, exist_ok=True)
    # A fixed machine-id: every boot is the same boot, never a "first boot".
    (root / "etc/machine-id").write_text(hashlib.md5(b"nsm-vm").hexdigest() + "\n")
    for junk in ["var/lib/apt/lists", "var/cache/apt", "usr/share/doc", "usr/share/man", "usr/share/locale"]:
        shutil.rmtree(root / junk, ignore_errors=True)
    (root / "var/lib/apt/lists/partial").mkdir(parents=True)
    (root / "var/cache/apt/archives/partial").mkdir(parents=True)


def disk_size(root):
    used = int(subprocess.run(["du", "-sm", str(root)], capture_output=True, text=True, check=True).stdout.split()[0])
    return used + used // 2 + 512  # MiB: room for what the tests write


def build(cache, say=print):
    """Builds the image into CACHE/<hash>/ (vmlinux, initrd, root.img);
    returns that directory. Removes images of older recipes."""
    cache = Path(cache)
    target = cache / recipe_hash()
    if cached(cache):
        return target
    for tool in ["debootstrap", "mkfs.ext4", "chroot"]:
        if not shutil.which(tool):
            raise BuildError(f"{tool} is not installed (apt-get install debootstrap e2fsprogs)")
    if os.getuid() != 0:
        raise BuildError("building the image needs root (debootstrap, chroot)")
    cache.mkdir(parents=True, exist_ok=True)
    work = cache / (target.name + ".building")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    log = work / "build.log"
    root = work / "root"
    started = time.monotonic()
    say(f"# vm image: building {target} (debootstrap {SUITE} from {MIRROR}; log {log})")
    # Downloaded packages are kept for the next recipe's build.
    debs = cache / "debs"
    debs.mkdir(exist_ok=True)
    sh(["debootstrap", "--variant=minbase", f"--cache-dir={debs}", "--include=" + ",".join(PACKAGES),
        SUITE, str(root), MIRROR], log)
    staging = root / "tmp/kernel"
    staging.mkdir()
    version = kernel(root, staging, log)
    (work / "vmlinux").write_bytes(vmlinux(staging / "boot" / f"vmlinuz-{version}"))
    (work / "initrd").write_bytes(initramfs(root, staging, version))
    shutil.copy(staging / "boot" / f"config-{version}", work / "config")
    shutil.rmtree(staging)
    staging.mkdir()
    old = work / "old"
    old.mkdir()
    old_version = kernel(root, staging, log, OLD_SUITE)
    (old / "vmlinux").write_bytes(vmlinux(staging / "boot" / f"vmlinuz-{old_version}"))
    (old / "initrd").write_bytes(initramfs(root, staging, old_version))
    (old / "kernel-version").write_text(old_version + "\n")
    shutil.rmtree(staging)
    configure(root)
    sh(["mkfs.ext4", "-q", "-F", "-L", "nsm-root", "-d", str(root), str(work / "root.img"), f"{disk_size(root)}M"], log)
    shutil.rmtree(root)
    (work / "kernel-version").write_text(version + "\n")
    (work / "complete").write_text(f"built in {time.monotonic() - started:.0f} s\n")
    shutil.rmtree(target, ignore_errors=True)
    work.rename(target)
    # Keeps the newest other image (another checkout's recipe), drops the rest.
    others = sorted((d for d in cache.iterdir() if d.is_dir() and d != target and (d / "complete").exists()),
                    key=lambda d: (d / "complete").stat().st_mtime, reverse=True)
    for old in others[1:]:
        shutil.rmtree(old, ignore_errors=True)
    say(f"# vm image: built in {time.monotonic() - started:.0f} s (kernel {version})")
    return target


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", default=default_cache())
    args = parser.parse_args()
    try:
        print(build(args.cache, say=lambda line: print(line, file=sys.stderr)))
    except BuildError as e:
        print(f"image.py: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
