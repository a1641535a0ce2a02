//! The scoring at append (docs/contracts/qfilters.md): the CPU reference, and the device
//! scoring of appends from GPU buffers (`DeviceScoring`, the `evict_score` kernel). Scores are
//! computed once per (token, KV head) on the key as appended, rounded to f16 (what the cache
//! stores), in f32 (the CPU sums in channel order; the kernel within the f32 summation bound
//! of docs/contracts/qfilters.md), and kept beside the cache (4 bytes per token-head).

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

/// What the device scoring of one append needs, allocated before the append stores anything
/// (so that an out-of-memory leaves the layer as it was): the filters `[H][D]` f32 (one word
/// for key norm) and the scores `[n][H]` f32.
pub(crate) struct DeviceScoring {
    path: crate::context::KernelPath,
    plan: crate::gpu::DispatchPlan,
    filters: wgpu::Buffer,
    scores: wgpu::Buffer,
}

impl DeviceScoring {
    /// Scoring of `n` rows of `heads` × `dim` on `choice` (`None` for StreamingLLM, which
    /// scores nothing: every score 0).
    pub(crate) fn new(
        scorer: &Scorer,
        ctx: &crate::Context,
        choice: crate::context::PathChoice,
        n: usize,
        heads: usize,
        dim: usize,
    ) -> crate::Result<Option<Self>> {
        let Some(plan) = scorer.plan(n, heads, dim, 0)? else {
            return Ok(None);
        };
        let path = ctx.resolve(plan.kernel, choice)?;
        let filters: &[f32] = match scorer {
            Scorer::Filter(u) => u,
            _ => &[0.0],
        };
        Ok(Some(Self {
            path,
            plan,
            filters: crate::gpu::upload(
                ctx,
                "kvpack eviction filters",
                bytemuck::cast_slice(filters),
            )?,
            scores: crate::gpu::storage_buffer(
                ctx,
                "kvpack eviction scores",
                (n * heads * 4) as u64,
            )?,
        }))
    }

    /// Records the scoring of `rows` into `enc` (its output: [`Self::scores`]).
    pub(crate) fn encode(
        &self,
        ctx: &crate::Context,
        enc: &mut wgpu::CommandEncoder,
        rows: &wgpu::Buffer,
    ) -> crate::Result<()> {
        crate::gpu::encode_plan(
            ctx,
            enc,
            self.path,
            &self.plan,
            &[rows, &self.filters, &self.scores],
        )
    }

    /// The output buffer: `[n][H]` f32 scores once the recorded scoring ran.
    pub(crate) fn scores(&self) -> &wgpu::Buffer {
        &self.scores
    }
}
