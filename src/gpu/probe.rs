//! One-time device probes.
//!
//! `subgroups_in_order`: kvpack's subgroup variants (KIVI values, attention) reduce over
//! slices of 32 invocations and assume that subgroups tile a workgroup in invocation order.
//! Vulkan does not promise it, so the context checks it once per device (at the workgroup
//! sizes the kernels use) before it offers those variants.
//!
//! `f16_subnormals_kept`: whether widening f16 to f32 keeps f16 subnormals exact (WGSL lets an
//! implementation flush them), which the decode kernel's two-codes-per-mask reading of KIVI's
//! codes needs (wgsl/common/bits.wgsl, `bits_pair_tiny`).

use super::registry::{self, Binding, KernelDef};
use crate::context::Context;
use crate::error::Result;
use crate::path::KernelPath;

const SOURCE: &str = include_str!("../../wgsl/gpu/subgroup_probe.wgsl");

static PROBE_128: KernelDef = KernelDef {
    name: "subgroup_probe_128",
    folder: "gpu",
    wgsl_common: &[],
    wgsl_subgroup: Some(SOURCE),
    wgsl: SOURCE,
    msl_common: &[],
    msl: None,
    bindings: &[Binding::StorageReadWrite],
    workgroup_size: 128,
};

static PROBE_256: KernelDef = KernelDef {
    name: "subgroup_probe_256",
    workgroup_size: 256,
    ..PROBE_128
};

/// Runs the probe (the caller caches the answer). `Ok(false)` when any invocation of any
/// probed workgroup is out of order.
pub(crate) fn subgroups_in_order(ctx: &Context) -> Result<bool> {
    let flags = super::upload(ctx, "kvpack subgroup probe", &[0u8; 4])?;
    for def in [&PROBE_128, &PROBE_256] {
        let pipeline = super::pipeline::pipeline(
            ctx,
            def,
            KernelPath::WgslSubgroup,
            &registry::Specialization::default(),
        )?;
        super::submit_blocking(ctx, "subgroup probe", |enc| {
            super::encode_dispatch(ctx, enc, &pipeline, def.name, &[&flags], 16)
        })?;
    }
    Ok(super::readback(ctx, &flags, 4)? == [0u8; 4])
}

const F16_SOURCE: &str = include_str!("../../wgsl/gpu/f16_subnormal_probe.wgsl");

static PROBE_F16: KernelDef = KernelDef {
    name: "f16_subnormal_probe",
    folder: "gpu",
    wgsl_common: &[],
    wgsl_subgroup: None,
    wgsl: F16_SOURCE,
    msl_common: &[],
    msl: None,
    bindings: &[Binding::StorageReadWrite],
    workgroup_size: 64,
};

/// Runs the f16 subnormal probe (the caller caches the answer): `Ok(true)` when every f16
/// subnormal (and small normal) up to 767·2^-24 widened exactly.
pub(crate) fn f16_subnormals_kept(ctx: &Context) -> Result<bool> {
    let flags = super::upload(ctx, "kvpack f16 subnormal probe", &[0u8; 4])?;
    let pipeline = super::pipeline::pipeline(
        ctx,
        &PROBE_F16,
        KernelPath::WgslWorkgroup,
        &registry::Specialization::default(),
    )?;
    super::submit_blocking(ctx, "f16 subnormal probe", |enc| {
        super::encode_dispatch(ctx, enc, &pipeline, PROBE_F16.name, &[&flags], 4)
    })?;
    Ok(super::readback(ctx, &flags, 4)? == [0u8; 4])
}
