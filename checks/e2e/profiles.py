#!/usr/bin/env python3
"""Profiles, the Nix side, end to end (standard library only).

Run by checks/run as root and as an unprivileged user against what it built:
the server's manifest carries the built-in profiles, every field present;
and the Nix-built run wrappers obey the two variables the launcher sets for
a profiled session (lib/jail/sessionLimits.nix, kernelBudgets.nix,
network.nix): NIX_SANDBOX_LIMITS lowers the jail's rlimits (never raises
them) and what the runtimes are told, NIX_SANDBOX_NETWORK_OFF=1 takes the
network away from a `network = true` jail and from one with a network
policy. As root, also the cgroup check: the wrapper holds the launcher's
cgroup to the lowered memory limit. Prints `ok - LABEL: name`,
`FAIL - LABEL: name: reason` or `skip - LABEL: name: reason` lines, exits 1
when a test failed.

  profiles.py --label root --server OUT --online OUT --egress OUT --shell OUT
"""

import argparse
import errno
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e import Suite, check, greeter, manifest_of, only_env, run, show  # noqa: E402

# presets/profiles.nix as the manifest has it (docs/contracts.md, contract 1).
BUILT_IN = {
    "strict": {
        "description": "No network, no added packages, no project; small limits: for code you do not trust",
        "network": False,
        "packages": False,
        "project": "none",
        "limits": {"memory_mb": 512, "cpu_s": 60, "timeout_s": 30, "max_timeout_s": 120,
                   "nofile": 256, "file_mb": 64, "workspace_mb": 64},
    },
    "offline-review": {
        "description": "Reads the project read-only, without network or added packages: review and test, "
                       "change nothing",
        "network": False,
        "packages": False,
        "project": "read-only",
        "limits": {},
    },
    "build-install": {
        "description": "The environment as configured: its network policy, the server's packages, "
                       "the project as the server mounts it",
        "network": None,
        "packages": True,
        "project": None,
        "limits": {},
    },
}

# What a jail sees of the network: its interfaces, and whether it reaches
# the host's listener on 127.0.0.1:PORT.
PROBE = (
    "import socket\n"
    "names = sorted(line.split(':')[0].strip() for line in open('/proc/net/dev').readlines()[2:])\n"
    "print(' '.join(names))\n"
    "try:\n"
    "    s = socket.create_connection(('127.0.0.1', {port}), timeout=10)\n"
    "    print(s.recv(16).decode())\n"
    "except OSError as e:\n"
    "    print('unreachable', type(e).__name__)\n"
)

# A request through the jail's proxy variables (HTTP_PROXY, the egress
# bridge): it must fail, and not by waiting out its timeout.
THROUGH_PROXY = (
    "import os, socket, urllib.request\n"
    "print(os.environ.get('HTTP_PROXY'))\n"
    "try:\n"
    "    urllib.request.urlopen('http://100.51.100.10/', timeout=20)\n"
    "    print('reached')\n"
    "except socket.timeout:\n"
    "    print('timed out')\n"
    "except OSError as e:\n"
    "    print('refused' if 'timed out' not in str(e) else 'timed out', type(e).__name__)\n"
)

# The limits a shell jail holds, and what its runtimes are told.
ULIMITS = (
    'echo "$(ulimit -n) $(ulimit -t) $(ulimit -H -t) $(ulimit -f) $(ulimit -d)"\n'
    'echo "$NODE_OPTIONS $GOMEMLIMIT $JAVA_TOOL_OPTIONS"\n'
    'echo "${NIX_SANDBOX_LIMITS-unset} ${NIX_SANDBOX_NETWORK_OFF-unset}"\n'
)


def t_manifest(server):
    profiles = manifest_of(server).get("profiles")
    check(profiles == BUILT_IN, f"the manifest's profiles are {json.dumps(profiles)}")


def t_host_network_off(online):
    _, entry = only_env(online)
    check(entry["network"] is True, f"the online environment's network is {entry['network']!r}, not true")
    port, end = greeter()
    try:
        code = PROBE.format(port=port).encode()
        opened = run(entry["run"], stdin=code)
        check(opened.returncode == 0, f"probe failed without the variable: {show(opened)}")
        lines = opened.stdout.decode().splitlines()
        check(lines[-1] == "hello", f"without NIX_SANDBOX_NETWORK_OFF the jail did not reach the host: {show(opened)}")
        closed = run(entry["run"], stdin=code, extra_env={"NIX_SANDBOX_NETWORK_OFF": "1"})
        check(closed.returncode == 0, f"probe failed with NIX_SANDBOX_NETWORK_OFF=1: {show(closed)}")
        lines = closed.stdout.decode().splitlines()
        check(lines[0] == "lo", f"with NIX_SANDBOX_NETWORK_OFF=1 the jail has interfaces {lines[0]!r}, not only lo")
        check(lines[-1].startswith("unreachable"),
              f"with NIX_SANDBOX_NETWORK_OFF=1 the jail reached the host's listener: {show(closed)}")
        # Another value is not 1: the host's network stays.
        other = run(entry["run"], stdin=code, extra_env={"NIX_SANDBOX_NETWORK_OFF": "yes"})
        check(other.stdout.decode().splitlines()[-1:] == ["hello"],
              f"NIX_SANDBOX_NETWORK_OFF=yes took the network away: {show(other)}")
    finally:
        end()


