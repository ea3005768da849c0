"""Run inside a jail (checks/e2e/adversarial.py, launcher/tests/it/jail.rs):
tries what only a process holding host uid 0, or a writable /proc/sys,
could do, and prints what happened as one JSON object: each attempt's
outcome (done, or the errno's name), how /proc/sys and its like are
mounted, and whether /proc/sys shows the jail's own namespaces."""
import errno, json, os
def attempt(fn):
    try:
        fn()
        return 'done'
    except OSError as e:
        return errno.errorcode[e.errno]
def same_value(path):
    value = open(path).read()
    with open(path, 'w') as f:
        f.write(value)
def open_for_write(path):
    os.close(os.open(path, os.O_WRONLY))
mounts = {}
for line in open('/proc/self/mountinfo'):
    fields = line.split()
    mounts[fields[4]] = fields[5].split(',')[0]
print(json.dumps({
    'sysctl': attempt(lambda: same_value('/proc/sys/fs/lease-break-time')),
    'core_pattern': attempt(lambda: same_value('/proc/sys/kernel/core_pattern')),
    'sysrq': attempt(lambda: open_for_write('/proc/sysrq-trigger')),
    'kpageflags': attempt(lambda: open('/proc/kpageflags', 'rb').read(8)),
    'mounts': {p: mounts.get(p) for p in ['/proc/sys', '/proc/sysrq-trigger', '/proc/irq', '/proc/bus']},
    'hostname': open('/proc/sys/kernel/hostname').read().strip() == os.uname().nodename,
    'interfaces': sorted(os.listdir('/proc/sys/net/ipv4/conf')),
}))
