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
    /// The call fails with `EPERM` unless its first argument (its low 32
    /// bits) is one of these values (personality).
    pub allow_only: Vec<(String, Vec<u32>)>,
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
        _ => None,
    };
    named
        .or_else(|| text.parse().ok())
        .filter(|n| (1..=4095).contains(n))
        .ok_or_else(|| {
            PolicyError(format!(
                "unknown errno `{text}` (EPERM, EACCES, EINVAL, ENOSYS, EOPNOTSUPP or 1-4095)"
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
            .chain(self.allow_only.iter().map(|(n, _)| n));
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
        for (name, values) in &self.allow_only {
            if values.is_empty() || values.len() > MAX_VALUES {
                return Err(PolicyError(format!(
                    "`{name}` must allow 1 to {MAX_VALUES} values (got {})",
                    values.len()
                )));
            }
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
        for (name, values) in &self.allow_only {
            if let Some(nr) = syscalls::number(name, arch) {
                let n = values.len();
                // n <= MAX_VALUES, so every offset fits in a u8.
                b.push(Insn::jeq(nr, 0, (n + 3) as u8));
                b.push(Insn::load(bpf::OFFSET_ARG0_LOW));
                for (i, value) in values.iter().enumerate() {
                    b.push(Insn::jeq(*value, (n - i) as u8, 0));
                }
                b.push(Insn::ret(Action::Errno(EPERM)));
                b.push(Insn::ret(Action::Allow));
            }
        }
        b.push(Insn::ret(Action::Allow));
        b
    }
}

/// The `ja` offset from the instruction at `from` to `to`.
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
            allow_only: vec![("personality".into(), vec![0, 8, 0xffff_ffff])],
        }
    }

    fn data(arch: u32, nr: u32, arg0: u64) -> [u8; 64] {
        let mut d = [0u8; 64];
        d[0..4].copy_from_slice(&nr.to_ne_bytes());
        d[4..8].copy_from_slice(&arch.to_ne_bytes());
        d[16..24].copy_from_slice(&arg0.to_ne_bytes());
        d
    }

    fn decide(arch: u32, nr: u32, arg0: u64) -> Action {
        let program = policy().compile().unwrap();
        let value = bpf::run(&program, &data(arch, nr, arg0)).expect("a well-formed program");
        [
            Action::Allow,
            Action::KillProcess,
            Action::Errno(EPERM),
            Action::Errno(ENOSYS),
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
        assert!(with(&|p| p.allow_only[0].1.clear()).contains("1 to 64 values"));
    }

    #[test]
    fn the_empty_policy_still_checks_the_arch() {
        let program = Policy::default().compile().unwrap();
        let run = |arch, nr| bpf::run(&program, &data(arch, nr, 0));
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