def t_policy_network_off(egress):
    _, entry = only_env(egress)
    check(isinstance(entry["network"], dict), f"the egress environment's network is {entry['network']!r}, not a policy")
    # Without the variable, and without the launcher's socket, it refuses to start.
    refused = run(entry["run"], stdin=b"print(1)\n")
    check(refused.returncode == 2 and b"NIX_SANDBOX_EGRESS_SOCKET" in refused.stderr,
          f"without a socket the policy's wrapper did not refuse: {show(refused)}")
    port, end = greeter()
    try:
        probe = run(entry["run"], stdin=PROBE.format(port=port).encode(),
                    extra_env={"NIX_SANDBOX_NETWORK_OFF": "1"})
    finally:
        end()
    check(probe.returncode == 0, f"with NIX_SANDBOX_NETWORK_OFF=1 the jail did not start: {show(probe)}")
    lines = probe.stdout.decode().splitlines()
    check(lines[0] == "lo", f"the jail has interfaces {lines[0]!r}, not only lo")
    check(lines[-1].startswith("unreachable"), f"the jail reached the host's listener: {show(probe)}")
    request = run(entry["run"], stdin=THROUGH_PROXY.encode(), extra_env={"NIX_SANDBOX_NETWORK_OFF": "1"})
    lines = request.stdout.decode().splitlines()
    check(request.returncode == 0 and lines[:1] == ["http://127.0.0.1:3128"],
          f"the proxy variables are not the bridge's: {show(request)}")
    check(lines[-1].startswith("refused"), f"a request through the proxy did not fail at once: {show(request)}")


def shell_limits(shell, limits=None):
    """The shell jail's (nofile, cpu, cpu hard, file KiB, data KiB), its
    runtimes' line, and what it sees of the two variables."""
    _, entry = only_env(shell)
    extra = {"NIX_SANDBOX_LIMITS": limits} if limits is not None else None
    result = run(entry["run"], stdin=ULIMITS.encode(), extra_env=extra)
    check(result.returncode == 0, f"the shell jail failed with NIX_SANDBOX_LIMITS={limits!r}: {show(result)}")
    lines = result.stdout.decode().splitlines()
    check(len(lines) == 3, f"unexpected output: {show(result)}")
    return lines[0].split(), lines[1], lines[2]


def expected(limits):
    """What ULIMITS prints for these limits."""
    memory = limits["memory_mb"]
    return ([str(limits["nofile"]), str(limits["cpu_s"]), str(limits["cpu_s"] + 1),
             str(limits["file_mb"] * 1024), str(memory * 1024)],
            f"--max-old-space-size={memory * 3 // 4} {memory * 3 // 4}MiB -XX:MaxRAM={memory}m "
            "-XX:MaxRAMPercentage=75 -XX:+UseSerialGC -XX:CICompilerCount=2")


def t_limits(shell):
    _, entry = only_env(shell)
    own = entry["limits"]
    baseline, runtimes, seen = shell_limits(shell)
    check((baseline, runtimes) == expected(own), f"without NIX_SANDBOX_LIMITS: {baseline}, {runtimes!r}; "
          f"wanted {expected(own)}")
    lowered = {"nofile": 100, "cpu_s": 5, "file_mb": 3, "memory_mb": 300}
    got, runtimes, seen = shell_limits(shell, "nofile=100 cpu_s=5 file_mb=3 memory_mb=300")
    check((got, runtimes) == expected(lowered), f"NIX_SANDBOX_LIMITS lowered to {got}, {runtimes!r}; "
          f"wanted {expected(lowered)}")
    check(seen == "unset unset", f"the jail sees the launcher's variables: {seen!r}")
    higher = " ".join(f"{key}={own[key] * 4}" for key in ["nofile", "cpu_s", "file_mb", "memory_mb"])
    got, runtimes, _ = shell_limits(shell, higher)
    check((got, runtimes) == expected(own), f"NIX_SANDBOX_LIMITS={higher!r} raised them: {got}, {runtimes!r}")


