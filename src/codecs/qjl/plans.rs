//! Dispatch plans of `qjl_encode`: the uniform block, the specialization and the workgroup
//! count, shared by the GPU store, the tests' runs (MSL emulator included) and the benches.

use super::kernels;
use crate::cpu::qjl::QjlLayout;
use crate::gpu::{DispatchPlan, registry};

/// Uniform block of `qjl_encode`.
/// Keep in sync with `QjlParams` in wgsl/qjl/qjl_encode_io.wgsl and msl/qjl/qjl_encode.metal.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct QjlParams {
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
    /// u32 words of one sign row (m / 32).
    pub sign_words: u32,
    /// u32 words of the norms of one token (ceil(H / 2)).
    pub norm_words: u32,
    /// Work items: (32-token tile, head pair)s.
    pub items: u32,
    /// Padding.
    pub pad: [u32; 4],
}

/// Where an encode dispatch reads its tokens (the one type every codec's plans take).
pub use crate::codec::SourceRows as EncodeFrom;

/// The specialization: D and m, fixed for a cache's life.
pub fn specialization(l: &QjlLayout) -> registry::Specialization {
    registry::Specialization(vec![("QJL_DIM", l.dim as u32), ("QJL_M", l.m as u32)])
}

/// Tokens per workgroup of `qjl_encode` (wgsl/qjl/qjl_encode_io.wgsl: `QT`).
pub const TILE_TOKENS: usize = 32;

/// Encoding of `tokens` tokens from `src` into a segment from token `seg_token`: one
/// workgroup per ([`TILE_TOKENS`]-token tile, head pair). Storage bindings: ring, incoming, signs, norms, tables
/// (the sketch as Sᵀ `[D][m]` f32).
pub fn plan_encode(
    l: &QjlLayout,
    tokens: usize,
    src: EncodeFrom,
    seg_token: usize,
) -> DispatchPlan {
    let norm_words = l.heads.div_ceil(2);
    let items = (tokens.div_ceil(TILE_TOKENS) * norm_words) as u32;
    let p = QjlParams {
        heads: l.heads as u32,
        dim: l.dim as u32,
        count: tokens as u32,
        src_start: src.start as u32,
        t_old: src.t_old as u32,
        inc_start: src.inc_start as u32,
        ring_tokens: src.ring_tokens.max(1) as u32,
        seg_token: seg_token as u32,
        in_row_words: (l.heads * l.dim).div_ceil(2) as u32,
        sign_words: l.sign_words() as u32,
        norm_words: norm_words as u32,
        items,
        pad: [0; 4],
    };
    DispatchPlan {
        kernel: &kernels::QJL_ENCODE,
        spec: specialization(l),
        uniform: bytemuck::bytes_of(&p).to_vec(),
        workgroups: u64::from(items),
    }
}

/// Workgroup memory (bytes) of `qjl_encode`: a 16-channel chunk of a block of
/// 32·min(4, m/32) sketch rows (padded by one row), the same chunk of the tile's keys, and the
/// block's sign words (wgsl/qjl/qjl_encode_io.wgsl). At most 10,816 bytes, under WebGPU's
/// default 16 KiB.
pub fn encode_workgroup_bytes(l: &QjlLayout) -> usize {
    let ri = l.sign_words().min(4);
    let (dc, t) = (16, TILE_TOKENS);
    4 * (dc * (32 * ri + 1) + dc * t + t * ri)
}
