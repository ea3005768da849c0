"""What a jail shares with the host, attacked (checks/e2e/adversarial.py runs
these cases, as root and as an unprivileged user).

- identity: the jail's hostname and /etc/passwd name nothing of the host;
- socket families: a jail opens only the families a code runner needs (no
  vsock, whose one port space is the machine's, no netlink beyond routes);
- kernel budgets: a jail that takes every inotify instance and watch,
  pending signal, POSIX message queue byte and fanotify group it can leaves
  its host user (and, under a root server, the other jails) theirs;
- System V IPC: a jail that makes every shared memory segment, message
  queue and semaphore set it can holds at most its IPC namespace's limits
  (lib/kernelBudgets.nix `ipc`), which it cannot raise, and they are gone
  with its session;
- reach: under a root server, a host process of uid 65534 (nobody), or of
  another jail's uid, cannot take a session agent's channel
  (pidfd_getfd), read its memory (process_vm_readv) or enter its jail
  (setns) to read its files; every jail has a uid of its own.

Each case takes the adversarial suite's Server (`s`) and raises Failed
through check() when the host shares what it must not.
"""

import ctypes
import errno
import json
import os
import pwd
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e import Failed, check, descendants, processes  # noqa: E402

# --- identity -------------------------------------------------------------------

IDENTITY = r"""
import json, os, socket
print(json.dumps({
    'hostname': open('/proc/sys/kernel/hostname').read().strip(),
    'nodename': os.uname().nodename,
    'gethostname': socket.gethostname(),
    'passwd': open('/etc/passwd').read(),
    'group': open('/etc/group').read(),
    'uid': os.getuid(),
    'gid': os.getgid(),
    'home': os.environ.get('HOME'),
    'mounts': [line.split()[4] for line in open('/proc/self/mountinfo')],
}))
"""

# The jail's own users and groups (lib/jail/identity.nix).
PASSWD = ["root:x:0:0:root:/root:/bin/sh", "sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh",
          "nobody:x:65534:65534:nobody:/nonexistent:/bin/sh"]
GROUP = ["root:x:0:", "sandbox:x:1000:", "nogroup:x:65534:"]


def c_identity(s, server_home):
    """The jail's hostname is `sandbox`, not the host's; /etc/passwd and
    /etc/group are the jail's own (root, sandbox as uid 1000 at
    /home/sandbox, nobody), naming neither the server's login nor its home,
    and the server's home is mounted nowhere."""
    host = socket.gethostname()
    login = pwd.getpwuid(os.geteuid()).pw_name
    for how, call in [("run", lambda c: s.run("tight-python", c)),
                      ("session", lambda c: s.call({"env": "tight-python", "session": "identity", "code": c}))]:
        _, text, _ = call(IDENTITY)
        got = json.loads(text)
        check(got["hostname"] == got["nodename"] == got["gethostname"] == "sandbox",
              f"{how}: the jail's hostname is {got['hostname']!r} (the host's is {host!r})")
        check(got["passwd"].splitlines() == PASSWD, f"{how}: /etc/passwd is {got['passwd']!r}")
        check(got["group"].splitlines() == GROUP, f"{how}: /etc/group is {got['group']!r}")
        check((got["uid"], got["gid"], got["home"]) == (1000, 1000, "/home/sandbox"),
              f"{how}: the code runs as uid {got['uid']}, gid {got['gid']}, HOME {got['home']}")
        # The exact passwd above names no other login; root's home is /root
        # whoever runs the server.
        check(login in ("root", "nobody") or login not in got["passwd"],
              f"{how}: /etc/passwd names the server's login {login}")
        check(server_home not in got["mounts"],
              f"{how}: the server's home {server_home} is mounted in the jail: {got['mounts']}")


# --- socket families -------------------------------------------------------------

VSOCK_PORT = 40000 + os.getpid() % 20000

