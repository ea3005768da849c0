//! A policy (which calls fail, and how) compiled to a cBPF program.
//!
//! The program dispatches on the architecture: x86_64 and aarch64 get the
//! policy with their own call numbers; any other architecture (i386 calls
//! made through `int 0x80` by a 64-bit process, for one) kills the process.
//! On x86_64, x32 calls (`nr` with bit 30 set) fail with `ENOSYS`, as on a
//! kernel built without x32, so the x32 numbering cannot bypass the policy.
//! Everything the policy does not name is allowed.

use std::fmt;

use crate::bpf::{self, Action, Insn};
use crate::syscalls::{self, Arch};

const EPERM: u16 = 1;
const ENOSYS: u16 = 38;

/// Every `CLONE_NEW*` flag: NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER,
/// NEWPID, NEWNET and NEWTIME (0x80, which `clone` reads as part of an exit
/// signal no valid signal has).
pub const CLONE_NEW_MASK: u32 = 0x0002_0000
    | 0x0200_0000
    | 0x0400_0000
    | 0x0800_0000
    | 0x1000_0000
    | 0x2000_0000
    | 0x4000_0000
    | 0x0000_0080;

/// Most values an `--allow-only` rule may list (each is one instruction).
pub const MAX_VALUES: usize = 64;

/// What the filter does, by call name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The call always fails with this errno.
    pub deny: Vec<(String, u16)>,
    /// The call fails with `EPERM` when its first argument has a
    /// `CLONE_NEW*` flag (clone, unshare).
    pub deny_namespaces: Vec<String>,
    /// The call fails unless its first argument is one of a list of values
    /// (personality; socket's address family), and may then check another
    /// argument too (socket's protocol within a family).
    pub allow_only: Vec<AllowOnly>,
}

/// A call allowed only with some values of its first argument (its low 32
/// bits); any other fails with `errno`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowOnly {
    pub call: String,
    pub values: Vec<u32>,
    pub errno: u16,
    /// Further checks, each for one of `values`.
    pub when: Vec<When>,
}

/// When the first argument is `value`, argument `arg` (1 to 5, its low 32
/// bits) must be one of `values`, else the call fails with `errno`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct When {
    pub value: u32,
    pub arg: u8,
    pub values: Vec<u32>,
    pub errno: u16,
}

/// A policy that cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError(pub String);

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An errno by name (`EPERM`) or number (1 to 4095).
pub fn parse_errno(text: &str) -> Result<u16, PolicyError> {
    let named = match text {
        "EPERM" => Some(EPERM),
        "EACCES" => Some(13),
        "EINVAL" => Some(22),
        "ENOSYS" => Some(ENOSYS),
        "EOPNOTSUPP" => Some(95),
        "EPROTONOSUPPORT" => Some(93),
        "EAFNOSUPPORT" => Some(97),
        _ => None,
    };
    named
        .or_else(|| text.parse().ok())
        .filter(|n| (1..=4095).contains(n))
        .ok_or_else(|| {
            PolicyError(format!(
                "unknown errno `{text}` (EPERM, EACCES, EINVAL, ENOSYS, EOPNOTSUPP, \
                 EPROTONOSUPPORT, EAFNOSUPPORT or 1-4095)"
            ))
        })
}

impl Policy {
    /// Every name the policy uses, each once, all known: or the problem.
    fn check(&self) -> Result<(), PolicyError> {
        let names = self
            .deny
            .iter()
            .map(|(n, _)| n)
            .chain(&self.deny_namespaces)
            .chain(self.allow_only.iter().map(|rule| &rule.call));
        let mut seen: Vec<&str> = Vec::new();
        for name in names {
            if !syscalls::known(name) {
                return Err(PolicyError(format!(
                    "unknown system call `{name}` (known: {})",
                    syscalls::names().collect::<Vec<_>>().join(", ")
                )));
            }
            if seen.contains(&name.as_str()) {
                return Err(PolicyError(format!(
                    "system call `{name}` is named by more than one rule"
                )));
            }
            seen.push(name);
        }
        for name in &self.deny_namespaces {
            if name != "clone" && name != "unshare" {
                return Err(PolicyError(format!(
                    "namespace flags can be checked for clone and unshare only, not `{name}`"
                )));
            }
        }
        for rule in &self.allow_only {
            rule.check()?;
        }
        Ok(())
    }

