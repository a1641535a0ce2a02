//! KIVI's kernels (one quantize kernel per side, two value variants, two reconstructions) and
//! its attention hooks, declared by the naming rule: `wgsl/kivi/<name>.wgsl`,
//! `msl/kivi/<name>.metal`, `src/cpu/kivi/<name>.rs`.

use crate::attention::kernel::AttendHooks;
use crate::gpu::registry::{BITS, Binding, DISPATCH, KernelDef, MSL_BITS};

pub(crate) const KIVI: &str = include_str!("../../../wgsl/kivi/kivi_common.wgsl");
const KIVI_QUANT_IO: &str = include_str!("../../../wgsl/kivi/kivi_quant_io.wgsl");
const KIVI_DEQUANT_IO: &str = include_str!("../../../wgsl/kivi/kivi_dequant_io.wgsl");
pub(crate) const MSL_KIVI: &str = include_str!("../../../msl/kivi/kivi_common.metal");

/// KIVI per-channel key quantization (specialized on `PARAMS_F16`).
pub static KIVI_QUANT_KEYS: KernelDef = KernelDef {
    name: "kivi_quant_keys",
    folder: "kivi",
    wgsl_common: &[DISPATCH, KIVI, KIVI_QUANT_IO],
    wgsl_subgroup: None,
    wgsl: include_str!("../../../wgsl/kivi/kivi_quant_keys.wgsl"),
    msl_common: &[MSL_BITS, MSL_KIVI],
    msl: Some(include_str!("../../../msl/kivi/kivi_quant_keys.metal")),
    bindings: KIVI_QUANT_BINDINGS,
    workgroup_size: 64,
};

/// KIVI per-token value quantization for value groups of 65..=256 channels: one invocation
/// per 32-channel part of a group, 4 or 8 per group (specialized on `PARAMS_F16`,
/// `VALUE_GROUP`, `VALUE_BITS`).
pub static KIVI_QUANT_VALUES: KernelDef = KernelDef {
    name: "kivi_quant_values",
    folder: "kivi",
    wgsl_common: &[DISPATCH, KIVI, KIVI_QUANT_IO],
    wgsl_subgroup: None,
    wgsl: include_str!("../../../wgsl/kivi/kivi_quant_values.wgsl"),
    msl_common: &[MSL_BITS, MSL_KIVI],
    msl: Some(include_str!("../../../msl/kivi/kivi_quant_values.metal")),
    bindings: KIVI_QUANT_BINDINGS,
    workgroup_size: 128,
};

/// KIVI per-token value quantization for value groups of at most 64 channels: one
/// invocation per group (specialized on `PARAMS_F16`, `VALUE_GROUP`, `VALUE_BITS`).
pub static KIVI_QUANT_VALUES_THREAD: KernelDef = KernelDef {
    name: "kivi_quant_values_thread",
    folder: "kivi",
    wgsl_common: &[DISPATCH, KIVI, KIVI_QUANT_IO],
    wgsl_subgroup: None,
    wgsl: include_str!("../../../wgsl/kivi/kivi_quant_values_thread.wgsl"),
    msl_common: &[MSL_BITS, MSL_KIVI],
    msl: Some(include_str!(
        "../../../msl/kivi/kivi_quant_values_thread.metal"
    )),
    bindings: KIVI_QUANT_BINDINGS,
    workgroup_size: 64,
};

/// KIVI key reconstruction (tests and tools).
pub static KIVI_DEQUANT_KEYS: KernelDef = KernelDef {
    name: "kivi_dequant_keys",
    folder: "kivi",
    wgsl_common: &[DISPATCH, BITS, KIVI, KIVI_DEQUANT_IO],
    wgsl_subgroup: None,
    wgsl: include_str!("../../../wgsl/kivi/kivi_dequant_keys.wgsl"),
    msl_common: &[MSL_BITS, MSL_KIVI],
    msl: Some(include_str!("../../../msl/kivi/kivi_dequant_keys.metal")),
    bindings: KIVI_DEQUANT_BINDINGS,
    workgroup_size: 64,
};

/// KIVI value reconstruction (tests and tools).
pub static KIVI_DEQUANT_VALUES: KernelDef = KernelDef {
    name: "kivi_dequant_values",
    folder: "kivi",
    wgsl_common: &[DISPATCH, BITS, KIVI, KIVI_DEQUANT_IO],
    wgsl_subgroup: None,
    wgsl: include_str!("../../../wgsl/kivi/kivi_dequant_values.wgsl"),
    msl_common: &[MSL_BITS, MSL_KIVI],
    msl: Some(include_str!("../../../msl/kivi/kivi_dequant_values.metal")),
    bindings: KIVI_DEQUANT_BINDINGS,
    workgroup_size: 64,
};

const KIVI_QUANT_BINDINGS: &[Binding] = &[
    Binding::Uniform,
    Binding::StorageRead,
    Binding::StorageRead,
    Binding::StorageReadWrite,
    Binding::StorageReadWrite,
    Binding::StorageReadWrite,
];
const KIVI_DEQUANT_BINDINGS: &[Binding] = &[
    Binding::Uniform,
    Binding::StorageRead,
    Binding::StorageRead,
    Binding::StorageReadWrite,
];

/// KIVI's attention hooks (wgsl/kivi/attend_{k,v}.wgsl, msl/kivi/attend_{k,v}.metal).
pub static ATTEND_HOOKS: AttendHooks = AttendHooks {
    name: "kivi",
    wgsl_common: &[BITS, KIVI],
    wgsl_k: include_str!("../../../wgsl/kivi/attend_k.wgsl"),
    wgsl_v: include_str!("../../../wgsl/kivi/attend_v.wgsl"),
    msl_common: &[MSL_BITS, MSL_KIVI],
    msl_k: Some(include_str!("../../../msl/kivi/attend_k.metal")),
    msl_v: Some(include_str!("../../../msl/kivi/attend_v.metal")),
    k_prep: false,
    keys_only: false,
    wgsl_kt: Some(include_str!("../../../wgsl/kivi/attend_kt.wgsl")),
    wgsl_vt: Some(include_str!("../../../wgsl/kivi/attend_vt.wgsl")),
    tile_rows: false,
};