FAMILIES = r"""
import errno, json, socket
out = {}
def name(e):
    return errno.errorcode.get(e.errno, str(e.errno))
def attempt(label, family, type_, proto=0):
    try:
        s = socket.socket(family, type_, proto)
    except OSError as e:
        out[label] = name(e)
        return None
    out[label] = 'opened'
    HELD.append(s)
    return s
HELD = globals().setdefault('HELD', [])
vsock = attempt('vsock', 40, socket.SOCK_STREAM)
if vsock is not None:
    try:
        vsock.bind((0xFFFFFFFF, PORT))
        vsock.listen(1)
        out['vsock'] = 'listening'
    except OSError as e:
        out['vsock'] = 'opened, bind ' + name(e)
for label, family, type_, proto in [
        ('unix', 1, 1, 0), ('inet', 2, 1, 0), ('inet6', 10, 2, 0), ('netlink_route', 16, 2, 0),
        ('netlink_sock_diag', 16, 2, 4), ('netlink_uevent', 16, 2, 15), ('netlink_generic', 16, 2, 16),
        ('netlink_audit', 16, 2, 9), ('alg', 38, 5, 0), ('tipc', 30, 5, 0), ('rds', 21, 5, 0),
        ('kcm', 41, 2, 0), ('can', 29, 3, 1), ('bluetooth', 31, 1, 3), ('xdp', 44, 3, 0),
        ('packet', 17, 3, 0), ('key', 15, 3, 2), ('smc', 43, 1, 0), ('rxrpc', 33, 2, 2),
        ('sctp', 2, 1, 132), ('dccp', 2, 6, 33)]:
    attempt(label, family, type_, proto)
print(json.dumps(out))
"""

# What the jail may open; every other family fails as on a kernel without
# it, and netlink protocols other than NETLINK_ROUTE fail as unsupported.
FAMILIES_OPEN = {"unix", "inet", "inet6", "netlink_route"}


def vsock_bind():
    """Whether a host process can bind VSOCK_PORT (an errno name or 'bound')."""
    try:
        with socket.socket(40, socket.SOCK_STREAM) as sock:
            sock.bind((0xFFFFFFFF, VSOCK_PORT))
        return "bound"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def c_socket_families(s):
    """A session opens the address families a code runner needs (Unix,
    IPv4, IPv6, netlink routes) and no other: vsock, whose port space the
    whole machine shares (a jail's listener would take a port from the
    host), fails as a family the kernel lacks, and so do netlink protocols
    other than routes, kernel crypto, TIPC, RDS, KCM, CAN, Bluetooth, XDP,
    packet, PF_KEY, SMC, RxRPC; SCTP and DCCP fail as unsupported protocols."""
    host_before = vsock_bind()
    _, text, _ = s.call({"env": "python", "session": "families", "code": FAMILIES.replace("PORT", str(VSOCK_PORT))})
    got = json.loads(text)
    host_after = vsock_bind()
    check(got["vsock"] == "EAFNOSUPPORT",
          f"AF_VSOCK in the jail: {got['vsock']} (the host's bind of the same port: {host_before} before, "
          f"{host_after} while the jail holds it)")
    check(host_after == host_before, f"the jail took the host's vsock port {VSOCK_PORT}: {host_after}")
    for label in FAMILIES_OPEN:
        check(got[label] == "opened", f"{label}: {got[label]}")
    refused = {k: v for k, v in got.items() if k not in FAMILIES_OPEN}
    want = {k: "EPROTONOSUPPORT" if k.startswith("netlink") or k in ("sctp", "dccp") else "EAFNOSUPPORT"
            for k in refused}
    check(refused == want, f"families and protocols the jail opened or that failed otherwise: "
          f"{ {k: v for k, v in refused.items() if v != want[k]} }")


# --- kernel budgets ---------------------------------------------------------------