    /// The program: architecture dispatch, then one block per architecture.
    pub fn compile(&self) -> Result<Vec<Insn>, PolicyError> {
        self.check()?;
        let blocks: Vec<(Arch, Vec<Insn>)> =
            Arch::ALL.iter().map(|&a| (a, self.block(a))).collect();
        // Dispatch: per arch `jeq AUDIT, 0, 1; ja BLOCK`, then kill.
        let dispatch_len = 1 + 2 * blocks.len() + 1;
        let mut program = vec![Insn::load(bpf::OFFSET_ARCH)];
        let mut block_start = dispatch_len;
        for (arch, block) in &blocks {
            program.push(Insn::jeq(arch.audit(), 0, 1));
            let ja_at = program.len();
            program.push(Insn::ja(offset(ja_at, block_start)));
            block_start += block.len();
        }
        program.push(Insn::ret(Action::KillProcess));
        for (_, block) in blocks {
            program.extend(block);
        }
        if program.len() > bpf::MAX_INSNS {
            return Err(PolicyError(format!(
                "the program has {} instructions, over the kernel's {}",
                program.len(),
                bpf::MAX_INSNS
            )));
        }
        Ok(program)
    }

    fn block(&self, arch: Arch) -> Vec<Insn> {
        let mut b = vec![Insn::load(bpf::OFFSET_NR)];
        if arch == Arch::X86_64 {
            b.push(Insn::jge(syscalls::X32_SYSCALL_BIT, 0, 1));
            b.push(Insn::ret(Action::Errno(ENOSYS)));
        }
        for (name, errno) in &self.deny {
            if let Some(nr) = syscalls::number(name, arch) {
                b.push(Insn::jeq(nr, 0, 1));
                b.push(Insn::ret(Action::Errno(*errno)));
            }
        }
        for name in &self.deny_namespaces {
            if let Some(nr) = syscalls::number(name, arch) {
                b.push(Insn::jeq(nr, 0, 4));
                b.push(Insn::load(bpf::OFFSET_ARG0_LOW));
                b.push(Insn::jset(CLONE_NEW_MASK, 0, 1));
                b.push(Insn::ret(Action::Errno(EPERM)));
                b.push(Insn::ret(Action::Allow));
            }
        }
        for rule in &self.allow_only {
            if let Some(nr) = syscalls::number(&rule.call, arch) {
                let body = rule.block();
                b.push(Insn::jeq(nr, 0, jump(body.len())));
                b.extend(body);
            }
        }
        b.push(Insn::ret(Action::Allow));
        b
    }
}

impl AllowOnly {
    fn check(&self) -> Result<(), PolicyError> {
        let name = &self.call;
        let count_ok = |values: &[u32]| !values.is_empty() && values.len() <= MAX_VALUES;
        if !count_ok(&self.values) {
            return Err(PolicyError(format!(
                "`{name}` must allow 1 to {MAX_VALUES} values (got {})",
                self.values.len()
            )));
        }
        if self.when.len() > MAX_VALUES {
            return Err(PolicyError(format!(
                "`{name}` has more than {MAX_VALUES} further checks"
            )));
        }
        for (i, when) in self.when.iter().enumerate() {
            if !self.values.contains(&when.value) {
                return Err(PolicyError(format!(
                    "`{name}`: a check of argument {} when the first is {}, which it does not allow",
                    when.arg, when.value
                )));
            }
            if self.when[..i].iter().any(|w| w.value == when.value) {
                return Err(PolicyError(format!(
                    "`{name}`: two checks when the first argument is {}",
                    when.value
                )));
            }
            if !(1..=5).contains(&when.arg) || !count_ok(&when.values) {
                return Err(PolicyError(format!(
                    "`{name}`: a check must name argument 1 to 5 and allow 1 to {MAX_VALUES} values"
                )));
            }
        }
        // The block's length (AllowOnly::block): the load, a jump per value,
        // the errno, each further check's load, values, errno and allow, and
        // the final allow.
        let len =
            3 + self.values.len() + self.when.iter().map(|w| w.values.len() + 3).sum::<usize>();
        if len > usize::from(u8::MAX) {
            return Err(PolicyError(format!(
                "`{name}`: its checks take over {} instructions, more than a jump reaches",
                u8::MAX
            )));
        }
        Ok(())
    }

