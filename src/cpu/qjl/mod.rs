//! CPU reference of QJL keys (docs/contracts/qjl.md): per key the f16 norm and the m sign
//! bits of a Gaussian projection; ⟨q, k⟩ is estimated from them without reconstructing k.
//!
//! Shapes for a batch of n keys (tokens × H KV heads × D): sign rows `[n][H][m/32]` (bit i of
//! a row = σ_i, LSB-first, docs/contracts/bitpack.md), norms `[n][H]` f16. The sketch S is
//! `[m][D]` f32, one per layer, shared by its heads ([`sketch_table`]).

pub mod attend_k;
pub mod qjl_encode;
pub mod score;

use crate::cpu::common::sketch::check_sketch_rows;
use crate::cpu::common::splitmix::{STREAM_QJL_SKETCH, gaussian_table};
use crate::error::{Error, Result};

/// One layer's QJL key side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QjlLayout {
    /// KV heads H.
    pub heads: usize,
    /// Head dimension D.
    pub dim: usize,
    /// Sketch rows m (a multiple of 32).
    pub m: usize,
}

impl QjlLayout {
    /// H ≥ 1, D ≥ 1; `m` a positive multiple of 32, default D rounded up to a multiple of 32.
    pub fn new(heads: usize, dim: usize, m: Option<usize>) -> Result<Self> {
        if heads == 0 || dim == 0 {
            return Err(Error::Config(format!(
                "QJL needs at least one head and one dimension, got H = {heads}, D = {dim}"
            )));
        }
        let m = m.unwrap_or(dim.next_multiple_of(32));
        check_sketch_rows(m)?;
        Ok(Self { heads, dim, m })
    }

    /// Words of one sign row: m / 32.
    pub fn sign_words(&self) -> usize {
        self.m / 32
    }

    /// Length of the sketch S `[m][D]`.
    pub fn sketch_len(&self) -> usize {
        self.m * self.dim
    }
}

/// The layer's sketch S `[m][D]`: turboquant.md's Gaussian table of (seed, layer, head 0,
/// stream 3).
pub fn sketch_table(seed: u64, layer: u64, l: &QjlLayout) -> Vec<f32> {
    gaussian_table(seed, layer, STREAM_QJL_SKETCH, l.m, l.dim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts() {
        assert_eq!(QjlLayout::new(3, 64, None).unwrap().m, 64);
        assert_eq!(QjlLayout::new(3, 65, None).unwrap().m, 96);
        assert_eq!(QjlLayout::new(1, 3, None).unwrap().sign_words(), 1);
        assert_eq!(QjlLayout::new(1, 64, Some(256)).unwrap().sign_words(), 8);
        for bad in [Some(0), Some(48), Some(65)] {
            assert!(matches!(QjlLayout::new(1, 64, bad), Err(Error::Config(_))));
        }
        assert!(matches!(QjlLayout::new(0, 64, None), Err(Error::Config(_))));
        assert!(matches!(QjlLayout::new(1, 0, None), Err(Error::Config(_))));
    }
}