def t_limits_malformed(shell):
    _, entry = only_env(shell)
    own = entry["limits"]
    # Only file_mb=3 is a pair of a key it lowers with a positive number.
    got, _, _ = shell_limits(
        shell, "nofile=abc cpu_s=-1 memory_mb=0 bogus =5 pids=1 nofile==7 cpu_s=1e3 "
               "memory_mb=99999999999999999999 nofile=12;ls file_mb=3")
    want = expected({**own, "file_mb": 3})[0]
    check(got == want, f"malformed pairs changed the limits: {got}, wanted {want}")


def t_cgroup(shell):
    """As root: a v1 memory cgroup (or v2's memory.max) the wrapper is moved
    into, at the environment's limit, is refused for a session lowered to
    300 MiB; at 300 MiB it runs."""
    _, entry = only_env(shell)
    own = entry["limits"]["memory_mb"]
    mine = Path("/proc/self/cgroup").read_text().splitlines()
    v1 = next((line.split(":", 2)[2] for line in mine if line.split(":")[1] == "memory"), None)
    if v1 is not None:
        cgroup = Path(f"/sys/fs/cgroup/memory{v1}") / f"nsm-profiles.{os.getpid()}"
        limit_file = "memory.limit_in_bytes"
    else:
        cgroup = Path("/sys/fs/cgroup" + mine[0].split(":", 2)[2]) / f"nsm-profiles.{os.getpid()}"
        limit_file = "memory.max"
    cgroup.mkdir()
    try:
        if limit_file == "memory.max":
            (cgroup / "memory.swap.max").write_text("0")
        argv = ["sh", "-c", 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"', "sh", str(cgroup),
                *entry["run"]]
        variables = {"NIX_SANDBOX_CGROUP": str(cgroup), "NIX_SANDBOX_LIMITS": "memory_mb=300"}

        def limit(mb):
            (cgroup / limit_file).write_text(str(mb << 20))
            memsw = cgroup / "memory.memsw.limit_in_bytes"
            if memsw.exists():
                memsw.write_text(str(mb << 20))

        limit(own)
        refused = run(argv, stdin=b"echo in\n", extra_env=variables)
        check(refused.returncode == 2 and f"not at most {300 << 20}".encode() in refused.stderr,
              f"a cgroup at the environment's {own} MiB passed for a session lowered to 300 MiB: {show(refused)}")
        plain = run(argv, stdin=b"echo in\n", extra_env={"NIX_SANDBOX_CGROUP": str(cgroup)})
        check(plain.stdout == b"in\n", f"the cgroup at {own} MiB was refused without NIX_SANDBOX_LIMITS: {show(plain)}")
        limit(300)
        lowered = run(argv, stdin=b"echo in\n", extra_env=variables)
        check(lowered.stdout == b"in\n", f"a cgroup at 300 MiB was refused for memory_mb=300: {show(lowered)}")
    finally:
        remove_cgroup(cgroup)


def remove_cgroup(cgroup):
    """Removes `cgroup` once the last jail's processes have left it: they
    are still being torn down for a moment after its wrapper's exit (the
    kernel refuses the removal with EBUSY meanwhile)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            cgroup.rmdir()
            return
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", default=os.environ.get("USER") or str(os.getuid()))
    parser.add_argument("--server", required=True, help="the flake's server, with the built-in profiles")
    parser.add_argument("--online", required=True, help="a network = true sandbox (Python)")
    parser.add_argument("--egress", required=True, help="a sandbox whose network is a policy (Python)")
    parser.add_argument("--shell", required=True, help="the shell preset's sandbox")
    args = parser.parse_args()
    suite = Suite(args.label)
    suite.test("the server's manifest has the built-in profiles, every field present", t_manifest, args.server)
    suite.test("network = true: NIX_SANDBOX_NETWORK_OFF=1 leaves only loopback and no way to the host "
               "(the host's network without it)", t_host_network_off, args.online)
    suite.test("a network policy: NIX_SANDBOX_NETWORK_OFF=1 starts without the proxy's socket, only loopback, "
               "a request through the proxy fails at once", t_policy_network_off, args.egress)
    suite.test("NIX_SANDBOX_LIMITS lowers nofile, cpu_s, file_mb and memory_mb (rlimits and the runtimes' "
               "memory), never raises them, and the jail does not see it", t_limits, args.shell)
    suite.test("NIX_SANDBOX_LIMITS: malformed pairs and other keys are ignored", t_limits_malformed, args.shell)
    if os.getuid() == 0:
        suite.test("NIX_SANDBOX_LIMITS: the launcher's cgroup is held to the lowered memory limit",
                   t_cgroup, args.shell)
    else:
        suite.skip("NIX_SANDBOX_LIMITS: the launcher's cgroup is held to the lowered memory limit",
                   "making a cgroup needs root")
    sys.exit(1 if suite.failed else 0)


if __name__ == "__main__":
    main()
