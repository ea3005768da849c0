# What a jail may take of its host user's per-user kernel counters. A
# table, not a function: jail/kernelBudgets.nix hands it to the agent
# package's jail-budget, which sets it in a user namespace of the jail's
# own before bubblewrap starts, and manifestEntry.nix writes it into the
# manifest (`kernel_budgets`), where the launcher's probe checks the
# rlimits from inside the jail.
#
# - sysctls: the limits of that namespace (/proc/sys/user/max_*). The
#   kernel counts these per user namespace and uid and charges a
#   namespace's use to each one above it, so the jail's processes together
#   hold at most these, whatever the host user's limits. The namespaces'
#   are what bubblewrap itself makes (user, twice with --disable-userns,
#   and one of each other kind) with room to spare: the jail can make none
#   (no capability; seccomp refuses unshare and clone's namespace flags).
# - rlimits: pending signals, POSIX message queue bytes and locked shared
#   memory, which the kernel counts per user namespace and uid as well and
#   bounds by the rlimit: every process of the jail has these at most.
# - ipc: the System V limits of the jail's own IPC namespace, which
#   jail-budget makes and bubblewrap shares (a new IPC namespace starts
#   with the kernel's defaults: thousands of segments and queues, gigabytes
#   of shared memory and kernel memory that no rlimit counts, and a
#   segment outlives the processes that made it, for as long as the
#   session). Shared memory segments 64 MiB in all (`shm_total_bytes`,
#   written in pages), 64 of them; 16 message queues of 16 KiB; 16
#   semaphore sets, 4096 semaphores in all.
# - ipcRefused: where the kernel lets no user namespace write those
#   System V limits (before Linux 6.1), the calls that then fail and how:
#   jail-budget loads them as a seccomp filter (nix-sandbox-seccomp's), so
#   nothing in the jail makes a segment, queue or semaphore set, and its
#   IPC namespace stays empty, as on a kernel built without System V IPC.
#
# Other per-user counters have no limit a namespace can hold: POSIX
# queues live in the jail's own IPC namespace; keys (keyctl, add_key)
# are refused by seccomp (seccompRules.nix); processes are the
# environment's `limits.pids`, an RLIMIT_NPROC that jail/kernelBudgets.nix
# sets in the same namespace, and the run's cgroup.
{
  sysctls = {
    max_inotify_instances = 16;
    max_inotify_watches = 8192;
    max_fanotify_groups = 4;
    max_fanotify_marks = 1024;
    max_user_namespaces = 4;
    max_pid_namespaces = 4;
    max_net_namespaces = 4;
    max_mnt_namespaces = 4;
    max_ipc_namespaces = 4;
    max_uts_namespaces = 4;
    max_cgroup_namespaces = 4;
    max_time_namespaces = 4;
  };
  rlimits = {
    sigpending = 1024;
    msgqueue = 262144;
    memlock = 65536;
  };
  ipc = {
    shm_total_bytes = 67108864;
    shmmax = 67108864;
    shmmni = 64;
    msgmax = 8192;
    msgmnb = 16384;
    msgmni = 16;
    semmsl = 250;
    semmns = 4096;
    semopm = 32;
    semmni = 16;
  };
  ipcRefused = {
    shmget = "ENOSYS";
    msgget = "ENOSYS";
    semget = "ENOSYS";
  };
}
