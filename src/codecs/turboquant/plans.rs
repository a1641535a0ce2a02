//! Dispatch plans of TurboQuant's kernels (`turboquant_quant`, `turboquant_dequant`): the
//! uniform block, the specialization and the workgroup counts, shared by the GPU store, the
//! tests' runs (MSL emulator included) and the benches.

use super::kernels;
use super::layout::Layout;
use crate::cpu::turboquant::rotation::inv_sqrt;
use crate::gpu::{DispatchPlan, registry};
use crate::path::KernelPath;

/// Uniform block of both kernels.
/// Keep in sync with `TqParams` in wgsl/turboquant/turboquant_common.wgsl and
/// msl/turboquant/turboquant_common.metal.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct TqParams {
    /// KV heads H.
    pub heads: u32,
    /// Head width D.
    pub dim: u32,
    /// Tokens of this dispatch.
    pub count: u32,
    /// Quantize: absolute token of the first one.
    pub src_start: u32,
    /// Quantize: tokens before this one are read from the ring.
    pub t_old: u32,
    /// Quantize: absolute token of the incoming buffer's first row.
    pub inc_start: u32,
    /// Quantize: rows of the ring.
    pub ring_tokens: u32,
    /// Token (in the segment) of the first token written (quantize) or read (dequantize).
    pub seg_token: u32,
    /// u32 words of one f16 input row (H·D halves).
    pub in_row_words: u32,
    /// u32 words of one code row (ceil(P·b / 32)).
    pub row_words: u32,
    /// u32 words of the norms of one token (ceil(H / 2)).
    pub norm_words: u32,
    /// Work items: quantize, (token, head pair)s (Prod: (group of PQ_TT tokens, head pair)s);
    /// dequantize, (token, head)s.
    pub items: u32,
    /// c = the f32 nearest to 1/√P.
    pub inv_sqrt_p: f32,
    /// First word of the codebooks in the tables (H·ceil(P / 32)).
    pub cb_offset: u32,
    /// Padding.
    pub pad: [u32; 2],
}

/// log2 of a power of two.
pub fn log2(p: usize) -> u32 {
    p.trailing_zeros()
}

/// The specialization of both kernels: P, log2 P, b and the stages, fixed for a cache's life.
pub fn specialization(l: &Layout) -> registry::Specialization {
    registry::Specialization(vec![
        ("TQ_P", l.padded as u32),
        ("TQ_LOG2P", log2(l.padded)),
        ("TQ_BITS", l.bits),
        ("TQ_STAGES", l.stages as u32),
    ])
}

fn base(l: &Layout) -> TqParams {
    TqParams {
        heads: l.heads as u32,
        dim: l.dim as u32,
        in_row_words: (l.heads * l.dim).div_ceil(2) as u32,
        row_words: l.row_words() as u32,
        norm_words: l.norm_words() as u32,
        inv_sqrt_p: inv_sqrt(l.padded),
        cb_offset: l.codebook_offset() as u32,
        ..Default::default()
    }
}

/// Head pairs one workgroup of `turboquant_quant` quantizes on `path`: 8 on the subgroup
/// variant (one group of 8 lanes per pair), 1 on the workgroup-memory variant and in MSL.
pub fn pairs_per_workgroup(path: KernelPath) -> u32 {
    match path {
        KernelPath::WgslSubgroup => kernels::TURBOQUANT_QUANT.workgroup_size / 8,
        _ => 1,
    }
}

/// Where a quantize dispatch reads its tokens (the one type every codec's plans take).
pub use crate::codec::SourceRows as QuantSource;

/// Quantization of `tokens` tokens from `src` into a segment from token `seg_token`, on
/// `path` (its variant decides the work per workgroup).
/// Storage bindings: ring, incoming, codes, norms, tables.
pub fn plan_quant(
    l: &Layout,
    path: KernelPath,
    tokens: usize,
    src: QuantSource,
    seg_token: usize,
) -> DispatchPlan {
    let items = (tokens * l.norm_words()) as u32;
    let p = quant_params(l, tokens, src, seg_token, items);
    DispatchPlan {
        kernel: &kernels::TURBOQUANT_QUANT,
        spec: specialization(l),
        uniform: bytemuck::bytes_of(&p).to_vec(),
        workgroups: u64::from(items.div_ceil(pairs_per_workgroup(path))),
    }
}