    /// After the call's number matched: the first argument's values, each
    /// jumping to its further check or to the final allow; the errno; the
    /// further checks, each ending in its errno; allow.
    fn block(&self) -> Vec<Insn> {
        let nested: Vec<Vec<Insn>> = self.when.iter().map(When::block).collect();
        let n = self.values.len();
        // From the end of the values' list (the errno return), where each
        // further check starts and where the final allow is.
        let mut starts = Vec::with_capacity(nested.len());
        let mut at = 1;
        for block in &nested {
            starts.push(at);
            at += block.len();
        }
        let allow_at = at;
        let mut b = vec![Insn::load(bpf::OFFSET_ARG0_LOW)];
        for (i, value) in self.values.iter().enumerate() {
            // From the instruction after this one to the errno return.
            let to_errno = n - i - 1;
            let target = match self.when.iter().position(|w| w.value == *value) {
                Some(w) => to_errno + starts[w],
                None => to_errno + allow_at,
            };
            b.push(Insn::jeq(*value, jump(target), 0));
        }
        b.push(Insn::ret(Action::Errno(self.errno)));
        for block in nested {
            b.extend(block);
        }
        b.push(Insn::ret(Action::Allow));
        b
    }
}

impl When {
    /// Loads the argument; its values jump to the allow at the block's
    /// end, anything else reaches the errno.
    fn block(&self) -> Vec<Insn> {
        let n = self.values.len();
        let mut b = vec![Insn::load(bpf::offset_arg_low(self.arg))];
        for (i, value) in self.values.iter().enumerate() {
            b.push(Insn::jeq(*value, jump(n - i), 0));
        }
        b.push(Insn::ret(Action::Errno(self.errno)));
        b.push(Insn::ret(Action::Allow));
        b
    }
}

/// A conditional jump's offset; a rule's checks (`AllowOnly::check`) keep
/// every one within 255 instructions.
#[expect(
    clippy::expect_used,
    reason = "the rules' checks hold it; a filter with a wrong jump must not be written"
)]
fn jump(offset: usize) -> u8 {
    u8::try_from(offset).expect("a rule's jumps fit in 255 instructions")
}

