//! TurboQuant's stored form in u32 words (CPU and GPU alike), for one side of a layer
//! (docs/contracts/turboquant.md). One block is one token (TurboQuant is per token: no group
//! along tokens); a layer holds `H` KV heads of width `D`, rotated in `P` = the smallest power
//! of two ≥ D dimensions, `S` code rows per vector (MSE: 1, RVQ: 2), `b` bits per code.
//!
//! **Streams** (per token, blocks one after another):
//! ```text
//! codes: u32 [H][S][row_words]     row_words = ceil(P·b / 32): the P codes of one stage,
//!                                  LSB-first (docs/contracts/bitpack.md), zero padding bits
//! norms: u32 [ceil(H / 2)]         the f16 norm of head h in half h % 2 of word h / 2
//!                                  (low half first; an odd H leaves the last high half 0)
//! ```
//! **Tables** (one per layer and side, uploaded once, counted as tables):
//! ```text
//! signs:     u32 [H][sign_words]    sign_words = ceil(P / 32); bit i of head h's row is 1
//!                                   where s_i = −1 (SplitMix64 stream 0 for keys, 1 for values)
//! codebooks: u32 [S][2][2^b]        per stage: the 2^b centroids (f32 bits, ascending), then
//!                                   the 2^b − 1 boundaries (f32 bits) and one f32::MAX pad;
//!                                   stage 2 is the RVQ residual codebook
//! ```

use crate::cpu::bitpack::packed_words;
use crate::cpu::turboquant::layout::TqLayout;
use crate::error::Result;

/// The layout of one TurboQuant side (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// KV heads H.
    pub heads: usize,
    /// Head width D (≥ 3).
    pub dim: usize,
    /// P = the smallest power of two ≥ D.
    pub padded: usize,
    /// Bits per code b (1..=8), each stage.
    pub bits: u32,
    /// Code rows per vector S: 1 (MSE) or 2 (RVQ).
    pub stages: usize,
}

impl Layout {
    /// Checks H ≥ 1, D ≥ 3, b in 1..=8 (stages is 1 or 2 by construction).
    pub fn new(heads: usize, dim: usize, bits: u32, stages: usize) -> Result<Self> {
        let t = TqLayout::new(heads, dim, bits)?;
        Ok(Self {
            heads,
            dim,
            padded: t.padded,
            bits,
            stages,
        })
    }

    /// The CPU reference's per-stage layout.
    pub fn stage(&self) -> TqLayout {
        TqLayout {
            heads: self.heads,
            dim: self.dim,
            padded: self.padded,
            bits: self.bits,
        }
    }

    /// Words of one code row: ceil(P·b / 32).
    pub fn row_words(&self) -> usize {
        packed_words(self.padded, self.bits).unwrap_or(0)
    }

    /// Words of the `codes` stream per token: H·S·row_words.
    pub fn code_words(&self) -> usize {
        self.heads * self.stages * self.row_words()
    }

    /// Words of the `norms` stream per token: ceil(H / 2).
    pub fn norm_words(&self) -> usize {
        self.heads.div_ceil(2)
    }

    /// Words of one head's sign row: ceil(P / 32).
    pub fn sign_words(&self) -> usize {
        self.padded.div_ceil(32)
    }

    /// Entries per codebook: 2^b.
    pub fn levels(&self) -> usize {
        1 << self.bits
    }

    /// First word of the codebooks in the tables: H·sign_words.
    pub fn codebook_offset(&self) -> usize {
        self.heads * self.sign_words()
    }

    /// First word of stage `s`'s centroids in the tables (its boundaries follow 2^b words on).
    pub fn centroids_offset(&self, s: usize) -> usize {
        self.codebook_offset() + s * 2 * self.levels()
    }

    /// Words of the tables.
    pub fn table_words(&self) -> usize {
        self.codebook_offset() + self.stages * 2 * self.levels()
    }

    /// First word of the code row of token `j` (counted in the stream), head `h`, stage `s`.
    pub fn row_at(&self, j: usize, h: usize, s: usize) -> usize {
        ((j * self.heads + h) * self.stages + s) * self.row_words()
    }

    /// Bits per value the stored form takes (codes and norm, not tables or window):
    /// S·b·P/D + 16/D.
    pub fn bits_per_value(&self) -> f64 {
        (self.stages as f64 * f64::from(self.bits) * self.padded as f64 + 16.0) / self.dim as f64
    }
}

/// Code `i` (b bits, LSB-first, possibly straddling two words) of the packed row `row`.
#[inline]
pub fn code_at(row: &[u32], i: usize, bits: u32) -> usize {
    let start = i * bits as usize;
    let (w, off) = (start / 32, start % 32);
    let mut v = row[w] >> off;
    if off + bits as usize > 32 {
        v |= row[w + 1] << (32 - off);
    }
    (v & ((1u32 << bits) - 1)) as usize
}

/// The stored norm of token `j` (counted in the stream), head `h`, from the `norms` stream.
#[inline]
pub fn norm_at(norms: &[u32], norm_words: usize, j: usize, h: usize) -> f32 {
    let w = norms[j * norm_words + h / 2];
    half::f16::from_bits((w >> (16 * (h % 2))) as u16).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_offsets() {
        let l = Layout::new(3, 80, 3, 2).unwrap();
        assert_eq!((l.padded, l.row_words(), l.code_words()), (128, 12, 72));
        assert_eq!((l.norm_words(), l.sign_words(), l.levels()), (2, 4, 8));
        assert_eq!(l.codebook_offset(), 12);
        assert_eq!(l.centroids_offset(1), 12 + 16);
        assert_eq!(l.table_words(), 12 + 32);
        assert_eq!(l.row_at(2, 1, 1), ((2 * 3 + 1) * 2 + 1) * 12);
        assert!((l.bits_per_value() - (2.0 * 3.0 * 128.0 + 16.0) / 80.0).abs() < 1e-12);
        let l = Layout::new(1, 3, 1, 1).unwrap();
        assert_eq!((l.padded, l.row_words(), l.sign_words()), (4, 1, 1));
    }

    #[test]
    fn codes_straddle_words() {
        // 3-bit codes 0..=7 repeated: code 10 sits in bits 30..33.
        let codes: Vec<u8> = (0..32).map(|i| (i % 8) as u8).collect();
        let mut words = vec![0u32; 3];
        crate::cpu::bitpack::bitpack(&codes, 3, &mut words).unwrap();
        for (i, &c) in codes.iter().enumerate() {
            assert_eq!(code_at(&words, i, 3), c as usize, "code {i}");
        }
        let norms = [u32::from(half::f16::from_f32(2.5).to_bits()) << 16];
        assert_eq!(norm_at(&norms, 1, 0, 1), 2.5);
        assert_eq!(norm_at(&norms, 1, 0, 0), 0.0);
    }
}
