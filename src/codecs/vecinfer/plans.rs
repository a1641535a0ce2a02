//! Dispatch plans of `vecinfer_quant`: the uniform block, the specialization and the workgroup
//! count, shared by the GPU store, the tests' runs (MSL emulator included) and the benches.

use super::kernels;
use crate::cpu::vecinfer::Preset;
use crate::cpu::vecinfer::transform::inv_sqrt;
use crate::cpu::vecinfer::vecinfer_quant::row_words;
use crate::gpu::{DispatchPlan, registry};

/// Tokens of one head per workgroup (the codebook is loaded once per block).
pub const TOKENS_PER_WORKGROUP: usize = 8;

/// Uniform block of `vecinfer_quant`.
/// Keep in sync with `ViParams` in wgsl/vecinfer/vecinfer_quant_io.wgsl and
/// msl/vecinfer/vecinfer_quant.metal.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ViParams {
    /// KV heads H.
    pub heads: u32,
    /// Head width D.
    pub dim: u32,
    /// Tokens of this dispatch.
    pub count: u32,
    /// Absolute token of the first one.
    pub src_start: u32,
    /// Tokens before this one are read from the ring.
    pub t_old: u32,
    /// Absolute token of the incoming buffer's first row.
    pub inc_start: u32,
    /// Rows of the ring.
    pub ring_tokens: u32,
    /// Token (in the segment) of the first token written.
    pub seg_token: u32,
    /// u32 words of one f16 input row (H·D halves).
    pub in_row_words: u32,
    /// u32 words of one packed index row.
    pub row_words: u32,
    /// Work items: (token block, head)s.
    pub items: u32,
    /// First word of the codebooks in the tables (H·D for keys, 0 for values).
    pub cb_offset: u32,
    /// c = the f32 nearest to 1/√P.
    pub inv_sqrt_p: f32,
    /// Padding.
    pub pad: [u32; 3],
}

/// What one side's quantize kernel is specialized on: H, D, P, the preset, keys or values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantLayout {
    /// KV heads H.
    pub heads: usize,
    /// Head width D.
    pub dim: usize,
    /// P = the next power of two ≥ D.
    pub padded: usize,
    /// d_s and C.
    pub preset: Preset,
    /// Keys (÷ λ before the transform) or values.
    pub keys: bool,
}

impl QuantLayout {
    /// Sub-vectors per vector.
    pub fn n_sub(&self) -> usize {
        self.padded / self.preset.sub_dim
    }

    /// u32 words of one packed row.
    pub fn row_words(&self) -> usize {
        row_words(self.n_sub(), self.preset)
    }

    /// Words of the tables: keys λ `[H][D]` then the codebooks `[H][C][d_s]`.
    pub fn table_words(&self) -> usize {
        let lambda = if self.keys { self.heads * self.dim } else { 0 };
        lambda + self.heads * self.preset.centroids * self.preset.sub_dim
    }
}

/// Where an encode dispatch reads its tokens: token s comes from ring row `s % ring_tokens`
/// when `s < t_old`, else from the incoming buffer's row `s − inc_start`.
pub use crate::codecs::qjl::plans::EncodeFrom;

/// The specialization: P, d_s, C, log2 C, the side and the block of tokens.
pub fn specialization(l: &QuantLayout) -> registry::Specialization {
    registry::Specialization(vec![
        ("VI_P", l.padded as u32),
        ("VI_DS", l.preset.sub_dim as u32),
        ("VI_C", l.preset.centroids as u32),
        ("VI_BITS", l.preset.index_bits()),
        ("VI_KEYS", u32::from(l.keys)),
        ("VI_TPW", TOKENS_PER_WORKGROUP as u32),
    ])
}

/// Quantizing `tokens` tokens from `src` into a segment from token `seg_token`: one workgroup
/// per (block of [`TOKENS_PER_WORKGROUP`] tokens, head). Storage bindings: ring, incoming,
/// codes, tables.
pub fn plan_quant(
    l: &QuantLayout,
    tokens: usize,
    src: EncodeFrom,
    seg_token: usize,
) -> DispatchPlan {
    let items = (tokens.div_ceil(TOKENS_PER_WORKGROUP) * l.heads) as u32;
    let p = ViParams {
        heads: l.heads as u32,
        dim: l.dim as u32,
        count: tokens as u32,
        src_start: src.start as u32,
        t_old: src.t_old as u32,
        inc_start: src.inc_start as u32,
        ring_tokens: src.ring_tokens.max(1) as u32,
        seg_token: seg_token as u32,
        in_row_words: (l.heads * l.dim).div_ceil(2) as u32,
        row_words: l.row_words() as u32,
        items,
        cb_offset: if l.keys { (l.heads * l.dim) as u32 } else { 0 },
        inv_sqrt_p: inv_sqrt(l.padded),
        pad: [0; 3],
    };
    DispatchPlan {
        kernel: &kernels::VECINFER_QUANT,
        spec: specialization(l),
        uniform: bytemuck::bytes_of(&p).to_vec(),
        workgroups: u64::from(items),
    }
}

/// Workgroup memory (bytes) of `vecinfer_quant`: the codebook, one vector, its indices and the
/// workgroup variant's reduction.
pub fn quant_workgroup_bytes(l: &QuantLayout) -> usize {
    let wg = kernels::VECINFER_QUANT.workgroup_size as usize;
    4 * (l.preset.centroids * l.preset.sub_dim + l.padded + l.n_sub() + 2 * wg)
}
