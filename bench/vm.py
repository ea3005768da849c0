#!/usr/bin/env python3
"""The benchmark on cgroup v2, in the VM test's guest (bench/run --vm starts
it after building the server and the launcher; not a test).

  vm.py --server OUT --launcher OUT --built-from TEXT [bench.py options]

Boots the guest of checks/vm/run (its image, its qemu command line and its
boot loop, imported, not copied: Debian 12, Linux 6.1, systemd 252, cgroup
v2 alone, the host's /nix/store read-only over 9p) with bench/guest.py as
the guest's driver, which runs bench.py twice: as root in a delegated
scope of the system manager, and as an unprivileged user in a delegated
scope of her systemd user manager. Every server then runs each run in a
cgroup v2 of its own, created there by clone3(CLONE_INTO_CGROUP); the
direct baselines run in the same guest, one of them with such a cgroup.

Under TCG (no hardware virtualisation here) the guest's CPU is emulated:
its absolute milliseconds are not the host's, only the ratios to the
baselines of the same guest run compare. The passes are shorter (PASSES),
tokens are not counted (the guest has no tokenizer; bench/run's host pass
counts them) and the fixture wrappers are left out. Options given are
passed to bench.py in both passes, after these.

Prints the guest's output as it comes, then one summary of both passes.
Logs: bench/.work/vm/ (results.log: what the guest printed; console.log,
qemu.log). Exit status 1 when the guest did not boot or finish, or a pass
could not measure a figure.
"""

import argparse
import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = HERE / ".work" / "vm"
sys.path.insert(0, str(HERE))
import bench  # noqa: E402
from stats import table  # noqa: E402

MODULES = ["bench.py", "async_load.py", "cgroups.py", "languages.py", "mcp_client.py", "procs.py", "stats.py"]

# What each pass runs, sized for an emulated CPU (a jailed print(1) takes
# 25 to 40 times as long as on the host): fewer ephemeral runs after fewer
# warm-up rounds, fewer cgroup start costs; the load's 32 sessions are
# created 4 at a time before their calls at once (32 at once cannot start
# within a call's 30 s there). bench.py says the counts in every heading.
# Every server gets an untimed print(1) first (--warm-call: under emulation
# its start-up probe can time out, which that call absorbs and says). One
# asyncio load, not three: each costs tens of seconds there.
COMMON = ["--warmup", "2", "--warm-call", "--start-costs", "20", "--starts", "5", "--session-calls", "100",
          "--creations", "5", "--sessions", "32", "--calls", "50", "--create-at-once", "4",
          "--load-repeats", "1"]
PASSES = {
    "root": ("as root in a delegated scope of the system manager (per-run cgroups v2, clone3)",
             ["--runs", "12", *COMMON]),
    "user": ("as a user in a delegated scope of her systemd user manager (per-run cgroups v2, clone3)",
             ["--runs", "10", *COMMON]),
}


def bench_args_error(bench_args):
    """Why bench.py would refuse `bench_args` (checked here, before the
    guest boots), or None."""
    parser = bench.parser()
    parser.exit_on_error = False
    try:
        _, unknown = parser.parse_known_args(["--server", "-", "--launcher", "-", "--work", "-", *bench_args])
    except argparse.ArgumentError as e:
        return str(e)
    if unknown:
        return f"not options of bench.py: {' '.join(unknown)}"
    return None


