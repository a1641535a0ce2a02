//! The f16 codec's attention hooks (it has no kernel of its own: rows are stored by copies),
//! by the naming rule: `wgsl/f16/attend_{k,v}.wgsl`, `msl/f16/attend_{k,v}.metal`,
//! `src/cpu/f16/attend_{k,v}.rs`.

use crate::attention::kernel::AttendHooks;

/// The f16 codec's attention hooks.
pub static ATTEND_HOOKS: AttendHooks = AttendHooks {
    name: "f16",
    wgsl_common: &[],
    wgsl_k: include_str!("../../../wgsl/f16/attend_k.wgsl"),
    wgsl_v: include_str!("../../../wgsl/f16/attend_v.wgsl"),
    msl_common: &[],
    msl_k: Some(include_str!("../../../msl/f16/attend_k.metal")),
    msl_v: Some(include_str!("../../../msl/f16/attend_v.metal")),
    k_prep: false,
    keys_only: false,
    wgsl_kt: Some(include_str!("../../../wgsl/f16/attend_kt.wgsl")),
    wgsl_vt: Some(include_str!("../../../wgsl/f16/attend_vt.wgsl")),
    tile_rows: true,
};
