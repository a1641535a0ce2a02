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
        use crate::cpu::policy::evict_score::evict_score;
        match self {
            Scorer::Filter(u) => evict_score(k, Some(u), heads, dim),
            Scorer::NegNorm => evict_score(k, None, heads, dim),
            Scorer::Zero => vec![0.0; k.len() / dim],
        }
    }

    /// The scoring kernel's plan for `n` rows of `heads` × `dim` ([`super::kernels::plan_score`]),
    /// `None` for a policy that scores nothing (StreamingLLM).
    pub fn plan(
        &self,
        n: usize,
        heads: usize,
        dim: usize,
        row0: usize,
    ) -> crate::Result<Option<crate::gpu::DispatchPlan>> {
        match self {
            Scorer::Filter(_) => super::kernels::plan_score(n, heads, dim, row0, false).map(Some),
            Scorer::NegNorm => super::kernels::plan_score(n, heads, dim, row0, true).map(Some),
            Scorer::Zero => Ok(None),
        }
    }
}
