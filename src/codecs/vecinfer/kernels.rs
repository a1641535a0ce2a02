//! VecInfer's kernels (`vecinfer_quant`: two WGSL variants and MSL) and its attention hooks,
//! declared by the naming rule: `wgsl/vecinfer/<name>.wgsl`, `msl/vecinfer/<name>.metal`,
//! `src/cpu/vecinfer/<name>.rs`.

use crate::attention::kernel::AttendHooks;
use crate::gpu::registry::{BITS, Binding, DISPATCH, KernelDef, MSL_BITS};

const IO: &str = include_str!("../../../wgsl/vecinfer/vecinfer_quant_io.wgsl");

/// VecInfer quantize, fused: per (token, head) the transform (keys ÷ λ, Hadamard, × 1/√P),
/// the argmin of every sub-vector over the head's codebook held in workgroup memory (ties to
/// the lower index) and the packed row of indices. Reductions by `subgroupShuffleXor`
/// (subgroup variant), workgroup memory (workgroup variant) or `simd_shuffle_xor` (MSL).
/// Specialized on `VI_P`, `VI_DS`, `VI_C`, `VI_BITS`, `VI_KEYS`, `VI_TPW`.
pub static VECINFER_QUANT: KernelDef = KernelDef {
    name: "vecinfer_quant",
    folder: "vecinfer",
    wgsl_common: &[DISPATCH, IO],
    wgsl_subgroup: Some(include_str!(
        "../../../wgsl/vecinfer/vecinfer_quant_subgroup.wgsl"
    )),
    wgsl: include_str!("../../../wgsl/vecinfer/vecinfer_quant.wgsl"),
    msl_common: &[],
    msl: Some(include_str!("../../../msl/vecinfer/vecinfer_quant.metal")),
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageRead,
        Binding::StorageReadWrite,
        Binding::StorageRead,
    ],
    workgroup_size: 64,
};

/// VecInfer's attention hooks (wgsl/vecinfer/attend_{k,v}.wgsl, msl/vecinfer/...): q̃ and the
/// per-vector LUT `[n_sub][C]` built once per workgroup in workgroup memory (f32, or f16 where
/// f32 does not fit: `ATT_KVI_LUT16`), a score the sum of n_sub LUT entries, values
/// accumulated in the transformed space and transformed back once (inverse Hadamard).
pub static ATTEND_HOOKS: AttendHooks = AttendHooks {
    name: "vecinfer",
    wgsl_common: &[BITS],
    wgsl_k: include_str!("../../../wgsl/vecinfer/attend_k.wgsl"),
    wgsl_v: include_str!("../../../wgsl/vecinfer/attend_v.wgsl"),
    msl_common: &[MSL_BITS],
    msl_k: Some(include_str!("../../../msl/vecinfer/attend_k.metal")),
    msl_v: Some(include_str!("../../../msl/vecinfer/attend_v.metal")),
    k_prep: true,
    keys_only: false,
    wgsl_kt: None,
    wgsl_vt: None,
    tile_rows: false,
};
