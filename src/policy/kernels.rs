//! The eviction policies' GPU kernels (../shared/spec/qfilters.md, "Scoring and eviction"):
//! `evict_score`, the score of every appended (token, KV head) computed once at append on the
//! key as appended (wgsl/policy/evict_score_io.wgsl with its subgroup and workgroup-memory
//! variants, msl/policy/evict_score.metal; CPU twin `crate::cpu::policy::evict_score`);
//! `evict_select`, the units each head keeps after an eviction (wgsl/policy/evict_select_io.wgsl
//! with its subgroup and workgroup-memory variants, msl/policy/evict_select.metal; CPU reference
//! [`super::select::keep_lists`]); `evict_compact`, the kept units' words moved down.

use crate::error::{Error, Result};
use crate::gpu::DispatchPlan;
use crate::gpu::registry::{self, Binding, DISPATCH, KernelDef};

/// Invocations per workgroup of `evict_score` (one MSL SIMD group).
pub const SCORE_WORKGROUP: u32 = 32;

/// `evict_score`: bindings 0 the uniform ([`ScoreParams`]), 1 the f16 rows
/// `[row0 + n][row_words]` u32, 2 the filters `[H][D]` f32 (key norm: any one word), 3 the
/// scores `[n][H]` f32 (written). Specialization: `SCORE_NORM` (1: −‖k‖, 0: ⟨k, u⟩).
pub static EVICT_SCORE: KernelDef = KernelDef {
    name: "evict_score",
    folder: "policy",
    wgsl_common: &[
        DISPATCH,
        include_str!("../../wgsl/policy/evict_score_io.wgsl"),
    ],
    wgsl_subgroup: Some(include_str!("../../wgsl/policy/evict_score_subgroup.wgsl")),
    wgsl: include_str!("../../wgsl/policy/evict_score.wgsl"),
    msl_common: &[],
    msl: Some(include_str!("../../msl/policy/evict_score.metal")),
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageRead,
        Binding::StorageReadWrite,
    ],
    workgroup_size: SCORE_WORKGROUP,
};

/// Invocations per workgroup of `evict_compact`.
pub const COMPACT_WORKGROUP: u32 = 256;

/// `evict_compact`: bindings 0 the uniform ([`CompactParams`]), 1 the stream's words (from
/// word `src0` of the buffer bound), 2 the keep lists `[H][kept]` u32, 3 the compacted words
/// (written; the host copies them back over the stream: a scratch buffer, since heads move
/// their bits from different units into one word).
pub static EVICT_COMPACT: KernelDef = KernelDef {
    name: "evict_compact",
    folder: "policy",
    wgsl_common: &[DISPATCH],
    wgsl_subgroup: None,
    wgsl: include_str!("../../wgsl/policy/evict_compact.wgsl"),
    msl_common: &[],
    msl: Some(include_str!("../../msl/policy/evict_compact.metal")),
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageRead,
        Binding::StorageReadWrite,
    ],
    workgroup_size: COMPACT_WORKGROUP,
};

/// Uniform block of `evict_compact` (the fields of
/// [`crate::cpu::policy::evict_compact::CompactShape`], and where the stream starts).
/// Keep in sync with `CompactParams` in wgsl/policy/evict_compact.wgsl and
/// msl/policy/evict_compact.metal.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[allow(missing_docs)]
pub struct CompactParams {
    pub src0: u32,
    pub row_words: u32,
    pub unit_rows: u32,
    pub head_bits: u32,
    pub heads: u32,
    pub kept: u32,
    pub keep_of: u32,
    pub words: u32,
}

/// The dispatch of `evict_compact` for one stream of layout `s` starting at word `src0` of
/// its buffer: one invocation per destination word. [`Error::Config`] for a shape no stream
/// has (keeping more than it chooses from, a head past its row), [`Error::Limit`] past u32
/// indices.
pub fn plan_compact(
    s: &crate::cpu::policy::evict_compact::CompactShape,
    src0: usize,
) -> Result<DispatchPlan> {
    if s.kept > s.keep_of
        || s.keep_of * s.unit_rows * s.row_words > s.words
        || s.head_bits == 0
        || s.heads * s.head_bits > s.row_words * 32
        || s.unit_rows == 0
    {
        return Err(Error::Config(format!(
            "evict_compact: an impossible shape {s:?}"
        )));
    }
    let words = (src0 + s.words) as u64;
    if words > u64::from(u32::MAX) {
        return Err(Error::Limit {
            what: "eviction compaction: words of a stream",
            needed: words,
            limit: u64::from(u32::MAX),
        });
    }
    let n_dst = s.words - (s.keep_of - s.kept) * s.unit_rows * s.row_words;
    let params = CompactParams {
        src0: src0 as u32,
        row_words: s.row_words as u32,
        unit_rows: s.unit_rows as u32,
        head_bits: s.head_bits as u32,
        heads: s.heads as u32,
        kept: s.kept as u32,
        keep_of: s.keep_of as u32,
        words: s.words as u32,
    };
    Ok(DispatchPlan {
        kernel: &EVICT_COMPACT,
        spec: registry::Specialization::default(),
        uniform: bytemuck::bytes_of(&params).to_vec(),
        workgroups: (n_dst as u64).div_ceil(u64::from(COMPACT_WORKGROUP)),
    })
}