# Takes every per-user kernel budget it can and keeps it (the session's
# globals hold it between calls); prints how much it got and why it stopped.
BUDGETS = r"""
import ctypes, errno, json, os, signal
libc = ctypes.CDLL(None, use_errno=True)
libc.mq_open.restype = ctypes.c_int
def why():
    n = ctypes.get_errno()
    return errno.errorcode.get(n, str(n))
HELD = globals().setdefault('HELD', [])
out = {}
fds = []
while len(fds) < 4096:
    fd = libc.inotify_init1(0o2000000)
    if fd < 0:
        out['inotify_stop'] = why()
        break
    fds.append(fd)
HELD.extend(fds)
out['inotify'] = len(fds)
watches = int(open('/proc/sys/fs/inotify/max_user_watches').read())
per = min(20000, watches // max(1, len(fds)) + 2)
os.makedirs('/tmp/watched', exist_ok=True)
paths = []
for i in range(per):
    p = '/tmp/watched/%d' % i
    open(p, 'w').close()
    paths.append(p.encode())
added, out['watches_stop'] = 0, 'none'
for fd in fds:
    for p in paths:
        if libc.inotify_add_watch(fd, p, 4) < 0:
            out['watches_stop'] = why()
            break
        added += 1
    if out['watches_stop'] != 'none':
        break
out['watches'] = added
sig = signal.SIGRTMIN
signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
limit = next(int(l.split()[3]) for l in open('/proc/self/limits') if l.startswith('Max pending signals'))
queued, out['signals_stop'] = 0, 'none'
while queued < limit + 16:
    if libc.sigqueue(os.getpid(), int(sig), ctypes.c_void_p(0)) != 0:
        out['signals_stop'] = why()
        break
    queued += 1
out['signals'] = queued
class Attr(ctypes.Structure):
    _fields_ = [('flags', ctypes.c_long), ('maxmsg', ctypes.c_long), ('msgsize', ctypes.c_long),
                ('curmsgs', ctypes.c_long), ('pad', ctypes.c_long * 4)]
queues, size, out['mqueue_stop'] = 0, 8192, 'none'
while size >= 1:
    attr = Attr(0, 10 if size == 8192 else 1, size, 0)
    q = libc.mq_open(b'/nsm-budget-%d' % queues, os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(attr))
    if q < 0:
        out['mqueue_stop'] = why()
        size //= 2
        continue
    HELD.append(q)
    queues += 1
out['mqueues'] = queues
groups, out['fanotify_stop'] = 0, 'none'
while groups < 4096:
    fd = libc.fanotify_init(0x200, 0)  # FAN_REPORT_FID, unprivileged
    if fd < 0:
        out['fanotify_stop'] = why()
        break
    HELD.append(fd)
    groups += 1
out['fanotify'] = groups
print(json.dumps(out))
"""

# One of each budget, as a host process or another jail: ok or the errno.
ONE_OF_EACH = r"""
import ctypes, errno, json, os, signal
libc = ctypes.CDLL(None, use_errno=True)
def why():
    n = ctypes.get_errno()
    return errno.errorcode.get(n, str(n))
out = {}
fd = libc.inotify_init1(0o2000000)
out['inotify'] = 'ok' if fd >= 0 else why()
if fd >= 0:
    out['watch'] = 'ok' if libc.inotify_add_watch(fd, b'/tmp', 4) >= 0 else why()
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
out['signal'] = 'ok' if libc.sigqueue(os.getpid(), int(signal.SIGRTMIN), ctypes.c_void_p(0)) == 0 else why()
class Attr(ctypes.Structure):
    _fields_ = [('flags', ctypes.c_long), ('maxmsg', ctypes.c_long), ('msgsize', ctypes.c_long),
                ('curmsgs', ctypes.c_long), ('pad', ctypes.c_long * 4)]
name = b'/nsm-budget-one-%d' % os.getpid()
q = libc.mq_open(name, os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(Attr(0, 1, 1, 0)))
out['mqueue'] = 'ok' if q >= 0 else why()
if q >= 0:
    libc.mq_unlink(name)
g = libc.fanotify_init(0x200, 0)
out['fanotify'] = 'ok' if g >= 0 else why()
print(json.dumps(out))
"""


