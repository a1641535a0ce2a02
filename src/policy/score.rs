//! The scoring at append (docs/contracts/qfilters.md): the CPU reference. Scores are computed
//! once per (token, KV head) on the key as appended, rounded to f16 (what the cache stores),
//! in f32 summed in channel order, and kept beside the cache (4 bytes per token-head).

use half::f16;

/// What a policy scores (higher: kept).
#[derive(Clone, Debug)]
pub enum Scorer {
    /// ⟨k, u_h⟩ with the layer's filters `[H][D]` (already negated for `flip`).
    Filter(Vec<f32>),
    /// −‖k‖ (keep the smallest norms).
    NegNorm,
    /// Every token 0 (StreamingLLM orders by position, not score).
    Zero,
}

impl Scorer {
    /// CRC-32 of the filters' f32 bytes (little-endian), 0 for the policies without any: a
    /// saved cache records it, so that a load whose calibration file changed is refused.
    pub fn checksum(&self) -> u32 {
        match self {
            Scorer::Filter(u) => crate::persist::format::crc32_f32(u),
            _ => 0,
        }
    }

    /// Scores `[n][H]` of the rows `k` `[n][H][D]`.
    pub fn score(&self, k: &[f16], heads: usize, dim: usize) -> Vec<f32> {
        k.chunks_exact(dim)
            .enumerate()
            .map(|(i, row)| {
                let h = i % heads;
                match self {
                    Scorer::Filter(u) => row
                        .iter()
                        .zip(&u[h * dim..(h + 1) * dim])
                        .map(|(x, y)| x.to_f32() * y)
                        .sum(),
                    Scorer::NegNorm => -row
                        .iter()
                        .map(|x| x.to_f32() * x.to_f32())
                        .sum::<f32>()
                        .sqrt(),
                    Scorer::Zero => 0.0,
                }
            })
            .collect()
    }
}
