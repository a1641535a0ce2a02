//! Dispatch plans of the KIVI kernels: the uniform block, specializations and workgroup
//! counts, shared by the GPU store, the tests' MSL emulator runs and the benches.

use half::f16;

use super::kernels;
use super::layout::{Layout, ParamStorage};
use crate::cpu::kivi::kivi_group::inv_levels;
use crate::gpu::{DispatchPlan, registry};

/// Uniform block of every KIVI kernel.
/// Keep in sync with `KiviParams` in wgsl/kivi/kivi_common.wgsl and msl/kivi/kivi_common.metal.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct KiviParams {
    pub heads: u32,
    pub dim: u32,
    pub bits: u32,
    pub group: u32,
    pub count: u32,
    pub src_start: u32,
    pub t_old: u32,
    pub ring_tokens: u32,
    pub dst_offset: u32,
    pub inv_levels: f32,
    pub group_words: u32,
    pub row_words: u32,
    pub n_groups: u32,
    pub resid_row_words: u32,
    pub inc_start: u32,
    pub pad1: u32,
}

/// The specialization of every KIVI kernel: parameter storage (and, for the key kernel, the
/// key group and bits), all fixed for a cache's life.
pub fn specialization(l: &Layout) -> registry::Specialization {
    registry::Specialization(vec![(
        "PARAMS_F16",
        u32::from(l.params == ParamStorage::F16),
    )])
}

fn key_specialization(l: &Layout) -> registry::Specialization {
    let mut s = specialization(l);
    s.0.push(("KEY_GROUP", l.key_group as u32));
    // Bits fixed for the cache's life: the key kernel's code placement folds to constants.
    s.0.push(("KEY_BITS", l.key_bits));
    s
}

fn base_params(l: &Layout) -> KiviParams {
    KiviParams {
        heads: l.heads as u32,
        dim: l.dim as u32,
        ring_tokens: l.ring_tokens() as u32,
        resid_row_words: l.residual_row_words() as u32,
        ..Default::default()
    }
}

/// Where a quantize dispatch reads its tokens (the one type every codec's plans take).
pub use crate::codec::SourceRows as QuantSource;

/// Key quantization of `blocks` blocks whose first token is `src_start`, into a segment at
/// block `dst_block`, with the incoming rows starting at token `t_old`.
/// Storage bindings: ring_k, incoming_k, codes, params, status.
pub fn plan_quant_keys(
    l: &Layout,
    blocks: usize,
    src_start: usize,
    t_old: usize,
    dst_block: usize,
) -> DispatchPlan {
    plan_quant_keys_from(
        l,
        blocks,
        QuantSource {
            start: src_start,
            t_old,
            inc_start: t_old,
            ring_tokens: l.ring_tokens(),
        },
        dst_block,
    )
}

/// Value quantization of `tokens` tokens from `src_start` into a segment at token
/// `dst_token`, with the incoming rows starting at token `t_old`.
/// Storage bindings: ring_v, incoming_v, codes, params, status.
pub fn plan_quant_values(
    l: &Layout,
    tokens: usize,
    src_start: usize,
    t_old: usize,
    dst_token: usize,
) -> DispatchPlan {
    plan_quant_values_from(
        l,
        tokens,
        QuantSource {
            start: src_start,
            t_old,
            inc_start: t_old,
            ring_tokens: l.ring_tokens(),
        },
        dst_token,
    )
}

/// [`plan_quant_keys`] with an explicit [`QuantSource`].
pub fn plan_quant_keys_from(
    l: &Layout,
    blocks: usize,
    src: QuantSource,
    dst_block: usize,
) -> DispatchPlan {
    let def = &kernels::KIVI_QUANT_KEYS;
    let p = KiviParams {
        bits: l.key_bits,
        group: l.key_group as u32,
        count: blocks as u32,
        src_start: src.start as u32,
        t_old: src.t_old as u32,
        inc_start: src.inc_start as u32,
        ring_tokens: src.ring_tokens as u32,
        dst_offset: dst_block as u32,
        inv_levels: inv_levels(l.key_bits),
        group_words: l.key_group_words() as u32,
        ..base_params(l)
    };
    // One invocation per (block, channel pair).
    let items = (blocks * l.token_elems().div_ceil(2)) as u64;
    DispatchPlan {
        kernel: def,
        spec: key_specialization(l),
        uniform: bytemuck::bytes_of(&p).to_vec(),
        workgroups: items.div_ceil(u64::from(def.workgroup_size)),
    }
}

