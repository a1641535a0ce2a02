//! TurboQuant's kernels (the fused quantization, two WGSL variants; the reconstruction) and
//! its attention hooks, declared by the naming rule: `wgsl/turboquant/<name>.wgsl`,
//! `msl/turboquant/<name>.metal`, `src/cpu/turboquant/<name>.rs`.

use crate::attention::kernel::AttendHooks;
use crate::gpu::registry::{BITS, Binding, DISPATCH, KernelDef, MSL_BITS};

const COMMON: &str = include_str!("../../../wgsl/turboquant/turboquant_common.wgsl");
const QUANT_IO: &str = include_str!("../../../wgsl/turboquant/turboquant_quant_io.wgsl");
const MSL_COMMON: &str = include_str!("../../../msl/turboquant/turboquant_common.metal");
const ATTEND_COMMON: &str = include_str!("../../../wgsl/turboquant/tq_attend_common.wgsl");
const MSL_ATTEND_COMMON: &str = include_str!("../../../msl/turboquant/tq_attend_common.metal");

/// TurboQuant-MSE / -RVQ quantization, fused: norm, signs, log2(P) butterfly passes, scale,
/// boundary search (both stages), packed codes and the f16 norm written directly.
/// Specialized on `TQ_P`, `TQ_LOG2P`, `TQ_BITS`, `TQ_STAGES`.
pub static TURBOQUANT_QUANT: KernelDef = KernelDef {
    name: "turboquant_quant",
    folder: "turboquant",
    wgsl_common: &[DISPATCH, COMMON, QUANT_IO],
    wgsl_subgroup: Some(include_str!(
        "../../../wgsl/turboquant/turboquant_quant_subgroup.wgsl"
    )),
    wgsl: include_str!("../../../wgsl/turboquant/turboquant_quant.wgsl"),
    msl_common: &[MSL_COMMON],
    msl: Some(include_str!(
        "../../../msl/turboquant/turboquant_quant.metal"
    )),
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageRead,
        Binding::StorageReadWrite,
        Binding::StorageReadWrite,
        Binding::StorageRead,
    ],
    workgroup_size: 64,
};

/// TurboQuant reconstruction `x̂ = n·inverse-rotate(ŷ)` (tools and tests).
pub static TURBOQUANT_DEQUANT: KernelDef = KernelDef {
    name: "turboquant_dequant",
    folder: "turboquant",
    wgsl_common: &[DISPATCH, BITS, COMMON],
    wgsl_subgroup: None,
    wgsl: include_str!("../../../wgsl/turboquant/turboquant_dequant.wgsl"),
    msl_common: &[MSL_BITS, MSL_COMMON],
    msl: Some(include_str!(
        "../../../msl/turboquant/turboquant_dequant.metal"
    )),
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageRead,
        Binding::StorageRead,
        Binding::StorageReadWrite,
    ],
    workgroup_size: 64,
};

/// TurboQuant's attention hooks (wgsl/turboquant/attend_{k,v}.wgsl, msl/turboquant/...):
/// the query rotated once per row, scores and values on the codes in the rotated space, the
/// output inverse-rotated once.
pub static ATTEND_HOOKS: AttendHooks = AttendHooks {
    name: "turboquant",
    wgsl_common: &[BITS, ATTEND_COMMON],
    wgsl_k: include_str!("../../../wgsl/turboquant/attend_k.wgsl"),
    wgsl_v: include_str!("../../../wgsl/turboquant/attend_v.wgsl"),
    msl_common: &[MSL_BITS, MSL_ATTEND_COMMON],
    msl_k: Some(include_str!("../../../msl/turboquant/attend_k.metal")),
    msl_v: Some(include_str!("../../../msl/turboquant/attend_v.metal")),
    k_prep: true,
    keys_only: false,
};
