#!/usr/bin/env python3
"""Tests of what bench/vm.py reads from the guest's output: the passes, their
summary tables, and the summary of both (no VM, no timing).

  python3 bench/test_vm.py      ends with `bench: N passed, N failed`
"""

import re
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vm  # noqa: E402
from stats import table  # noqa: E402

ROWS = [
    ["ephemeral print(1): MCP / wrapper direct, p50", "1.04x (310.20 ms / 298.10 ms)", "<= 1.1x", "PASS"],
    ["ephemeral: MCP minus wrapper direct, p50", "12.10 ms; a run cgroup alone adds 3.00 ms", "-", "-"],
    ["tokens: tools/list + instructions", "not counted here (the host pass counts them)", "-", "-"],
    ["launcher peak RSS (VmHWM) under 32 x 10 (Nix-built)", "8.6 MiB", "< 8.0 MiB", "MISS"],
]


def guest_output(name, rows, status=0, not_measured=()):
    """A pass as bench/guest.py frames bench.py's output."""
    lines = [f"vm-bench-pass {name}: as {name}, in a delegated scope", "nix-sandbox-mcp benchmark, ...",
             "== ephemeral print(1) ...",
             "   what  min  p50",  # a section's own table, not the summary
             "   ----  ---  ---",
             "",
             "CPU steal by step: ephemeral 0.0%, sessions 3.1%",
             f"== summary (cgroup v2, VM under TCG, {name}, 2026-11-23, 2 cores, 300 s)"]
    lines += table(["figure", "value", "target", "verdict"], rows)
    lines += [f"NOT MEASURED: {line}" for line in not_measured]
    return lines + [f"vm-bench-pass-end {name}: exit {status}"]


class GuestOutput(unittest.TestCase):
    def test_a_summary_table_reads_back_cell_by_cell(self):
        self.assertEqual(vm.parse_table(table(["figure", "value", "target", "verdict"], ROWS)), ROWS)

    def test_each_pass_has_its_summary_status_and_unmeasured(self):
        user_rows = [[ROWS[0][0], "1.01x (250.00 ms / 247.00 ms)", "<= 1.1x", "PASS"]]
        lines = ["# vm-bench: the driver started 9.0 s after the kernel",
                 *guest_output("root", ROWS),
                 *guest_output("user", user_rows, status=1, not_measured=["sessions (Nix-built): x"])]
        found = vm.passes(lines)
        self.assertEqual(sorted(found), ["root", "user"])
        self.assertEqual(found["root"]["rows"], ROWS)
        self.assertEqual(found["root"]["status"], 0)
        self.assertEqual(found["root"]["not_measured"], [])
        self.assertTrue(found["root"]["heading"].startswith("summary (cgroup v2, VM under TCG, root"))
        self.assertEqual(found["user"]["rows"], user_rows)
        self.assertEqual(found["user"]["status"], 1)
        self.assertEqual(found["user"]["not_measured"], ["sessions (Nix-built): x"])

    def test_a_pass_cut_off_has_no_status(self):
        lines = guest_output("root", ROWS)[:-1]  # the machine ended before the pass did
        found = vm.passes(lines)
        self.assertIsNone(found["root"]["status"])

    def test_both_passes_side_by_side_by_figure(self):
        user_rows = [ROWS[3][:1] + ["7.9 MiB", "< 8.0 MiB", "PASS"], ROWS[0][:1] + ["0.99x", "<= 1.1x", "PASS"]]
        found = vm.passes([*guest_output("root", ROWS), *guest_output("user", user_rows)])
        got = vm.parse_table(vm.combined(found))
        self.assertEqual(got[0], [ROWS[0][0], ROWS[0][1], "0.99x", "<= 1.1x"])
        self.assertEqual(got[1], [ROWS[1][0], ROWS[1][1], "-", "-"])
        self.assertEqual(got[3], [ROWS[3][0], "8.6 MiB", "7.9 MiB", "< 8.0 MiB"])
        header = re.split(r"\s{2,}", vm.combined(found)[0].strip())
        self.assertEqual(header, ["figure", "as root", "as user", "target (the host's)"])



class Options(unittest.TestCase):
    def test_options_passed_on_to_bench_py_are_checked_before_the_boot(self):
        self.assertIsNone(vm.bench_args_error(["--runs", "5", "--calls", "20"]))
        self.assertIn("--nope", vm.bench_args_error(["--nope"]))
        self.assertIn("invalid int value", vm.bench_args_error(["--runs", "five"]))


class Share(unittest.TestCase):
    def test_every_module_bench_py_imports_goes_to_the_guest(self):
        here = Path(vm.__file__).parent
        imported = set()
        for path in [here / name for name in vm.MODULES]:
            for line in path.read_text().splitlines():
                found = re.match(r"(?:from (\w+) import|import (\w+))", line.strip())
                name = found and (found.group(1) or found.group(2))
                if name and (here / f"{name}.py").exists():
                    imported.add(f"{name}.py")
        self.assertEqual(sorted(imported - set(vm.MODULES)), [])


class Boot(unittest.TestCase):
    def test_the_guest_boots_on_cgroup_v2_with_the_benchmark_shared(self):
        argv = vm.guest_argv(vm.vm_run(), Path("/images"), "tcg", Path("/share"), 3072, 2)
        kernel = argv[argv.index("-append") + 1].split()
        self.assertIn("systemd.unified_cgroup_hierarchy=1", kernel)
        self.assertNotIn("systemd.unified_cgroup_hierarchy=0", kernel)
        self.assertIn("local,id=vmtest,path=/share,security_model=none,readonly=on", argv)
        self.assertIn(f"file,id=results,path={vm.WORK / 'results.log'}", argv)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=1).result
    failed = len(result.failures) + len(result.errors)
    print(f"bench: {result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
