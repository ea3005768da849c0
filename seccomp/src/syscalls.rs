//! The system calls a filter can name, with their numbers on the two
//! architectures a filter covers. Only the calls a sandbox policy denies or
//! inspects are listed; a name missing on one architecture (x86's `iopl`)
//! has `None` there.

/// `AUDIT_ARCH_X86_64`: the `arch` field of `seccomp_data` for x86_64 calls.
pub const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
/// `AUDIT_ARCH_AARCH64`.
pub const AUDIT_ARCH_AARCH64: u32 = 0xc000_00b7;
/// `__X32_SYSCALL_BIT`: x32 calls arrive with the x86_64 arch and this bit set.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// One architecture a filter covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    pub fn audit(self) -> u32 {
        match self {
            Arch::X86_64 => AUDIT_ARCH_X86_64,
            Arch::Aarch64 => AUDIT_ARCH_AARCH64,
        }
    }
}

/// (name, x86_64 number, aarch64 number): from the kernel's
/// `arch/x86/entry/syscalls/syscall_64.tbl` and `include/uapi/asm-generic/unistd.h`
/// (numbers from 424 up are the same on every architecture).
const TABLE: &[(&str, Option<u32>, Option<u32>)] = &[
    ("acct", Some(163), Some(89)),
    ("add_key", Some(248), Some(217)),
    ("bpf", Some(321), Some(280)),
    ("chroot", Some(161), Some(51)),
    ("clone", Some(56), Some(220)),
    ("clone3", Some(435), Some(435)),
    ("delete_module", Some(176), Some(106)),
    ("finit_module", Some(313), Some(273)),
    ("fsconfig", Some(431), Some(431)),
    ("fsmount", Some(432), Some(432)),
    ("fsopen", Some(430), Some(430)),
    ("fspick", Some(433), Some(433)),
    ("init_module", Some(175), Some(105)),
    ("io_uring_enter", Some(426), Some(426)),
    ("io_uring_register", Some(427), Some(427)),
    ("io_uring_setup", Some(425), Some(425)),
    ("ioperm", Some(173), None),
    ("iopl", Some(172), None),
    ("kexec_file_load", Some(320), Some(294)),
    ("kexec_load", Some(246), Some(104)),
    ("keyctl", Some(250), Some(219)),
    ("lookup_dcookie", Some(212), Some(18)),
    ("mount", Some(165), Some(40)),
    ("mount_setattr", Some(442), Some(442)),
    ("move_mount", Some(429), Some(429)),
    ("msgget", Some(68), Some(186)),
    ("nfsservctl", Some(180), Some(42)),
    ("open_by_handle_at", Some(304), Some(265)),
    ("open_tree", Some(428), Some(428)),
    ("open_tree_attr", Some(467), Some(467)),
    ("perf_event_open", Some(298), Some(241)),
    ("personality", Some(135), Some(92)),
    ("pivot_root", Some(155), Some(41)),
    ("process_vm_readv", Some(310), Some(270)),
    ("process_vm_writev", Some(311), Some(271)),
    ("ptrace", Some(101), Some(117)),
    ("quotactl", Some(179), Some(60)),
    ("quotactl_fd", Some(443), Some(443)),
    ("reboot", Some(169), Some(142)),
    ("request_key", Some(249), Some(218)),
    ("semget", Some(64), Some(190)),
    ("setns", Some(308), Some(268)),
    ("shmget", Some(29), Some(194)),
    ("socket", Some(41), Some(198)),
    ("socketpair", Some(53), Some(199)),
    ("swapoff", Some(168), Some(225)),
    ("swapon", Some(167), Some(224)),
    ("syslog", Some(103), Some(116)),
    ("umount2", Some(166), Some(39)),
    ("unshare", Some(272), Some(97)),
    ("uselib", Some(134), None),
    ("userfaultfd", Some(323), Some(282)),
    ("vhangup", Some(153), Some(58)),
];

/// True when `name` is in the table (on at least one architecture).
pub fn known(name: &str) -> bool {
    TABLE.iter().any(|(n, _, _)| *n == name)
}

