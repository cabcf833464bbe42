#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Tests of the snapshot core on the real corpus and on hostile input.

mod bad_input;
mod categories;
mod corpus;
mod doctor;
mod flame;
mod holders;
mod layers;
mod modern;
mod overflow;
mod persistent;
mod pools;
mod predict;
mod profiler;
mod python;
mod ranks;
mod simulate;
mod slice;
mod whatif_measured;

/// A deterministic PRNG for chunk sizes and mutations.
pub struct Rng(pub u64);
impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
