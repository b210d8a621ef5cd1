//! A seeded xorshift generator for the CPU reference's tests (inputs and weights).

/// xorshift64 state; any nonzero seed.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    /// Uniform in [-1, 1).
    pub(super) fn f(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// `n` values `f() · scale + offset`.
    pub(super) fn vec(&mut self, n: usize, scale: f32, offset: f32) -> Vec<f32> {
        (0..n).map(|_| self.f() * scale + offset).collect()
    }
}
