//! Which of naga's runtime checks each WGSL kernel is built with ([`runtime_checks`]).
//!
//! Every kernel gets [`super::registry::RUNTIME_CHECKS`] (buffer bounds checks on, loop
//! bounding and division guards off), except a kernel whose source carries [`IN_BOUNDS`]
//! on a device whose driver bounds-checks storage buffers itself ([`robust_buffers`]). Such a
//! kernel is built without naga's bounds checks, which then removes only naga's clamps of
//! workgroup- and function-array indices: wgpu's Vulkan backend already leaves storage
//! accesses unclamped on such devices (it relies on the driver's robustness there), so a kernel
//! bug still cannot reach memory outside its bindings.
//!
//! Why: in the tensor-core prefill kernel every workgroup-array access got its own clamp (a
//! `min` against the array's last index); besides the instruction, the clamp hid from the
//! driver that neighbouring f16 accesses are neighbours. Without the clamps, 64 rows at 32k on
//! an H200 took 512 instead of 664 µs (f16) and ~840 instead of ~1020 µs (KIVI-4); BENCHMARKS.md,
//! "Tier 3 prefill: naga's index clamps".

/// The marker a kernel's WGSL carries when every index into its workgroup and function arrays
/// is in range by construction: a constant, or the local invocation index and loop counters
/// combined with constants below the array's constant length (never a value read from memory
/// or a uniform).
pub const IN_BOUNDS: &str = "// kvpack: array indices in bounds by construction";

/// Whether `device`'s driver bounds-checks storage-buffer accesses: Vulkan with
/// `VK_EXT_robustness2` enabled (wgpu-hal then asks for `robustBufferAccess2` where the device
/// offers it and leaves naga's buffer clamps out). Elsewhere false (every check stays).
pub fn robust_buffers(device: &wgpu::Device) -> bool {
    #[cfg(all(
        feature = "vulkan",
        not(target_vendor = "apple"),
        not(target_arch = "wasm32")
    ))]
    {
        // SAFETY: reads the list of extensions the hal device was created with; nothing is
        // created, destroyed or used on the GPU through it.
        let hal = unsafe { device.as_hal::<wgpu::hal::api::Vulkan>() };
        if let Some(d) = hal {
            return d
                .enabled_device_extensions()
                .iter()
                .any(|e| e.to_bytes() == b"VK_EXT_robustness2");
        }
    }
    let _ = device;
    false
}

/// Whether a kernel with composed WGSL `src` is to be built without naga's bounds checks on a
/// device with [`robust_buffers`]: it carries [`IN_BOUNDS`]. Measuring knobs:
/// `KVPACK_TC_CHECKED=1` keeps every check (the clamps' cost), `KVPACK_UNCHECKED=1` drops them
/// for every kernel. (benches/pipeline_stats.rs asks the same for its disassembly.)
pub fn unclamped(src: &str) -> bool {
    let knob = |v: &str| std::env::var(v).is_ok_and(|x| x == "1");
    (src.contains(IN_BOUNDS) && !knob("KVPACK_TC_CHECKED")) || knob("KVPACK_UNCHECKED")
}

/// The checks the kernel with composed WGSL `src` is built with on `device`: without naga's
/// bounds checks where [`unclamped`] and [`robust_buffers`], else
/// [`super::registry::RUNTIME_CHECKS`].
pub fn runtime_checks(src: &str, device: &wgpu::Device) -> wgpu::ShaderRuntimeChecks {
    let base = super::registry::RUNTIME_CHECKS;
    if unclamped(src) && robust_buffers(device) {
        wgpu::ShaderRuntimeChecks {
            bounds_checks: false,
            ..base
        }
    } else {
        base
    }
}

#[cfg(test)]
mod tests {
    /// The marker is the tensor-core prefill kernel's (its clamps' cost was measured), and no
    /// other kernel's yet.
    #[test]
    fn only_the_tensor_prefill_kernel_is_marked() {
        let tc = include_str!("../../wgsl/attend/attend_prefill_tc.wgsl");
        assert!(tc.contains(super::IN_BOUNDS));
        for other in [
            include_str!("../../wgsl/attend/attend_core.wgsl"),
            include_str!("../../wgsl/attend/attend_prefill.wgsl"),
            include_str!("../../wgsl/attend/attend_decode_tc.wgsl"),
            include_str!("../../wgsl/attend/attend_decode_tc_rows.wgsl"),
            include_str!("../../wgsl/attend/attend_stage.wgsl"),
        ] {
            assert!(!other.contains(super::IN_BOUNDS));
        }
    }
}