# What a budget's exhaustion looks like.
EXHAUSTED = ("EMFILE", "ENOSPC", "EAGAIN", "ENOMEM")


def as_uid(uid, code):
    """Runs Python `code` as uid:uid without groups (as itself when this
    process is that uid already); its stdout."""
    kwargs = {} if os.geteuid() == uid else {"user": uid, "group": uid, "extra_groups": []}
    proc = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True, timeout=60,
                          cwd="/", **kwargs)
    check(proc.returncode == 0, f"{code[:40]!r} as uid {uid}: {proc.stderr[-400:]}")
    return proc.stdout


def c_kernel_budgets(s, budgets):
    """A session takes every inotify instance and watch, pending signal,
    message queue byte and fanotify group it can, and holds them: it stops
    at its own budgets (`budgets`, the environment's `kernel_budgets`),
    and a host process of uid 65534 (the unprivileged server's user, or the
    host's nobody beside a root server) still gets one of each, as (under a
    root server) does another jail."""
    _, text, _ = s.call({"env": "python", "session": "budgets", "code": BUDGETS})
    try:
        took = json.loads(text)
    except ValueError:
        raise Failed(f"the taking session's output: {text[-400:]!r}") from None
    host = json.loads(as_uid(65534, ONE_OF_EACH))
    starved = {k: v for k, v in host.items() if v in EXHAUSTED}
    check(not starved, f"the jail took ({took}) what a host process of uid 65534 then lacks: {starved}")
    if os.geteuid() == 0:
        _, text, _ = s.call({"env": "python", "session": "budgets-other", "code": ONE_OF_EACH})
        other = json.loads(text)
        starved = {k: v for k, v in other.items() if v in EXHAUSTED}
        check(not starved, f"the jail took ({took}) what another jail then lacks: {starved}")
    check(budgets, f"the environment declares no kernel_budgets; the jail took {took}")
    for key, budget in [("inotify", "max_inotify_instances"), ("watches", "max_inotify_watches"),
                        ("signals", "sigpending"), ("fanotify", "max_fanotify_groups")]:
        check(took[key] <= budgets[budget], f"{key}: the jail took {took[key]}, over its {budget} {budgets[budget]}")


# --- System V IPC ----------------------------------------------------------------

# Run in a session: as many System V shared memory segments of 64 MiB (each
# touched, and kept after detaching), message queues (each filled) and
# semaphore sets of 250 as it can, up to 1.5 GiB, 1000 and 1000; then an
# attempt to raise the namespace's limit. One JSON object.
SYSV = r"""
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
def why():
    n = ctypes.get_errno()
    return errno.errorcode.get(n, str(n))
out = {'ipc_ns': os.readlink('/proc/self/ns/ipc')}
MiB = 1 << 20
held, stop = 0, None
for _ in range(24):
    sid = libc.shmget(0, 64 * MiB, 0o1000 | 0o600)
    if sid < 0:
        stop = 'shmget ' + why(); break
    addr = libc.shmat(sid, None, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        stop = 'shmat ' + why(); break
    ctypes.memset(addr, 1, 64 * MiB)
    libc.shmdt(ctypes.c_void_p(addr))
    held += 64 * MiB
out['shm_mib'], out['shm_stop'] = held >> 20, stop
class Msg(ctypes.Structure):
    _fields_ = [('mtype', ctypes.c_long), ('text', ctypes.c_char * 8192)]
queues, queued, stop = 0, 0, None
for _ in range(1000):
    q = libc.msgget(0, 0o1000 | 0o600)
    if q < 0:
        stop = 'msgget ' + why(); break
    queues += 1
    m = Msg(1, b'x' * 8191)
    while libc.msgsnd(q, ctypes.byref(m), 8192, 0o4000) == 0:  # IPC_NOWAIT
        queued += 8192
out['queues'], out['queued_kib'], out['msg_stop'] = queues, queued >> 10, stop
sets, stop = 0, None
for _ in range(1000):
    if libc.semget(0, 250, 0o1000 | 0o600) < 0:
        stop = 'semget ' + why(); break
    sets += 1
out['sem_sets'], out['sem_stop'] = sets, stop
try:
    open('/proc/sys/kernel/shmall', 'w').write('999999999')
    out['raise'] = 'wrote'
except OSError as e:
    out['raise'] = errno.errorcode.get(e.errno, str(e.errno))
out['shmall'] = int(open('/proc/sys/kernel/shmall').read())
print(json.dumps(out))
"""

