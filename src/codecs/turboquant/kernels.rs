//! TurboQuant's kernels (the fused quantization, two WGSL variants; the reconstruction) and
//! its attention hooks, declared by the naming rule: `wgsl/turboquant/<name>.wgsl`,
//! `msl/turboquant/<name>.metal`, `src/cpu/turboquant/<name>.rs`.

use crate::attention::kernel::AttendHooks;
use crate::gpu::registry::{BITS, Binding, DISPATCH, KernelDef, MSL_BITS, SIGN_WORDS};

const COMMON: &str = include_str!("../../../wgsl/turboquant/turboquant_common.wgsl");
const QUANT_BINDINGS: &str =
    include_str!("../../../wgsl/turboquant/turboquant_quant_bindings.wgsl");
const QUANT_IO: &str = include_str!("../../../wgsl/turboquant/turboquant_quant_io.wgsl");
const SHARED_VECTOR: &str = include_str!("../../../wgsl/turboquant/tq_shared_vector.wgsl");
const PROD_BINDINGS: &str = include_str!("../../../wgsl/turboquant/turboquant_prod_bindings.wgsl");
const PROD_COMMON: &str = include_str!("../../../wgsl/turboquant/turboquant_prod_common.wgsl");
const MSL_COMMON: &str = include_str!("../../../msl/turboquant/turboquant_common.metal");
const ATTEND_COMMON: &str = include_str!("../../../wgsl/turboquant/tq_attend_common.wgsl");
const MSL_ATTEND_COMMON: &str = include_str!("../../../msl/turboquant/tq_attend_common.metal");

/// TurboQuant-MSE / -RVQ quantization, fused: norm, signs, log2(P) butterfly passes, scale,
/// boundary search (both stages), packed codes and the f16 norm written directly.
/// Specialized on `TQ_P`, `TQ_LOG2P`, `TQ_BITS`, `TQ_STAGES`.
pub static TURBOQUANT_QUANT: KernelDef = KernelDef {
    name: "turboquant_quant",
    folder: "turboquant",
    wgsl_common: &[DISPATCH, COMMON, QUANT_BINDINGS, QUANT_IO],
    wgsl_subgroup: Some(include_str!(
        "../../../wgsl/turboquant/turboquant_quant_subgroup.wgsl"
    )),
    // The vector's steps in workgroup memory, shared with turboquant_prod_quant.
    wgsl: concat!(
        include_str!("../../../wgsl/turboquant/tq_shared_vector.wgsl"),
        include_str!("../../../wgsl/turboquant/turboquant_quant.wgsl")
    ),
    msl_common: &[MSL_COMMON],
    msl: Some(concat!(
        include_str!("../../../msl/turboquant/tq_shared_vector.metal"),
        include_str!("../../../msl/turboquant/turboquant_quant.metal")
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

/// TurboQuant-Prod quantization of keys, fused (docs/contracts/turboquant.md
/// "TurboQuant-Prod"): the MSE stage at b − 1 bits (TurboQuant-MSE's steps, shared), the
/// residual r = u − inverse-rotate(ŷ₁), its f16 norm ρ and the m sign bits of S·r, packed by
/// `subgroupBallot` (subgroup variant), atomicOr (workgroup variant) or `simd_ballot` (MSL).
/// Specialized on `TQ_P`, `TQ_LOG2P`, `TQ_BITS` (b − 1), `TQ_STAGES` (1), `PQ_M`.
pub static TURBOQUANT_PROD_QUANT: KernelDef = KernelDef {
    name: "turboquant_prod_quant",
    folder: "turboquant",
    wgsl_common: &[
        DISPATCH,
        COMMON,
        PROD_BINDINGS,
        QUANT_IO,
        SHARED_VECTOR,
        SIGN_WORDS,
        PROD_COMMON,
    ],
    wgsl_subgroup: Some(concat!(
        include_str!("../../../wgsl/common/sign_ballot.wgsl"),
        include_str!("../../../wgsl/turboquant/turboquant_prod_quant_subgroup.wgsl")
    )),
    wgsl: include_str!("../../../wgsl/turboquant/turboquant_prod_quant.wgsl"),
    msl_common: &[MSL_COMMON],
    msl: Some(concat!(
        include_str!("../../../msl/turboquant/tq_shared_vector.metal"),
        include_str!("../../../msl/turboquant/turboquant_prod_quant.metal")
    )),
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageRead,
        Binding::StorageReadWrite,
        Binding::StorageReadWrite,
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
    wgsl_k: concat!(
        include_str!("../../../wgsl/turboquant/tq_attend_k_common.wgsl"),
        include_str!("../../../wgsl/turboquant/attend_k.wgsl")
    ),
    wgsl_v: include_str!("../../../wgsl/turboquant/attend_v.wgsl"),
    msl_common: &[MSL_BITS, MSL_ATTEND_COMMON],
    msl_k: Some(concat!(
        include_str!("../../../msl/turboquant/tq_attend_k_common.metal"),
        include_str!("../../../msl/turboquant/attend_k.metal")
    )),
    msl_v: Some(include_str!("../../../msl/turboquant/attend_v.metal")),
    k_prep: true,
    keys_only: false,
    wgsl_kt: None,
    wgsl_vt: None,
    tile_rows: false,
};

/// TurboQuant-Prod's attention hooks, keys only (wgsl/turboquant_prod/attend_k.wgsl): TurboQuant's
/// rotated query and QJL's `S q` once per query row (their shared key-side pieces), the score
/// `n·⟨q′, ŷ₁⟩ + n·ρ·√(π/2)/m·⟨S q, 2σ − 1⟩`.
pub static PROD_ATTEND_HOOKS: AttendHooks = AttendHooks {
    name: "turboquant_prod",
    wgsl_common: &[BITS, ATTEND_COMMON],
    wgsl_k: concat!(
        include_str!("../../../wgsl/turboquant/tq_attend_k_common.wgsl"),
        include_str!("../../../wgsl/qjl/qjl_attend_k_common.wgsl"),
        include_str!("../../../wgsl/turboquant_prod/attend_k.wgsl")
    ),
    wgsl_v: "",
    msl_common: &[MSL_BITS, MSL_ATTEND_COMMON],
    msl_k: Some(concat!(
        include_str!("../../../msl/turboquant/tq_attend_k_common.metal"),
        include_str!("../../../msl/qjl/qjl_attend_k_common.metal"),
        include_str!("../../../msl/turboquant_prod/attend_k.metal")
    )),
    msl_v: None,
    k_prep: true,
    keys_only: true,
    wgsl_kt: None,
    wgsl_vt: None,
    tile_rows: false,
};