/// Uniform block of `evict_score`.
/// Keep in sync with `ScoreParams` in wgsl/policy/evict_score_io.wgsl and
/// msl/policy/evict_score.metal.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ScoreParams {
    /// Tokens.
    pub n: u32,
    /// KV heads.
    pub heads: u32,
    /// Head width.
    pub dim: u32,
    /// u32 words of one f16 row (⌈H·D / 2⌉).
    pub row_words: u32,
    /// The row of token 0 in the rows buffer.
    pub row0: u32,
    /// Padding to 32 bytes.
    pub pad: [u32; 3],
}

/// The dispatch of `evict_score` for `n` tokens of `heads` × `dim` whose f16 rows start at row
/// `row0` of the rows buffer: one workgroup per (token, head); `norm`: key norm (−‖k‖), else
/// Q-Filters (⟨k, u_h⟩). [`Error::Limit`] past u32 indices.
pub fn plan_score(
    n: usize,
    heads: usize,
    dim: usize,
    row0: usize,
    norm: bool,
) -> Result<DispatchPlan> {
    let row_words = (heads * dim).div_ceil(2);
    let last = (row0 + n) as u64 * row_words as u64;
    if last > u64::from(u32::MAX) || (n * heads) as u64 > u64::from(u32::MAX) {
        return Err(Error::Limit {
            what: "eviction scoring: words of the rows",
            needed: last,
            limit: u64::from(u32::MAX),
        });
    }
    let params = ScoreParams {
        n: n as u32,
        heads: heads as u32,
        dim: dim as u32,
        row_words: row_words as u32,
        row0: row0 as u32,
        pad: [0; 3],
    };
    Ok(DispatchPlan {
        kernel: &EVICT_SCORE,
        spec: registry::Specialization(vec![("SCORE_NORM", u32::from(norm))]),
        uniform: bytemuck::bytes_of(&params).to_vec(),
        workgroups: (n * heads) as u64,
    })
}

/// Invocations per workgroup of `evict_select`.
pub const SELECT_WORKGROUP: u32 = 256;

/// `evict_select`: bindings 0 the uniform ([`SelectParams`]), 1 the scores `[held][H]` f32,
/// 2 a scratch of `[H][end − first]` u32 (the candidates' keys), 3 the keep lists
/// `[H][end − n]` u32 (written; what `evict_compact` reads). Specialization: `OLDEST`
/// (1: StreamingLLM's oldest-first, the scores unread).
pub static EVICT_SELECT: KernelDef = KernelDef {
    name: "evict_select",
    folder: "policy",
    wgsl_common: &[
        DISPATCH,
        include_str!("../../wgsl/policy/evict_select_io.wgsl"),
    ],
    wgsl_subgroup: Some(include_str!("../../wgsl/policy/evict_select_subgroup.wgsl")),
    wgsl: include_str!("../../wgsl/policy/evict_select.wgsl"),
    msl_common: &[],
    msl: Some(include_str!("../../msl/policy/evict_select.metal")),
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageReadWrite,
        Binding::StorageReadWrite,
    ],
    workgroup_size: SELECT_WORKGROUP,
};

/// Uniform block of `evict_select`.
/// Keep in sync with `SelectParams` in wgsl/policy/evict_select_io.wgsl and
/// msl/policy/evict_select.metal.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SelectParams {
    /// KV heads.
    pub heads: u32,
    /// Tokens per unit.
    pub unit: u32,
    /// First candidate unit.
    pub first: u32,
    /// One past the last candidate unit.
    pub end: u32,
    /// Units each head evicts.
    pub n: u32,
    /// Units each head keeps of `[0, end)` (`end − n`).
    pub kept: u32,
    /// Padding to 32 bytes.
    pub pad: [u32; 2],
}

/// The dispatch of `evict_select` over `heads` heads' `[held][H]` scores (`held ≥ end·unit`):
/// each head evicts `n` of the candidate units `[first, end)` of `unit` tokens, `order` as
/// [`super::select::keep_lists`] takes it; one workgroup per head. Its scratch binding needs
/// `max(1, heads·(end − first))` u32 and its output `heads·(end − n)`. [`Error::Config`] for
/// an impossible selection (`first > end`, `n > end − first`, `unit = 0`), [`Error::Limit`]
/// past u32 indices.
pub fn plan_select(
    heads: usize,
    unit: usize,
    first: usize,
    end: usize,
    n: usize,
    order: super::select::Order,
) -> Result<DispatchPlan> {
    if first > end || n > end - first || unit == 0 || heads == 0 {
        return Err(Error::Config(format!(
            "evict_select: an impossible selection ({n} of units [{first}, {end}) of {unit} \
             token(s), {heads} heads)"
        )));
    }
    let needed = (end * unit * heads) as u64;
    if needed > u64::from(u32::MAX) {
        return Err(Error::Limit {
            what: "eviction selection: score entries",
            needed,
            limit: u64::from(u32::MAX),
        });
    }
    let params = SelectParams {
        heads: heads as u32,
        unit: unit as u32,
        first: first as u32,
        end: end as u32,
        n: n as u32,
        kept: (end - n) as u32,
        pad: [0; 2],
    };
    let oldest = matches!(order, super::select::Order::Oldest);
    Ok(DispatchPlan {
        kernel: &EVICT_SELECT,
        spec: registry::Specialization(vec![("OLDEST", u32::from(oldest))]),
        uniform: bytemuck::bytes_of(&params).to_vec(),
        workgroups: heads as u64,
    })
}