# The segments a session's IPC namespace holds, seen from its next call.
SYSV_AFTER = r"""
print('segments', sum(1 for line in open('/proc/sysvipc/shm').readlines()[1:]))
"""


def c_sysv_ipc(s):
    """A session takes every System V segment, queue and semaphore set it
    can: it stops at its IPC namespace's limits (64 MiB of segments, 16
    queues of 16 KiB, 16 sets), cannot raise them, does not share the
    host's IPC namespace, and its segments outlive a call but not the
    session."""
    _, text, _ = s.call({"env": "python", "session": "sysv", "code": SYSV})
    try:
        took = json.loads(text)
    except ValueError:
        raise Failed(f"the taking session's output: {text[-400:]!r}") from None
    check(took["ipc_ns"] != os.readlink("/proc/self/ns/ipc"), f"the jail shares the host's IPC namespace: {took}")
    check(took["shm_mib"] <= 64, f"the jail held {took['shm_mib']} MiB of System V shared memory, over 64: {took}")
    check(took["queues"] <= 16 and took["queued_kib"] <= 16 * 16, f"message queues over 16 of 16 KiB: {took}")
    check(took["sem_sets"] <= 16, f"semaphore sets over 16: {took}")
    check(took["raise"] in ("EROFS", "EACCES", "EPERM"), f"the jail raised its shmall: {took}")
    check(took["shmall"] * os.sysconf("SC_PAGE_SIZE") == 64 << 20, f"shmall is not 64 MiB: {took}")
    _, text, _ = s.call({"env": "python", "session": "sysv", "code": SYSV_AFTER})
    made = took["shm_mib"] // 64
    check(text.strip() == f"segments {made}", f"the session's next call sees {text.strip()!r}, not the {made} "
          "segments it made")
    _, text, _ = s.call({"env": "python", "session": "sysv-other", "code": SYSV_AFTER})
    check(text.strip() == "segments 0", f"another session sees {text.strip()!r} of the first one's segments")


# --- reach into a jail from the host -------------------------------------------------

# A session's agent, found from the host (as root); its files written first.
SECRET = "a-session-file-only-its-jail-may-read"

