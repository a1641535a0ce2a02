//! Which path a kernel runs on: what the caller asks for ([`PathChoice`]) and what a kernel
//! resolves to ([`KernelPath`]). (Parsing a choice is in [`crate::context`].)

use std::fmt;

/// Which path the caller wants. `Auto` picks the best one this context can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum PathChoice {
    /// MSL on Metal with passthrough shaders and subgroups; else WGSL (subgroup variant when
    /// `SUBGROUP` is enabled, workgroup-memory variant otherwise); else the CPU reference.
    #[default]
    Auto,
    /// The CPU reference, always available.
    Cpu,
    /// WGSL, best variant for this device (subgroup when `SUBGROUP` is enabled).
    Wgsl,
    /// WGSL, subgroup variant; an error when `SUBGROUP` is not enabled on the device.
    WgslSubgroup,
    /// WGSL, workgroup-memory variant (runs on every adapter).
    WgslWorkgroup,
    /// Hand-written Metal Shading Language through wgpu's passthrough shaders.
    Msl,
}

impl fmt::Display for PathChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Cpu => "cpu",
            Self::Wgsl => "wgsl",
            Self::WgslSubgroup => "wgsl-subgroup",
            Self::WgslWorkgroup => "wgsl-workgroup",
            Self::Msl => "msl",
        })
    }
}

/// The path a kernel actually runs on, after resolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KernelPath {
    /// The CPU reference in `src/cpu/`.
    Cpu,
    /// `wgsl/<kernel>.wgsl`, subgroup variant.
    WgslSubgroup,
    /// `wgsl/<kernel>.wgsl`, workgroup-memory variant (or the kernel's only variant).
    WgslWorkgroup,
    /// `msl/<kernel>.metal` through passthrough.
    Msl,
}

impl KernelPath {
    /// True for every path that runs on the GPU.
    pub fn is_gpu(self) -> bool {
        !matches!(self, Self::Cpu)
    }
}

impl fmt::Display for KernelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Cpu => "cpu",
            Self::WgslSubgroup => "wgsl-subgroup",
            Self::WgslWorkgroup => "wgsl-workgroup",
            Self::Msl => "msl",
        })
    }
}