/// Reconstruction of `tokens` tokens of a segment from token `seg_token` into `[tokens][H][D]`
/// f32. Storage bindings: codes, norms, tables, out.
pub fn plan_dequant(l: &Layout, tokens: usize, seg_token: usize) -> DispatchPlan {
    let items = (tokens * l.heads) as u32;
    let p = TqParams {
        count: tokens as u32,
        seg_token: seg_token as u32,
        items,
        ..base(l)
    };
    DispatchPlan {
        kernel: &kernels::TURBOQUANT_DEQUANT,
        spec: specialization(l),
        uniform: bytemuck::bytes_of(&p).to_vec(),
        workgroups: u64::from(items),
    }
}

/// Workgroup memory (bytes) `turboquant_quant` takes on `path` for a layout: the codebooks,
/// and the vector and its codes (workgroup variant, MSL) or the code exchange of the subgroup
/// variant's groups (only where a lane's codes are not whole words).
pub fn quant_workgroup_bytes(l: &Layout, path: KernelPath) -> usize {
    let cb = 2 * l.stages * l.levels() * 4;
    match path {
        KernelPath::WgslSubgroup => {
            let c = (l.padded / 8).max(1);
            let direct = (c * l.bits as usize).is_multiple_of(32);
            cb + if direct {
                4
            } else {
                8 * l.padded * l.stages * 4
            }
        }
        _ => cb + l.padded * 4 * (1 + l.stages) + 4,
    }
}

/// Tokens per workgroup of `turboquant_prod_quant` (`PQ_TOKENS_PER_WG`, its PQ_TT): its 2·PQ_TT residuals (a head
/// pair of each token) stay in workgroup memory, 4 KiB of them (P = 128: 4 tokens, P = 512: 1),
/// so that each sketch word read from the tables serves 2·PQ_TT vectors.
pub fn prod_tokens_per_workgroup(l: &Layout) -> usize {
    (512 / l.padded).clamp(1, 4)
}

/// The specialization of `turboquant_prod_quant`: the stage-1 layout's (b − 1 bits, one
/// stage), m and the tokens per workgroup.
pub fn prod_specialization(l: &Layout, m: usize) -> registry::Specialization {
    let mut s = specialization(l);
    s.0.push(("PQ_M", m as u32));
    s.0.push(("PQ_TOKENS_PER_WG", prod_tokens_per_workgroup(l) as u32));
    s
}

/// The uniform of a quantize dispatch (`turboquant_quant`, `turboquant_prod_quant`): `tokens`
/// tokens from `src` into a segment from token `seg_token`, `items` work items.
fn quant_params(
    l: &Layout,
    tokens: usize,
    src: QuantSource,
    seg_token: usize,
    items: u32,
) -> TqParams {
    TqParams {
        count: tokens as u32,
        src_start: src.start as u32,
        t_old: src.t_old as u32,
        inc_start: src.inc_start as u32,
        ring_tokens: src.ring_tokens.max(1) as u32,
        seg_token: seg_token as u32,
        items,
        ..base(l)
    }
}

/// TurboQuant-Prod quantization of `tokens` tokens from `src` into a segment from token
/// `seg_token`: one workgroup per ([`prod_tokens_per_workgroup`] tokens, head pair) on every
/// path. `l` is the stage-1 layout (b − 1 bits, one stage), `m` the sketch rows. Storage
/// bindings: ring, incoming, codes, signs, norms, residual norms, tables (the stage-1 tables,
/// then Sᵀ `[P][m]`).
pub fn plan_prod_quant(
    l: &Layout,
    m: usize,
    tokens: usize,
    src: QuantSource,
    seg_token: usize,
) -> DispatchPlan {
    let items = (tokens.div_ceil(prod_tokens_per_workgroup(l)) * l.norm_words()) as u32;
    let p = quant_params(l, tokens, src, seg_token, items);
    DispatchPlan {
        kernel: &kernels::TURBOQUANT_PROD_QUANT,
        spec: prod_specialization(l, m),
        uniform: bytemuck::bytes_of(&p).to_vec(),
        workgroups: u64::from(items),
    }
}

/// Workgroup memory (bytes) `turboquant_prod_quant` takes (both WGSL variants and MSL): the
/// codebook, the vector, u and the codes (P each), the norm, then per vector of the workgroup
/// (2·PQ_TT) its residual (P) and sign row (m/32).
pub fn prod_quant_workgroup_bytes(l: &Layout, m: usize) -> usize {
    let vectors = 2 * prod_tokens_per_workgroup(l);
    2 * l.levels() * 4 + 3 * l.padded * 4 + 4 + vectors * (l.padded + m / 32) * 4
}