# Run on the host as an attacker's uid (`argv[1]` the agent's pid): what it
# got of the agent's channel, memory and jail, as one JSON object.
REACH = r"""
import ctypes, errno, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
pid = int(sys.argv[1])
out = {}
def why():
    n = ctypes.get_errno()
    return errno.errorcode.get(n, str(n))
pidfd = libc.syscall(434, pid, 0)  # pidfd_open
if pidfd < 0:
    out['pidfd_getfd'] = 'pidfd_open ' + why()
else:
    fd = libc.syscall(438, pidfd, 1, 0)  # pidfd_getfd: the agent's stdout, its replies
    out['pidfd_getfd'] = 'took fd %d' % fd if fd >= 0 else why()
class Iovec(ctypes.Structure):
    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
try:
    start = int(open('/proc/%d/maps' % pid).readline().split('-')[0], 16)
except OSError as e:
    start = None
    out['process_vm_readv'] = 'maps ' + errno.errorcode.get(e.errno, str(e.errno))
if start is not None:
    buf = ctypes.create_string_buffer(64)
    local, remote = Iovec(ctypes.addressof(buf), 64), Iovec(start, 64)
    n = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    out['process_vm_readv'] = 'read %d bytes' % n if n >= 0 else why()
try:
    user = os.open('/proc/%d/ns/user' % pid, os.O_RDONLY)
    mnt = os.open('/proc/%d/ns/mnt' % pid, os.O_RDONLY)
except OSError as e:
    out['setns'] = 'open ' + errno.errorcode.get(e.errno, str(e.errno))
else:
    # The jail's mount namespace belongs to the user namespace above the
    # agent's (bubblewrap nests one more to disable new ones): that one.
    parent = libc.ioctl(user, 0xb702, 0)  # NS_GET_PARENT
    if libc.setns(parent if parent >= 0 else user, 0x10000000) != 0:
        out['setns'] = 'user ' + why()
    elif libc.setns(mnt, 0x20000) != 0:
        out['setns'] = 'mnt ' + why()
    else:
        try:
            out['setns'] = 'read ' + open('/workspace/reach.txt').read()
        except OSError as e:
            out['setns'] = 'entered, read ' + errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
"""

REFUSED = ("EPERM", "EACCES", "ESRCH")


def host_uids(pid):
    """The real, effective, saved and file-system uids of `pid`."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return [int(v) for v in line.split()[1:]]
    raise Failed(f"no Uid: line for {pid}")


def session_agent(s, session):
    """The pid of `session`'s agent (the server's descendant named agent)
    whose jail holds /workspace/reach.txt, once it is there."""
    s.call({"env": "tight-python", "session": session,
            "code": f"open('/workspace/reach.txt', 'w').write({SECRET!r}); print('written')"})
    table = processes()
    agents = [p for p in descendants(s.pid, table) if table[p][1] == "agent"]
    for pid in agents:
        try:
            if os.readlink(f"/proc/{pid}/cwd") == "/workspace" and \
                    Path(f"/proc/{pid}/root/workspace/reach.txt").read_text() == SECRET:
                return pid
        except OSError:
            continue
    raise Failed(f"no agent of session {session} among {agents}")


def reach(uid, pid):
    """REACH run as `uid` against the agent `pid`."""
    return json.loads(as_uid(uid, REACH.replace("sys.argv[1]", repr(str(pid)))))


def c_host_reach(s):
    """Under a root server, a host process of uid 65534 (nobody), with no
    capability, or of another jail's uid, gets nothing of a session: not
    the agent's reply channel (pidfd_getfd on its fd 1), not its memory
    (process_vm_readv), not its jail (setns into its user and mount
    namespaces, then its /workspace); and every jail's uid is its own:
    no user or group of the host's, not 65534, not another jail's."""
    first = session_agent(s, "reach-a")
    second = session_agent(s, "reach-b")
    uid_a, uid_b = host_uids(first), host_uids(second)
    check(len(set(uid_a)) == 1 and len(set(uid_b)) == 1, f"mixed uids: {uid_a} {uid_b}")
    uid_a, uid_b = uid_a[0], uid_b[0]
    for attacker, label in [(65534, "uid 65534 (nobody)"), (uid_b, f"another jail's uid {uid_b}")]:
        got = reach(attacker, first)
        for what, outcome in got.items():
            check(outcome.split()[-1] in REFUSED,
                  f"{label} against a session's agent (uid {uid_a}): {what}: {outcome} (all: {got})")
    check(uid_a != uid_b, f"two sessions' jails share uid {uid_a}")
    for uid in (uid_a, uid_b):
        check(uid not in (0, 65534), f"a jail runs as uid {uid}")
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            continue
        raise Failed(f"a jail runs as uid {uid}, the host's user {name}")
