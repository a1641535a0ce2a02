//! VecInfer's kernels (`vecinfer_quant`: two WGSL variants and MSL), declared by the naming
//! rule: `wgsl/vecinfer/<name>.wgsl`, `msl/vecinfer/<name>.metal`, `src/cpu/vecinfer/<name>.rs`.

use crate::gpu::registry::{Binding, DISPATCH, KernelDef};

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