/// [`plan_quant_values`] with an explicit [`QuantSource`].
pub fn plan_quant_values_from(
    l: &Layout,
    tokens: usize,
    src: QuantSource,
    dst_token: usize,
) -> DispatchPlan {
    let p = KiviParams {
        bits: l.value_bits,
        group: l.value_group as u32,
        count: tokens as u32,
        src_start: src.start as u32,
        t_old: src.t_old as u32,
        inc_start: src.inc_start as u32,
        ring_tokens: src.ring_tokens as u32,
        dst_offset: dst_token as u32,
        inv_levels: inv_levels(l.value_bits),
        group_words: l.value_group_words() as u32,
        row_words: l.value_row_words() as u32,
        n_groups: l.value_groups() as u32,
        ..base_params(l)
    };
    let def = values_kernel(l);
    let groups = (tokens * l.heads * l.value_groups()) as u64;
    let mut spec = specialization(l);
    spec.0.push(("VALUE_GROUP", l.value_group as u32));
    spec.0.push(("VALUE_BITS", l.value_bits));
    let per_workgroup = if std::ptr::eq(def, &kernels::KIVI_QUANT_VALUES_THREAD) {
        def.workgroup_size // one group per invocation
    } else {
        def.workgroup_size / value_parts(l.value_group) // one group per 4 or 8 invocations
    };
    DispatchPlan {
        kernel: def,
        spec,
        uniform: bytemuck::bytes_of(&p).to_vec(),
        workgroups: groups.div_ceil(u64::from(per_workgroup)),
    }
}

/// The value quantization kernel for a layout: one invocation per group for groups of at
/// most [`THREAD_VALUE_GROUP_MAX`] channels, one per 32-channel part of a group above
/// ([`value_parts`] per group).
pub fn values_kernel(l: &Layout) -> &'static registry::KernelDef {
    if l.value_group <= THREAD_VALUE_GROUP_MAX {
        &kernels::KIVI_QUANT_VALUES_THREAD
    } else {
        &kernels::KIVI_QUANT_VALUES
    }
}

/// Largest value group quantized by one invocation (registers hold the group).
pub const THREAD_VALUE_GROUP_MAX: usize = 64;

/// Invocations of `kivi_quant_values` per value group of `group` channels (65..=256): its
/// 32-channel parts, rounded up to a power of two so that a workgroup holds whole groups
/// (the WGSL and MSL kernels' `LANES`).
pub fn value_parts(group: usize) -> u32 {
    if group <= 128 { 4 } else { 8 }
}

/// Key reconstruction of `tokens` tokens (whole blocks) of a segment from block `dst_block`.
/// Storage bindings: codes, params, out.
pub fn plan_dequant_keys(l: &Layout, tokens: usize, dst_block: usize) -> DispatchPlan {
    let def = &kernels::KIVI_DEQUANT_KEYS;
    let p = KiviParams {
        bits: l.key_bits,
        group: l.key_group as u32,
        count: tokens as u32,
        dst_offset: dst_block as u32,
        group_words: l.key_group_words() as u32,
        ..base_params(l)
    };
    DispatchPlan {
        kernel: def,
        spec: specialization(l),
        uniform: bytemuck::bytes_of(&p).to_vec(),
        workgroups: ((tokens * l.token_elems()) as u64).div_ceil(u64::from(def.workgroup_size)),
    }
}

/// Value reconstruction of `tokens` tokens of a segment from token `dst_token`.
/// Storage bindings: codes, params, out.
pub fn plan_dequant_values(l: &Layout, tokens: usize, dst_token: usize) -> DispatchPlan {
    let def = &kernels::KIVI_DEQUANT_VALUES;
    let p = KiviParams {
        bits: l.value_bits,
        group: l.value_group as u32,
        count: tokens as u32,
        dst_offset: dst_token as u32,
        group_words: l.value_group_words() as u32,
        row_words: l.value_row_words() as u32,
        n_groups: l.value_groups() as u32,
        ..base_params(l)
    };
    DispatchPlan {
        kernel: def,
        spec: specialization(l),
        uniform: bytemuck::bytes_of(&p).to_vec(),
        workgroups: ((tokens * l.token_elems()) as u64).div_ceil(u64::from(def.workgroup_size)),
    }
}

/// f16 rows `[n][H·D]` as u32 words `[n][residual_row_words]` (odd H·D rows padded).
pub fn rows_to_words(l: &Layout, x: &[f16]) -> Vec<u32> {
    crate::store::input::f16_rows_to_words(l.token_elems(), x)
}
