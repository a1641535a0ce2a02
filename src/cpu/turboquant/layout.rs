//! Shapes of TurboQuant's stored tensors (docs/contracts/turboquant.md). For a batch of n
//! vectors of one layer side (tokens × H KV heads × D):
//!
//! - MSE: codes `[n][H][row_words]` (one row of P codes of b bits, LSB-first per
//!   docs/contracts/bitpack.md, padded to whole words with zero bits), norms `[n][H]` f16.
//! - RVQ: codes `[n][H][2][row_words]` (stage-1 row, then stage-2 row), norms `[n][H]`.
//! - Prod: stage-1 codes `[n][H][row_words(b − 1)]`, norms `[n][H]`, residual norms ρ
//!   `[n][H]` f16, sign rows `[n][H][m/32]`.
//!
//! Side tables: the signs `[H][P]` (±1.0, from [`crate::cpu::common::splitmix::sign_table`])
//! and the Prod sketch S `[m][P]` (one per layer, stream 2).

use crate::cpu::bitpack::{check_bits, packed_words};
use crate::cpu::common::sketch::check_sketch_rows;
use crate::cpu::turboquant::rotation::padded_dim;
use crate::error::{Error, Result};

/// One layer side quantized with b bits per coordinate (MSE, or each RVQ stage).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TqLayout {
    /// KV heads H.
    pub heads: usize,
    /// Head dimension D (≥ 3).
    pub dim: usize,
    /// P = the smallest power of two ≥ D.
    pub padded: usize,
    /// Bits per coordinate b (1..=8).
    pub bits: u32,
}

impl TqLayout {
    /// Checks H ≥ 1, D ≥ 3 and b in 1..=8.
    pub fn new(heads: usize, dim: usize, bits: u32) -> Result<Self> {
        check_bits(bits)?;
        let padded = padded_dim(dim)?;
        if heads == 0 {
            return Err(Error::Config("TurboQuant needs at least one head".into()));
        }
        Ok(Self {
            heads,
            dim,
            padded,
            bits,
        })
    }

    /// Words of one code row: ceil(P·b / 32).
    pub fn row_words(&self) -> usize {
        packed_words(self.padded, self.bits).expect("bits checked in new")
    }

    /// Length of the sign table `[H][P]`.
    pub fn signs_len(&self) -> usize {
        self.heads * self.padded
    }
}

/// TurboQuant-Prod with b bits in total: stage 1 is MSE at b − 1 bits, then m sign bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProdLayout {
    /// The stage-1 layout (its `bits` is b − 1).
    pub stage1: TqLayout,
    /// Sketch rows m (a multiple of 32).
    pub m: usize,
}

impl ProdLayout {
    /// `bits` in 2..=8 (b in total); `m` a multiple of 32, default P rounded up to one.
    pub fn new(heads: usize, dim: usize, bits: u32, m: Option<usize>) -> Result<Self> {
        check_bits(bits)?;
        if bits < 2 {
            return Err(Error::Config(
                "TurboQuant-Prod needs at least 2 bits (1 for the MSE stage, 1 for the sketch)"
                    .into(),
            ));
        }
        let stage1 = TqLayout::new(heads, dim, bits - 1)?;
        let m = m.unwrap_or(stage1.padded.next_multiple_of(32));
        check_sketch_rows(m)?;
        Ok(Self { stage1, m })
    }

    /// Words of one sign row: m / 32.
    pub fn sign_words(&self) -> usize {
        self.m / 32
    }

    /// Length of the sketch table S `[m][P]`.
    pub fn sketch_len(&self) -> usize {
        self.m * self.stage1.padded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        let l = TqLayout::new(3, 64, 3).unwrap();
        assert_eq!((l.padded, l.row_words()), (64, 6));
        let l = TqLayout::new(1, 3, 1).unwrap();
        assert_eq!((l.padded, l.row_words()), (4, 1));
        let l = TqLayout::new(2, 96, 5).unwrap();
        assert_eq!((l.padded, l.row_words()), (128, 20));
        let p = ProdLayout::new(3, 64, 3, None).unwrap();
        assert_eq!((p.stage1.bits, p.m, p.sign_words()), (2, 64, 2));
        assert_eq!(ProdLayout::new(1, 5, 2, None).unwrap().m, 32);
    }

    #[test]
    fn bad() {
        assert!(matches!(TqLayout::new(1, 2, 2), Err(Error::Config(_))));
        assert!(matches!(TqLayout::new(0, 64, 2), Err(Error::Config(_))));
        assert!(matches!(
            TqLayout::new(1, 64, 0),
            Err(Error::BitsOutOfRange { bits: 0 })
        ));
        assert!(matches!(
            TqLayout::new(1, 64, 9),
            Err(Error::BitsOutOfRange { bits: 9 })
        ));
        assert!(matches!(
            ProdLayout::new(1, 64, 1, None),
            Err(Error::Config(_))
        ));
        assert!(matches!(
            ProdLayout::new(1, 64, 9, None),
            Err(Error::BitsOutOfRange { .. })
        ));
        assert!(matches!(
            ProdLayout::new(1, 64, 3, Some(40)),
            Err(Error::Config(_))
        ));
    }
}
