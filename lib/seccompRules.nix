# The rules of the jail's seccomp filter: the system calls a code runner
# never needs, and how each fails. A table, not a function:
#   { deny = { CALL = ERRNO; }; denyNamespaces = [ CALL ];
#     allowOnly = { CALL = [ FIRST-ARGUMENT ]; }; }
# which jail/seccomp.nix hands to nix-sandbox-seccomp (seccomp/). Every
# name here is one an environment's `seccomp.allow` may let through
# (evalEnvironment.nix refuses any other).
{
  deny = {
    # Kernel keyrings are not isolated per jail.
    keyctl = "EPERM";
    add_key = "EPERM";
    request_key = "EPERM";
    # Kernel attack surface no interpreter needs.
    bpf = "EPERM";
    perf_event_open = "EPERM";
    userfaultfd = "EPERM";
    # clone3's flags are in memory a filter cannot read: glibc falls back
    # to clone, whose flags it can (denyNamespaces).
    clone3 = "ENOSYS";
    # io_uring: a large attack surface; libuv and others fall back.
    io_uring_setup = "ENOSYS";
    io_uring_enter = "ENOSYS";
    io_uring_register = "ENOSYS";
    # Other processes' memory.
    ptrace = "EPERM";
    process_vm_readv = "EPERM";
    process_vm_writev = "EPERM";
    # Mounts and namespaces (bubblewrap set them up already).
    mount = "EPERM";
    umount2 = "EPERM";
    pivot_root = "EPERM";
    chroot = "EPERM";
    move_mount = "EPERM";
    open_tree = "EPERM";
    open_tree_attr = "EPERM";
    fsopen = "EPERM";
    fsconfig = "EPERM";
    fsmount = "EPERM";
    fspick = "EPERM";
    mount_setattr = "EPERM";
    setns = "EPERM";
    # The machine itself.
    kexec_load = "EPERM";
    kexec_file_load = "EPERM";
    init_module = "EPERM";
    finit_module = "EPERM";
    delete_module = "EPERM";
    reboot = "EPERM";
    swapon = "EPERM";
    swapoff = "EPERM";
    acct = "EPERM";
    syslog = "EPERM";
    quotactl = "EPERM";
    quotactl_fd = "EPERM";
    lookup_dcookie = "EPERM";
    nfsservctl = "EPERM";
    open_by_handle_at = "EPERM";
    vhangup = "EPERM";
    uselib = "EPERM";
    iopl = "EPERM";
    ioperm = "EPERM";
  };
  # EPERM when the first argument asks for any new namespace.
  denyNamespaces = [
    "clone"
    "unshare"
  ];
  # personality: Linux (0), PER_LINUX32 (8), with UNAME26 (0x20000), and the
  # query (0xffffffff); not ADDR_NO_RANDOMIZE or READ_IMPLIES_EXEC.
  allowOnly.personality = [
    0
    8
    131072
    131080
    4294967295
  ];
}
