#!/usr/bin/env python3
"""The VM test's driver, inside the guest (checks/vm/run boots it).

systemd starts it once the system is up (nsm-vm-test.service, baked into
the image by checks/vm/image.py), as root, with the host's share mounted
read-only at /mnt/vmtest: this file, vmlib.py, e2e.py and served.py
(the harness's MCP clients), tests/, and config.json (the store paths
checks/vm/run built). It runs every tests/*.py in name order, each test
function (`test_*`, in the order the file defines them) with a `Vm`, and
prints one line per test on its stdout, the virtconsole the host reads:
`ok - vm: NAME`, `FAIL - vm: NAME: REASON`, `skip - vm: NAME: REASON`, and
`info - vm: ...` lines of facts; last `vm-driver-end`. The machine powers
off when it exits.

A test file may define `setup(vm)`, run before its tests: when it fails,
that is one FAIL and the file's tests are not run.
"""

import importlib.util
import json
import sys
import time
import traceback
from pathlib import Path

SHARE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(SHARE / "guest"))
from vmlib import Failed, Skipped, Vm  # noqa: E402


def outcome(name, fn, *args):
    """Runs fn; prints its line. True when it passed."""
    started = time.monotonic()
    try:
        fn(*args)
    except Failed as e:
        print(f"FAIL - vm: {name}: {e}", flush=True)
        return False
    except Skipped as e:
        print(f"skip - vm: {name}: {e}", flush=True)
        return True
    except Exception as e:  # a crash of the test is a failure too
        where = traceback.extract_tb(e.__traceback__)[-1]
        print(f"FAIL - vm: {name}: {type(e).__name__}: {e} ({Path(where.filename).name} line {where.lineno})",
              flush=True)
        return False
    print(f"ok - vm: {name} ({time.monotonic() - started:.1f} s)", flush=True)
    return True


def load(path):
    spec = importlib.util.spec_from_file_location(f"vmtest_{path.stem.replace('-', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    print(f"info - vm: the driver started {uptime:.1f} s after the kernel did", flush=True)
    vm = Vm(json.loads((SHARE / "config.json").read_text()))
    only = vm.config.get("only") or []
    for path in sorted((SHARE / "tests").glob("*.py")):
        if only and path.stem not in only:
            continue
        print(f"# {path.name}", flush=True)
        try:
            module = load(path)
        except Exception as e:
            print(f"FAIL - vm: tests/{path.name} loads: {type(e).__name__}: {e}", flush=True)
            continue
        setup = getattr(module, "setup", None)
        if setup and not outcome(f"{path.stem}: {(setup.__doc__ or 'setup').strip().splitlines()[0]}", setup, vm):
            continue
        tests = [fn for name, fn in vars(module).items() if name.startswith("test_") and callable(fn)]
        for fn in tests:
            title = (fn.__doc__ or fn.__name__).strip().splitlines()[0]
            outcome(f"{path.stem}: {title}", fn, vm)
    print("vm-driver-end", flush=True)


if __name__ == "__main__":
    main()