def vm_run():
    """checks/vm/run, imported as a module (its main() is not run)."""
    path = ROOT / "checks" / "vm" / "run"
    loader = importlib.machinery.SourceFileLoader("checks_vm_run", str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def guest_argv(vm, images, accel, shared, memory, cpus):
    """qemu's command line for the benchmark: checks/vm/run's, with its
    kernel arguments (cgroup v2 alone), this benchmark's share and logs."""
    return vm.qemu_argv(images, accel, shared, WORK / "results.log", WORK / "console.log", memory, cpus)


class Stream:
    """What boot() (checks/vm/run) hands each line of the guest to: shown as
    it comes and kept; a failure to boot or finish is kept too."""

    def __init__(self):
        self.lines = []
        self.failures = []

    def line(self, line):
        print(line, flush=True)
        self.lines.append(line)

    def fail(self, name, reason, log=None):
        self.failures.append(f"{name}: {reason}")
        print(f"FAIL - vm: {name}: {reason}", flush=True)
        if log and Path(log).exists():
            for tail in Path(log).read_text(errors="replace").splitlines()[-25:]:
                print(f"    {tail}")


def parse_table(lines):
    """The rows of a table stats.table printed (header, dashes, rows): each
    a list of cells, cut where the dashes line's columns start."""
    if len(lines) < 2 or not set(lines[1]) <= {"-", " "}:
        return []
    starts = [0] + [i + 2 for i in range(len(lines[1]) - 1) if lines[1][i:i + 2] == "  "]
    cut = lambda line: [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
    return [cut(line) for line in lines[2:]]


def passes(lines):
    """{pass name: {"what", "status", "rows", "not_measured", "heading"}}
    from the guest's output: each pass framed by `vm-bench-pass NAME: WHAT`
    and `vm-bench-pass-end NAME: exit N`; its summary is the table after
    its last `== summary` line, then its `NOT MEASURED:` lines."""
    found, current, body = {}, None, []
    for line in lines:
        if line.startswith("vm-bench-pass "):
            name, _, what = line[len("vm-bench-pass "):].partition(": ")
            current, body = name, []
            found[name] = {"what": what, "status": None, "rows": [], "not_measured": [], "heading": None}
        elif line.startswith("vm-bench-pass-end ") and current:
            status = line.rpartition("exit ")[2]
            found[current]["status"] = int(status) if status.lstrip("-").isdigit() else None
            summary = [i for i, text in enumerate(body) if text.startswith("== summary")]
            if summary:
                at = summary[-1]
                found[current]["heading"] = body[at][3:]
                tail = body[at + 1:]
                rows = [text for text in tail if text and not text.startswith("NOT MEASURED: ")]
                found[current]["rows"] = parse_table(rows)
                found[current]["not_measured"] = [text[len("NOT MEASURED: "):] for text in tail
                                                  if text.startswith("NOT MEASURED: ")]
            current = None
        elif current:
            body.append(line)
    return found


def combined(found, order=("root", "user")):
    """One table of the passes' summaries side by side: figure, each pass's
    value, the target (the verdicts are left out: under emulation only the
    ratios compare with the host's)."""
    names = [name for name in order if name in found] + [name for name in found if name not in order]
    figures, values, targets = [], {}, {}
    for name in names:
        for row in found[name]["rows"]:
            if len(row) < 3:
                continue
            figure = row[0]
            if figure not in values:
                figures.append(figure)
                values[figure] = {}
            values[figure][name] = row[1]
            targets.setdefault(figure, row[2])
    rows = [[figure] + [values[figure].get(name, "-") for name in names] + [targets[figure]] for figure in figures]
    return table(["figure"] + [f"as {name}" for name in names] + ["target (the host's)"], rows)


def share(vm, config):
    """The directory the guest mounts at /mnt/vmtest: this benchmark's guest
    driver where the image's unit looks for one, beside the VM test's guest
    library (`vm`: checks/vm/run), bench.py and its modules, config.json."""
    directory = WORK / "share"
    shutil.rmtree(directory, ignore_errors=True)
    (directory / "guest").mkdir(parents=True)
    (directory / "bench").mkdir()
    shutil.copy(HERE / "guest.py", directory / "guest" / "driver.py")
    for path in vm.GUEST_LIBRARY:
        shutil.copy(path, directory / "guest" / path.name)
    for name in MODULES:
        shutil.copy(HERE / name, directory / "bench" / name)
    (directory / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return directory


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True, help="the Nix-built server package")
    parser.add_argument("--launcher", required=True, help="the Nix-built launcher package")
    parser.add_argument("--built-from", default="?", help="which source they were built from")
    parser.add_argument("--accel", choices=["auto", "kvm", "tcg"], default=os.environ.get("NSM_VM_ACCEL", "auto"),
                        help="qemu's accelerator, as checks/vm/run's")
    parser.add_argument("--memory", type=int, default=3072, help="guest memory in MiB")
    parser.add_argument("--timeout", type=int, default=840, help="seconds for the boot and both passes")
    parser.add_argument("--pass", dest="only", choices=sorted(PASSES), help="one pass only (bench.py has an --only of its own)")
    args, bench_args = parser.parse_known_args()
    wrong = bench_args_error(bench_args)
    if wrong:
        sys.exit(f"bench/vm.py: {wrong} (bench/run --help lists bench.py's options)")
    started = time.monotonic()
    vm = vm_run()
    if not shutil.which(vm.QEMU):
        sys.exit(f"bench/vm.py: {vm.QEMU} is not installed (apt-get install qemu-system-x86); see CONTRIBUTING")
    WORK.mkdir(parents=True, exist_ok=True)
    try:
        images = vm.image.build(vm.image.default_cache(), say=lambda line: print(line, flush=True))
    except vm.image.BuildError as e:
        sys.exit(f"bench/vm.py: the guest image does not build: {e}")
    accel, why = vm.accelerator(args.accel)
    kernel = (images / "kernel-version").read_text().strip()
    cpus = min(2, os.cpu_count() or 1)
    context = f"cgroup v2, VM under {accel.upper()}"
    print(f"# bench vm: {context} ({why}); Debian 12 guest, Linux {kernel}, {cpus} CPUs, {args.memory} MiB", flush=True)
    names = [args.only] if args.only else list(PASSES)
    config = {
        "server": args.server, "launcher": args.launcher, "built_from": args.built_from, "context": context,
        "passes": names, "what": {name: PASSES[name][0] for name in names},
        "args": {name: PASSES[name][1] + bench_args for name in names},
    }
    shared = share(vm, config)
    results, console = WORK / "results.log", WORK / "console.log"
    argv = guest_argv(vm, images, accel, shared, args.memory, cpus)
    stream = Stream()
    vm.boot(argv, results, console, stream, 180, args.timeout)

    found = passes(stream.lines)
    print(f"\n== summary of the VM passes ({context}: Debian 12, Linux {kernel}, systemd, {cpus} CPUs; "
          f"{time.monotonic() - started:.0f} s in all)")
    print(f"   every figure is a ratio to a baseline measured in the same guest run; the milliseconds are the "
          f"{'emulated' if accel == 'tcg' else 'virtual'} machine's, not comparable with the host's; tokens are "
          f"counted by the host pass only")
    for line in combined(found):
        print(line)
    status = 0
    for name in names:
        got = found.get(name)
        if got is None or got["status"] is None:
            print(f"NOT MEASURED: the {name} pass did not finish")
            status = 1
            continue
        for line in got["not_measured"]:
            print(f"NOT MEASURED ({name}): {line}")
        if got["status"] != 0 or not got["rows"]:
            status = 1
    if stream.failures:
        status = 1
    sys.exit(status)


if __name__ == "__main__":
    main()