/// The `ja` offset from the instruction at `from` to `to`.
#[expect(
    clippy::expect_used,
    reason = "a program is at most 4096 instructions; a wrong offset must not be written"
)]
fn offset(from: usize, to: usize) -> u32 {
    u32::try_from(to - from - 1).expect("a program is at most 4096 instructions")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syscalls::{AUDIT_ARCH_AARCH64, AUDIT_ARCH_X86_64};

    fn policy() -> Policy {
        Policy {
            deny: vec![
                ("keyctl".into(), EPERM),
                ("clone3".into(), ENOSYS),
                ("iopl".into(), EPERM),
            ],
            deny_namespaces: vec!["clone".into(), "unshare".into()],
            allow_only: vec![
                AllowOnly {
                    call: "personality".into(),
                    values: vec![0, 8, 0xffff_ffff],
                    errno: EPERM,
                    when: Vec::new(),
                },
                AllowOnly {
                    call: "socket".into(),
                    values: vec![1, 2, 10, 16],
                    errno: EAFNOSUPPORT,
                    when: vec![
                        When {
                            value: 2,
                            arg: 2,
                            values: vec![0, 6, 17],
                            errno: EPROTONOSUPPORT,
                        },
                        When {
                            value: 16,
                            arg: 2,
                            values: vec![0],
                            errno: EPROTONOSUPPORT,
                        },
                    ],
                },
            ],
        }
    }

    const EAFNOSUPPORT: u16 = 97;
    const EPROTONOSUPPORT: u16 = 93;

    fn data(arch: u32, nr: u32, args: &[u64]) -> [u8; 64] {
        let mut d = [0u8; 64];
        d[0..4].copy_from_slice(&nr.to_ne_bytes());
        d[4..8].copy_from_slice(&arch.to_ne_bytes());
        for (i, arg) in args.iter().enumerate() {
            d[16 + 8 * i..24 + 8 * i].copy_from_slice(&arg.to_ne_bytes());
        }
        d
    }

    fn decide(arch: u32, nr: u32, arg0: u64) -> Action {
        decide_args(arch, nr, &[arg0])
    }

    fn decide_args(arch: u32, nr: u32, args: &[u64]) -> Action {
        let program = policy().compile().unwrap();
        let value = bpf::run(&program, &data(arch, nr, args)).expect("a well-formed program");
        [
            Action::Allow,
            Action::KillProcess,
            Action::Errno(EPERM),
            Action::Errno(ENOSYS),
            Action::Errno(EAFNOSUPPORT),
            Action::Errno(EPROTONOSUPPORT),
        ]
        .into_iter()
        .find(|a| a.value() == value)
        .unwrap_or_else(|| panic!("unexpected return {value:#x}"))
    }

    const X86: u32 = AUDIT_ARCH_X86_64;
    const ARM: u32 = AUDIT_ARCH_AARCH64;

    #[test]
    fn denied_calls_fail_with_their_errno_on_both_arches() {
        assert_eq!(decide(X86, 250, 0), Action::Errno(EPERM));
        assert_eq!(decide(ARM, 219, 0), Action::Errno(EPERM));
        assert_eq!(decide(X86, 435, 0), Action::Errno(ENOSYS));
        assert_eq!(decide(ARM, 435, 0), Action::Errno(ENOSYS));
        assert_eq!(decide(X86, 172, 0), Action::Errno(EPERM), "iopl");
        // 172 on aarch64 is getpid, not iopl.
        assert_eq!(decide(ARM, 172, 0), Action::Allow);
    }

    #[test]
    fn other_calls_are_allowed() {
        for nr in [0, 1, 2, 39, 59, 60, 231, 434, 436] {
            assert_eq!(decide(X86, nr, 0), Action::Allow, "x86_64 {nr}");
        }
        assert_eq!(decide(ARM, 63, 0), Action::Allow, "aarch64 read");
    }

    #[test]
    fn namespace_flags_are_refused_other_flags_kept() {
        let thread = 0x003d_0f00; // glibc's pthread_create flags
        let fork = 0x0120_0011; // CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD
        assert_eq!(decide(X86, 56, thread), Action::Allow);
        assert_eq!(decide(X86, 56, fork), Action::Allow);
        assert_eq!(decide(ARM, 220, fork), Action::Allow);
        for flag in [0x0002_0000, 0x1000_0000, 0x4000_0000, 0x2000_0000, 0x80] {
            assert_eq!(
                decide(X86, 56, fork | flag),
                Action::Errno(EPERM),
                "{flag:#x}"
            );
            assert_eq!(decide(X86, 272, flag), Action::Errno(EPERM), "{flag:#x}");
            assert_eq!(decide(ARM, 97, flag), Action::Errno(EPERM), "{flag:#x}");
        }
        // unshare(CLONE_FILES) is not a namespace.
        assert_eq!(decide(X86, 272, 0x400), Action::Allow);
        // Only the low word of the argument is read, as clone does.
        assert_eq!(decide(X86, 56, 0x1_0000_0000 | fork), Action::Allow);
    }

    #[test]
    fn personality_keeps_only_the_listed_values() {
        assert_eq!(decide(X86, 135, 0), Action::Allow);
        assert_eq!(decide(X86, 135, 8), Action::Allow);
        assert_eq!(decide(X86, 135, 0xffff_ffff), Action::Allow);
        assert_eq!(decide(X86, 135, 0x0040_0000), Action::Errno(EPERM));
        assert_eq!(decide(ARM, 92, 0x0004_0000), Action::Errno(EPERM));
    }

    #[test]
    fn socket_families_and_their_protocols_are_held() {
        const AF_UNIX: u64 = 1;
        const AF_INET: u64 = 2;
        const AF_INET6: u64 = 10;
        const AF_NETLINK: u64 = 16;
        const AF_VSOCK: u64 = 40;
        for (arch, socket) in [(X86, 41), (ARM, 198)] {
            for (family, protocol, want) in [
                (AF_UNIX, 0, Action::Allow),
                (AF_UNIX, 99, Action::Allow),
                (AF_INET, 0, Action::Allow),
                (AF_INET, 6, Action::Allow),
                (AF_INET, 132, Action::Errno(EPROTONOSUPPORT)),
                (AF_INET6, 132, Action::Allow),
                (AF_NETLINK, 0, Action::Allow),
                (AF_NETLINK, 15, Action::Errno(EPROTONOSUPPORT)),
                (AF_VSOCK, 0, Action::Errno(EAFNOSUPPORT)),
                (17, 0, Action::Errno(EAFNOSUPPORT)),
                // Only the low word is read, as the kernel does (an int).
                (0x1_0000_0000 | AF_INET, 6, Action::Allow),
            ] {
                assert_eq!(
                    decide_args(arch, socket, &[family, 1, protocol]),
                    want,
                    "{arch:#x} family {family} protocol {protocol}"
                );
            }
        }
        // socketpair is not named: untouched.
        assert_eq!(decide_args(X86, 53, &[AF_VSOCK, 1, 0]), Action::Allow);
    }

    #[test]
    fn foreign_arches_are_killed_and_x32_is_enosys() {
        const I386: u32 = 0x4000_0003;
        assert_eq!(decide(I386, 1, 0), Action::KillProcess);
        assert_eq!(decide(0, 0, 0), Action::KillProcess);
        assert_eq!(decide(X86, 0x4000_0000 | 250, 0), Action::Errno(ENOSYS));
        assert_eq!(decide(X86, 0x4000_0000, 0), Action::Errno(ENOSYS));
    }

    #[test]
    fn bad_policies_are_refused() {
        let with = |f: &dyn Fn(&mut Policy)| {
            let mut p = policy();
            f(&mut p);
            p.compile().unwrap_err().0
        };
        assert!(with(&|p| p.deny.push(("nope".into(), 1))).contains("unknown system call `nope`"));
        assert!(with(&|p| p.deny.push(("clone".into(), 1))).contains("more than one rule"));
        assert!(
            with(&|p| p.deny_namespaces.push("setns".into())).contains("clone and unshare only")
        );
        assert!(with(&|p| p.allow_only[0].values.clear()).contains("1 to 64 values"));
        assert!(with(&|p| p.allow_only[1].when[0].value = 40).contains("which it does not allow"));
        assert!(with(&|p| p.allow_only[1].when[1].value = 2).contains("two checks"));
        assert!(with(&|p| p.allow_only[1].when[0].arg = 6).contains("argument 1 to 5"));
        assert!(
            with(&|p| {
                p.allow_only[1].values = (0..64).collect();
                p.allow_only[1].when = (0..4)
                    .map(|value| When {
                        value,
                        arg: 2,
                        values: (0..60).collect(),
                        errno: 1,
                    })
                    .collect();
            })
            .contains("more than a jump reaches")
        );
    }

    #[test]
    fn the_empty_policy_still_checks_the_arch() {
        let program = Policy::default().compile().unwrap();
        let run = |arch, nr| bpf::run(&program, &data(arch, nr, &[0]));
        assert_eq!(run(X86, 250), Some(Action::Allow.value()));
        assert_eq!(run(0x4000_0003, 1), Some(Action::KillProcess.value()));
    }

    #[test]
    fn errnos_parse_by_name_and_number() {
        assert_eq!(parse_errno("EPERM"), Ok(1));
        assert_eq!(parse_errno("ENOSYS"), Ok(38));
        assert_eq!(parse_errno("13"), Ok(13));
        assert!(parse_errno("0").is_err());
        assert!(parse_errno("EFOO").is_err());
    }
}
