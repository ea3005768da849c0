"""Percentiles and formatting of the benchmark's samples."""

import math


def percentile(samples, p):
    """Nearest-rank percentile of a non-empty list (p in 0..100)."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(samples):
    """p50, p90, p99, mean, min and count of a list of seconds, in ms."""
    ms = [s * 1000 for s in samples]
    return {
        "n": len(ms),
        "p50": percentile(ms, 50),
        "p90": percentile(ms, 90),
        "p99": percentile(ms, 99),
        "mean": sum(ms) / len(ms),
        "min": min(ms),
    }


def ms(value):
    return f"{value:.2f} ms"


def mib(kib):
    return f"{kib / 1024:.1f} MiB"


def table(header, rows):
    """Lines of a plain text table, columns padded to their widest cell."""
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    line = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
    out = [line(cells[0]), line(["-" * w for w in widths])]
    out.extend(line(row) for row in cells[1:])
    return out


def cpu_times(path="/proc/stat"):
    """The machine's CPU time so far, in ticks: all of it, what the
    hypervisor gave to others (steal), and what was busy (neither idle,
    iowait nor steal); None where /proc/stat does not say."""
    try:
        with open(path) as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal (guest time is in user).
    ticks = [int(v) for v in fields[1:9]]
    return {"total": sum(ticks), "steal": ticks[7], "busy": sum(ticks) - ticks[3] - ticks[4] - ticks[7]}


def steal_share(before, after):
    """The share of the CPUs' time stolen between two cpu_times()."""
    if before is None or after is None or after["total"] <= before["total"]:
        return None
    return (after["steal"] - before["steal"]) / (after["total"] - before["total"])
