//! Path resolution: which path each kernel runs on for a [`PathChoice`] on a [`Context`] (an
//! error, never a silent fallback, when the device cannot run it). Methods of [`Context`],
//! kept here so that the context itself knows no kernel.

use super::registry::KernelDef;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::path::{KernelPath, PathChoice};

impl Context {
    /// Resolves which path `kernel` runs on for `choice` ([`PathChoice::Auto`] included).
    pub fn resolve(&self, kernel: &KernelDef, choice: PathChoice) -> Result<KernelPath> {
        let unavailable = |reason: String| Error::PathUnavailable {
            kernel: kernel.name,
            requested: choice.to_string(),
            reason,
        };
        let has_subgroup = self.features().contains(wgpu::Features::SUBGROUP);
        if super::registry::needs_cooperative_matrix(kernel) {
            if self.tensor_cores_emulated() && !kernel.name.starts_with("attend_prefill_tc_") {
                return Err(unavailable(
                    "emulated cooperative matrices (Context::with_emulated_tensor_cores) serve the tensor-core prefill kernel only"
                        .into(),
                ));
            }
            // One WGSL source, subgroups and cooperative matrices: only where the device has
            // both, on a choice that allows WGSL with subgroups (the CPU path, which has one
            // form of attention, serves it as every kernel).
            return match choice {
                PathChoice::Cpu => Ok(KernelPath::Cpu),
                PathChoice::Auto if self.gpu().is_none() => Ok(KernelPath::Cpu),
                PathChoice::Auto | PathChoice::Wgsl | PathChoice::WgslSubgroup => self
                    .tensor_cores()
                    .map(|()| KernelPath::WgslSubgroup)
                    .map_err(unavailable),
                _ => Err(unavailable(format!(
                    "the tensor-core kernel is WGSL with subgroups only (path auto, wgsl or wgsl-subgroup), not {choice}"
                ))),
            };
        }
        match choice {
            PathChoice::Cpu => Ok(KernelPath::Cpu),
            PathChoice::Auto => {
                if self.msl_available().is_ok()
                    && kernel.msl.is_some()
                    && self.msl_rejection(kernel.name).is_none()
                {
                    Ok(KernelPath::Msl)
                } else if self.gpu().is_some() {
                    Ok(if has_subgroup && self.subgroup_variant_ok(kernel) {
                        KernelPath::WgslSubgroup
                    } else {
                        KernelPath::WgslWorkgroup
                    })
                } else {
                    Ok(KernelPath::Cpu)
                }
            }
            PathChoice::Wgsl | PathChoice::WgslSubgroup | PathChoice::WgslWorkgroup => {
                self.check_choice(choice).map_err(|e| match e {
                    Error::PathUnavailable { reason, .. } => unavailable(reason),
                    other => other,
                })?;
                Ok(match choice {
                    PathChoice::WgslWorkgroup => KernelPath::WgslWorkgroup,
                    PathChoice::WgslSubgroup => {
                        if !self.subgroup_variant_ok(kernel) {
                            return Err(unavailable(
                                "this device does not lay subgroups out in invocation order, which the \
                                 subgroup variant needs (probed once per device)"
                                    .into(),
                            ));
                        }
                        KernelPath::WgslSubgroup
                    }
                    _ if has_subgroup && self.subgroup_variant_ok(kernel) => {
                        KernelPath::WgslSubgroup
                    }
                    _ => KernelPath::WgslWorkgroup,
                })
            }
            PathChoice::Msl => {
                self.msl_available().map_err(unavailable)?;
                if kernel.msl.is_none() {
                    return Err(unavailable("kernel has no MSL source".into()));
                }
                self.note_explicit_msl(kernel.name);
                Ok(KernelPath::Msl)
            }
        }
    }

    /// Whether `kernel`'s subgroup variant can run here: kernels with one WGSL source always
    /// can; real subgroup variants need subgroups in invocation order (probed once per
    /// device; a failed probe counts as "no").
    fn subgroup_variant_ok(&self, kernel: &KernelDef) -> bool {
        if kernel.wgsl_subgroup.is_none() {
            return true;
        }
        self.subgroups_in_order()
    }

    /// Whether widening f16 to f32 keeps f16 subnormals exact on this device (probed once;
    /// false without a GPU or when the probe fails): the precondition of the decode kernel's
    /// measuring variant that reads KIVI's codes two per mask (`KVPACK_DEC_VARIANT=4`,
    /// wgsl/attend/attend_core.wgsl `DEC_PAIRS`). That variant measured slower than the default
    /// on an H100 (BENCHMARKS.md, "Decode: KIVI's codes into floats"), so no kernel reads this;
    /// it answers for anyone measuring the variant on another device.
    pub fn f16_subnormals_kept(&self) -> bool {
        let Some(g) = self.gpu() else { return false };
        *g.f16_subnormals
            .get_or_init(|| match super::probe::f16_subnormals_kept(self) {
                Ok(ok) => {
                    if !ok {
                        log::info!(
                            "kvpack: this device flushes f16 subnormals when widening them to f32"
                        );
                    }
                    ok
                }
                Err(e) => {
                    log::warn!("kvpack: f16 subnormal probe failed ({e}); taken as \"flushed\"");
                    false
                }
            })
    }

    /// Whether subgroups tile workgroups in invocation order on this device (probed once;
    /// false without a GPU or without `SUBGROUP`).
    pub fn subgroups_in_order(&self) -> bool {
        let Some(g) = self.gpu() else { return false };
        if !g.features.contains(wgpu::Features::SUBGROUP) {
            return false;
        }
        *g.subgroup_order.get_or_init(|| match super::probe::subgroups_in_order(self) {
            Ok(ok) => {
                if !ok {
                    log::warn!("kvpack: subgroups are not in invocation order; subgroup variants disabled");
                }
                ok
            }
            Err(e) => {
                log::warn!("kvpack: subgroup probe failed ({e}); subgroup variants disabled");
                false
            }
        })
    }
}
