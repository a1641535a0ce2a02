//! One-time device probes.
//!
//! `subgroups_in_order`: kvpack's subgroup variants (KIVI values, attention) reduce over
//! slices of 32 invocations and assume that subgroups tile a workgroup in invocation order.
//! Vulkan does not promise it, so the context checks it once per device (at the workgroup
//! sizes the kernels use) before it offers those variants.

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
