//! The random source of the property tests (the frame decoder's here, the
//! manifest reader's in the launcher, the agent's fed mutated frames):
//! only with `cfg(test)` or the `fuzz` feature, which the launcher and the
//! agent enable in their dev-dependencies alone.

/// xorshift64*: reproducible from its seed, which a failure prints.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// One of `items`, which must not be empty.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}
