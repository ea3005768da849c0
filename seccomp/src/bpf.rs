//! Classic BPF, as much of it as a seccomp filter needs: load a 32-bit word
//! of `seccomp_data`, compare it with a constant, jump, return.
//!
//! `struct sock_filter` is `{ u16 code; u8 jt; u8 jf; u32 k; }` in the
//! machine's byte order; a program is an array of them (at most
//! [`MAX_INSNS`]), which is what bubblewrap's `--add-seccomp-fd` reads.

/// `BPF_MAXINSNS`: the kernel refuses longer programs.
pub const MAX_INSNS: usize = 4096;

// Instruction codes: class | size/operation | source (linux/bpf_common.h).
const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD 0x00 | BPF_W 0x00 | BPF_ABS 0x20
const BPF_JMP_JA: u16 = 0x05; // BPF_JMP 0x05 | BPF_JA 0x00
const BPF_JMP_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ 0x10 | BPF_K 0x00
const BPF_JMP_JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE 0x30 | BPF_K
const BPF_JMP_JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET 0x40 | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET 0x06 | BPF_K

/// Offsets in `struct seccomp_data` (little-endian machines: the low word of
/// an argument comes first).
pub const OFFSET_NR: u32 = 0;
pub const OFFSET_ARCH: u32 = 4;
pub const OFFSET_ARG0_LOW: u32 = 16;

/// The offset of the low word of argument `n` (0 to 5).
pub fn offset_arg_low(n: u8) -> u32 {
    OFFSET_ARG0_LOW + 8 * u32::from(n)
}

/// What the filter returns (`SECCOMP_RET_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Allow,
    Errno(u16),
    KillProcess,
}

impl Action {
    pub fn value(self) -> u32 {
        match self {
            Action::Allow => 0x7fff_0000,
            Action::Errno(errno) => 0x0005_0000 | u32::from(errno),
            Action::KillProcess => 0x8000_0000,
        }
    }
}

/// One instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

impl Insn {
    /// A = the 32-bit word at `offset` of `seccomp_data`.
    pub fn load(offset: u32) -> Self {
        Self::new(BPF_LD_W_ABS, 0, 0, offset)
    }

    /// Skips `jt` instructions when A == k, else `jf`.
    pub fn jeq(k: u32, jt: u8, jf: u8) -> Self {
        Self::new(BPF_JMP_JEQ_K, jt, jf, k)
    }

    /// Skips `jt` instructions when A >= k (unsigned), else `jf`.
    pub fn jge(k: u32, jt: u8, jf: u8) -> Self {
        Self::new(BPF_JMP_JGE_K, jt, jf, k)
    }

    /// Skips `jt` instructions when A & k != 0, else `jf`.
    pub fn jset(k: u32, jt: u8, jf: u8) -> Self {
        Self::new(BPF_JMP_JSET_K, jt, jf, k)
    }

    /// Skips `k` instructions.
    pub fn ja(k: u32) -> Self {
        Self::new(BPF_JMP_JA, 0, 0, k)
    }

    pub fn ret(action: Action) -> Self {
        Self::new(BPF_RET_K, 0, 0, action.value())
    }

    fn new(code: u16, jt: u8, jf: u8, k: u32) -> Self {
        Self { code, jt, jf, k }
    }

    /// The 8 bytes of `struct sock_filter`, in the machine's byte order.
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0..2].copy_from_slice(&self.code.to_ne_bytes());
        b[2] = self.jt;
        b[3] = self.jf;
        b[4..8].copy_from_slice(&self.k.to_ne_bytes());
        b
    }

    /// One line of assembly, for `--dump`.
    pub fn disassemble(self) -> String {
        let Insn { code, jt, jf, k } = self;
        match code {
            BPF_LD_W_ABS => format!("ld [{k}]"),
            BPF_JMP_JA => format!("ja +{k}"),
            BPF_JMP_JEQ_K => format!("jeq {k:#x}, +{jt}, +{jf}"),
            BPF_JMP_JGE_K => format!("jge {k:#x}, +{jt}, +{jf}"),
            BPF_JMP_JSET_K => format!("jset {k:#x}, +{jt}, +{jf}"),
            BPF_RET_K => match k {
                0x7fff_0000 => "ret ALLOW".into(),
                0x8000_0000 => "ret KILL_PROCESS".into(),
                k if k & 0xffff_0000 == 0x0005_0000 => format!("ret ERRNO({})", k & 0xffff),
                k => format!("ret {k:#x}"),
            },
            _ => format!("code {code:#x} jt {jt} jf {jf} k {k:#x}"),
        }
    }
}

/// A program as bytes.
pub fn to_bytes(program: &[Insn]) -> Vec<u8> {
    program.iter().flat_map(|i| i.to_bytes()).collect()
}

/// Runs `program` on one call, as the kernel would: the returned value, or
/// `None` when the program is malformed (a jump out of range, a load out of
/// `seccomp_data`, falling off the end, an unknown instruction).
#[cfg(test)]
pub fn run(program: &[Insn], data: &[u8; 64]) -> Option<u32> {
    let mut pc = 0usize;
    let mut a = 0u32;
    loop {
        let Insn { code, jt, jf, k } = *program.get(pc)?;
        pc += 1;
        let jump = |cond: bool| {
            if cond {
                usize::from(jt)
            } else {
                usize::from(jf)
            }
        };
        match code {
            BPF_LD_W_ABS => {
                let at = usize::try_from(k).ok()?;
                let word = data.get(at..at.checked_add(4)?)?;
                if at % 4 != 0 {
                    return None;
                }
                a = u32::from_ne_bytes(word.try_into().ok()?);
            }
            BPF_JMP_JA => pc = pc.checked_add(usize::try_from(k).ok()?)?,
            BPF_JMP_JEQ_K => pc += jump(a == k),
            BPF_JMP_JGE_K => pc += jump(a >= k),
            BPF_JMP_JSET_K => pc += jump(a & k != 0),
            BPF_RET_K => return Some(k),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_is_struct_sock_filter() {
        let bytes = Insn::jeq(0x1234_5678, 1, 2).to_bytes();
        assert_eq!(u16::from_ne_bytes([bytes[0], bytes[1]]), 0x15);
        assert_eq!((bytes[2], bytes[3]), (1, 2));
        assert_eq!(
            u32::from_ne_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
            0x1234_5678
        );
        assert_eq!(Insn::load(4).to_bytes()[0..2], 0x20u16.to_ne_bytes());
        assert_eq!(Insn::ret(Action::Errno(1)).k, 0x0005_0001);
    }

    #[test]
    fn the_interpreter_refuses_malformed_programs() {
        let data = [0u8; 64];
        assert_eq!(run(&[Insn::load(0)], &data), None, "falls off the end");
        assert_eq!(run(&[Insn::ja(5)], &data), None, "jumps out");
        assert_eq!(run(&[Insn::load(62)], &data), None, "loads out of range");
        assert_eq!(
            run(&[Insn::load(0), Insn::ret(Action::Allow)], &data),
            Some(Action::Allow.value())
        );
    }
}
