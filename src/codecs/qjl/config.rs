//! QJL's settings (keys only): sketch rows m and the seed of the Gaussian table
//! (docs/contracts/qjl.md).

use std::fmt;

use crate::cpu::common::splitmix::DEFAULT_SEED;

/// The key side's QJL settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QjlSide {
    /// Sketch rows m (a positive multiple of 32); `None`: D rounded up to a multiple of 32.
    pub m: Option<usize>,
    /// The seed of the sketch's SplitMix64 stream (default [`DEFAULT_SEED`]).
    pub seed: u64,
}

impl Default for QjlSide {
    /// m from the head width, the default seed.
    fn default() -> Self {
        Self {
            m: None,
            seed: DEFAULT_SEED,
        }
    }
}

impl QjlSide {
    /// The default settings ([`Default`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// The same settings with `m` sketch rows (`None`: from the head width).
    pub fn m(mut self, m: impl Into<Option<usize>>) -> Self {
        self.m = m.into();
        self
    }

    /// The same settings with the sketch's seed `seed`.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// m for head width `dim`.
    pub fn rows(&self, dim: usize) -> usize {
        self.m.unwrap_or(dim.next_multiple_of(32))
    }
}

impl fmt::Display for QjlSide {
    /// `m=M` when given, `seed=0x…` when not the default.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(m) = self.m {
            parts.push(format!("m={m}"));
        }
        if self.seed != DEFAULT_SEED {
            parts.push(format!("seed={:#x}", self.seed));
        }
        write!(f, "{}", parts.join(","))
    }
}
