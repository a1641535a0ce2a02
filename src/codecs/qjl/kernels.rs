//! QJL's kernels (`qjl_encode`: two WGSL variants and MSL) and its key-side attention hooks,
//! declared by the naming rule: `wgsl/qjl/<name>.wgsl`, `msl/qjl/<name>.metal`,
//! `src/cpu/qjl/<name>.rs`.

use crate::attention::kernel::AttendHooks;
use crate::gpu::registry::{Binding, DISPATCH, KernelDef};

const IO: &str = include_str!("../../../wgsl/qjl/qjl_encode_io.wgsl");

/// QJL encode: per (token, head) the f16 norm and the m sign bits of `S k`, packed into whole
/// words by `subgroupBallot` (subgroup variant), workgroup atomics (workgroup variant) or
/// `simd_ballot` (MSL); tiled as the product S·X of 32-token tiles. Specialized on `QJL_DIM`,
/// `QJL_M`.
pub static QJL_ENCODE: KernelDef = KernelDef {
    name: "qjl_encode",
    folder: "qjl",
    wgsl_common: &[DISPATCH, IO],
    wgsl_subgroup: Some(include_str!("../../../wgsl/qjl/qjl_encode_subgroup.wgsl")),
    wgsl: include_str!("../../../wgsl/qjl/qjl_encode.wgsl"),
    msl_common: &[],
    msl: Some(include_str!("../../../msl/qjl/qjl_encode.metal")),
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageRead,
        Binding::StorageReadWrite,
        Binding::StorageReadWrite,
        Binding::StorageRead,
    ],
    workgroup_size: 128,
};

/// QJL's attention hooks, keys only (wgsl/qjl/attend_k.wgsl, msl/qjl/attend_k.metal): `S q`
/// once per query row, scores from the sign words (a masked sum per word) and the norm.
pub static ATTEND_HOOKS: AttendHooks = AttendHooks {
    name: "qjl",
    wgsl_common: &[],
    wgsl_k: concat!(
        include_str!("../../../wgsl/qjl/qjl_attend_k_common.wgsl"),
        include_str!("../../../wgsl/qjl/attend_k.wgsl")
    ),
    wgsl_v: "",
    msl_common: &[],
    msl_k: Some(concat!(
        include_str!("../../../msl/qjl/qjl_attend_k_common.metal"),
        include_str!("../../../msl/qjl/attend_k.metal")
    )),
    msl_v: None,
    k_prep: true,
    keys_only: true,
    wgsl_kt: None,
    wgsl_vt: None,
    tile_rows: false,
};
