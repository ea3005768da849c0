# The rules of the jail's seccomp filter: the system calls a code runner
# never needs, and how each fails. A table, not a function:
#   { deny = { CALL = ERRNO; }; denyNamespaces = [ CALL ];
#     allowOnly = { CALL = [ FIRST-ARGUMENT ]; };
#     sockets = { calls; families; protocols; numbers; }; }
# which jail/seccomp.nix hands to nix-sandbox-seccomp (seccomp/). Every
# call named here, and every family or protocol of `sockets.numbers` the
# filter does not already open, is a name an environment's `seccomp.allow`
# may let through (evalEnvironment.nix refuses any other).
let
  ipProtocols = [
    "IPPROTO_IP"
    "IPPROTO_ICMP"
    "IPPROTO_TCP"
    "IPPROTO_UDP"
    "IPPROTO_ICMPV6"
    "IPPROTO_MPTCP"
  ];
in
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
  # socket(2) and socketpair(2): the address families a code runner needs,
  # every other failing with EAFNOSUPPORT, as on a kernel without it: Unix
  # sockets, IPv4 and IPv6 (loopback, the egress bridge, `network = true`),
  # and netlink for routes only (the C library asks it for the addresses a
  # name may resolve to; `ip`, if_nameindex), in the jail's own network
  # namespace. Left out, with why:
  # - AF_VSOCK: no network namespace holds it; its port space is the whole
  #   machine's (a jail's listener takes the port from the host) and it
  #   reaches the hypervisor's services;
  # - AF_BLUETOOTH, AF_CAN, AF_NFC, AF_IEEE802154, AF_PHONET, AF_QIPCRTR,
  #   AF_MCTP, AF_CAIF, AF_ISDN, AF_IUCV: the machine's devices and buses;
  # - AF_PACKET, AF_XDP, AF_KEY: capabilities the jail never holds, so
  #   nothing but attack surface;
  # - AF_ALG (the kernel's crypto; user space has its own), AF_TIPC,
  #   AF_RDS, AF_KCM, AF_SMC, AF_RXRPC, AF_LLC, AF_X25, AF_AX25, AF_ROSE,
  #   AF_NETROM, AF_APPLETALK, AF_IPX, AF_ATM*, AF_PPPOX, AF_DECnet...:
  #   protocols no interpreter uses, whose modules an unprivileged
  #   socket(2) makes the kernel load and which have had many exploitable
  #   bugs;
  # - netlink protocols other than NETLINK_ROUTE (EPROTONOSUPPORT):
  #   NETLINK_KOBJECT_UEVENT shows the host's device events where the
  #   network is shared, NETLINK_SOCK_DIAG every socket of a shared
  #   network, the others (generic netlink families, audit, netfilter,
  #   xfrm, crypto, connector) manage the kernel;
  # - IP protocols other than the default, TCP, UDP, ICMP, ICMPv6 (ping
  #   sockets) and MPTCP (EPROTONOSUPPORT): SCTP, DCCP, UDP-Lite, L2TP and
  #   the like, modules again; raw sockets need a capability anyway.
  # An environment opens one more with `seccomp.allow = [ "AF_VSOCK" ]`
  # (or a NETLINK_ or IPPROTO_ name of `numbers`).
  sockets = {
    calls = [
      "socket"
      "socketpair"
    ];
    families = [
      "AF_UNIX"
      "AF_INET"
      "AF_INET6"
      "AF_NETLINK"
    ];
    # The protocols (third argument) a family opens; a family not named
    # here opens any.
    protocols = {
      AF_NETLINK = [ "NETLINK_ROUTE" ];
      AF_INET = ipProtocols;
      AF_INET6 = ipProtocols;
    };
    # linux/socket.h, linux/netlink.h, linux/in.h.
    numbers = {
      AF_UNIX = 1;
      AF_INET = 2;
      AF_AX25 = 3;
      AF_IPX = 4;
      AF_APPLETALK = 5;
      AF_NETROM = 6;
      AF_BRIDGE = 7;
      AF_ATMPVC = 8;
      AF_X25 = 9;
      AF_INET6 = 10;
      AF_ROSE = 11;
      AF_DECnet = 12;
      AF_NETBEUI = 13;
      AF_SECURITY = 14;
      AF_KEY = 15;
      AF_NETLINK = 16;
      AF_PACKET = 17;
      AF_ASH = 18;
      AF_ECONET = 19;
      AF_ATMSVC = 20;
      AF_RDS = 21;
      AF_SNA = 22;
      AF_IRDA = 23;
      AF_PPPOX = 24;
      AF_WANPIPE = 25;
      AF_LLC = 26;
      AF_IB = 27;
      AF_MPLS = 28;
      AF_CAN = 29;
      AF_TIPC = 30;
      AF_BLUETOOTH = 31;
      AF_IUCV = 32;
      AF_RXRPC = 33;
      AF_ISDN = 34;
      AF_PHONET = 35;
      AF_IEEE802154 = 36;
      AF_CAIF = 37;
      AF_ALG = 38;
      AF_NFC = 39;
      AF_VSOCK = 40;
      AF_KCM = 41;
      AF_QIPCRTR = 42;
      AF_SMC = 43;
      AF_XDP = 44;
      AF_MCTP = 45;
      NETLINK_ROUTE = 0;
      NETLINK_USERSOCK = 2;
      NETLINK_FIREWALL = 3;
      NETLINK_SOCK_DIAG = 4;
      NETLINK_NFLOG = 5;
      NETLINK_XFRM = 6;
      NETLINK_SELINUX = 7;
      NETLINK_ISCSI = 8;
      NETLINK_AUDIT = 9;
      NETLINK_FIB_LOOKUP = 10;
      NETLINK_CONNECTOR = 11;
      NETLINK_NETFILTER = 12;
      NETLINK_IP6_FW = 13;
      NETLINK_DNRTMSG = 14;
      NETLINK_KOBJECT_UEVENT = 15;
      NETLINK_GENERIC = 16;
      NETLINK_SCSITRANSPORT = 18;
      NETLINK_ECRYPTFS = 19;
      NETLINK_RDMA = 20;
      NETLINK_CRYPTO = 21;
      NETLINK_SMC = 22;
      IPPROTO_IP = 0;
      IPPROTO_ICMP = 1;
      IPPROTO_IGMP = 2;
      IPPROTO_IPIP = 4;
      IPPROTO_TCP = 6;
      IPPROTO_EGP = 8;
      IPPROTO_PUP = 12;
      IPPROTO_UDP = 17;
      IPPROTO_IDP = 22;
      IPPROTO_TP = 29;
      IPPROTO_DCCP = 33;
      IPPROTO_IPV6 = 41;
      IPPROTO_RSVP = 46;
      IPPROTO_GRE = 47;
      IPPROTO_ESP = 50;
      IPPROTO_AH = 51;
      IPPROTO_ICMPV6 = 58;
      IPPROTO_MTP = 92;
      IPPROTO_BEETPH = 94;
      IPPROTO_ENCAP = 98;
      IPPROTO_PIM = 103;
      IPPROTO_COMP = 108;
      IPPROTO_L2TP = 115;
      IPPROTO_SCTP = 132;
      IPPROTO_UDPLITE = 136;
      IPPROTO_MPLS = 137;
      IPPROTO_ETHERNET = 143;
      IPPROTO_RAW = 255;
      IPPROTO_MPTCP = 262;
    };
  };
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