/// The number of `name` on `arch`; `None` when the call does not exist
/// there or is not in the table.
pub fn number(name: &str, arch: Arch) -> Option<u32> {
    let (_, x86_64, aarch64) = TABLE.iter().find(|(n, _, _)| *n == name)?;
    match arch {
        Arch::X86_64 => *x86_64,
        Arch::Aarch64 => *aarch64,
    }
}

/// Every name the table knows, sorted.
pub fn names() -> impl Iterator<Item = &'static str> {
    TABLE.iter().map(|(n, _, _)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_has_no_duplicates() {
        let names: Vec<&str> = names().collect();
        assert!(names.windows(2).all(|w| w[0] < w[1]), "{names:?}");
    }

    #[test]
    fn numbers_are_unique_per_arch() {
        for arch in Arch::ALL {
            let mut numbers: Vec<u32> = names().filter_map(|n| number(n, arch)).collect();
            let len = numbers.len();
            numbers.sort_unstable();
            numbers.dedup();
            assert_eq!(numbers.len(), len, "{arch:?}");
        }
    }

    /// The host's C library agrees with the table for the host's architecture.
    #[test]
    fn numbers_match_the_c_library() {
        let arch = if cfg!(target_arch = "x86_64") {
            Arch::X86_64
        } else if cfg!(target_arch = "aarch64") {
            Arch::Aarch64
        } else {
            panic!("seccomp filters cover x86_64 and aarch64 only");
        };
        let libc_numbers: &[(&str, libc::c_long)] = &[
            ("acct", libc::SYS_acct),
            ("add_key", libc::SYS_add_key),
            ("bpf", libc::SYS_bpf),
            ("chroot", libc::SYS_chroot),
            ("clone", libc::SYS_clone),
            ("clone3", libc::SYS_clone3),
            ("delete_module", libc::SYS_delete_module),
            ("finit_module", libc::SYS_finit_module),
            ("fsconfig", libc::SYS_fsconfig),
            ("fsmount", libc::SYS_fsmount),
            ("fsopen", libc::SYS_fsopen),
            ("fspick", libc::SYS_fspick),
            ("init_module", libc::SYS_init_module),
            ("io_uring_enter", libc::SYS_io_uring_enter),
            ("io_uring_register", libc::SYS_io_uring_register),
            ("io_uring_setup", libc::SYS_io_uring_setup),
            ("kexec_file_load", libc::SYS_kexec_file_load),
            ("kexec_load", libc::SYS_kexec_load),
            ("keyctl", libc::SYS_keyctl),
            ("lookup_dcookie", libc::SYS_lookup_dcookie),
            ("mount", libc::SYS_mount),
            ("mount_setattr", libc::SYS_mount_setattr),
            ("move_mount", libc::SYS_move_mount),
            ("msgget", libc::SYS_msgget),
            ("nfsservctl", libc::SYS_nfsservctl),
            ("open_by_handle_at", libc::SYS_open_by_handle_at),
            ("open_tree", libc::SYS_open_tree),
            ("perf_event_open", libc::SYS_perf_event_open),
            ("personality", libc::SYS_personality),
            ("pivot_root", libc::SYS_pivot_root),
            ("process_vm_readv", libc::SYS_process_vm_readv),
            ("process_vm_writev", libc::SYS_process_vm_writev),
            ("ptrace", libc::SYS_ptrace),
            ("quotactl", libc::SYS_quotactl),
            ("quotactl_fd", libc::SYS_quotactl_fd),
            ("reboot", libc::SYS_reboot),
            ("request_key", libc::SYS_request_key),
            ("semget", libc::SYS_semget),
            ("setns", libc::SYS_setns),
            ("shmget", libc::SYS_shmget),
            ("socket", libc::SYS_socket),
            ("socketpair", libc::SYS_socketpair),
            ("swapoff", libc::SYS_swapoff),
            ("swapon", libc::SYS_swapon),
            ("syslog", libc::SYS_syslog),
            ("umount2", libc::SYS_umount2),
            ("unshare", libc::SYS_unshare),
            ("userfaultfd", libc::SYS_userfaultfd),
            ("vhangup", libc::SYS_vhangup),
        ];
        for (name, want) in libc_numbers {
            assert_eq!(
                number(name, arch).map(libc::c_long::from),
                Some(*want),
                "{name} on {arch:?}"
            );
        }
    }
}
