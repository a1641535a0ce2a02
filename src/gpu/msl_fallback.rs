//! Metal drivers and kvpack's MSL. The MSL kernels have run on kvpack's CPU emulator only
//! (`msl-emu/`), so a Metal driver may reject one. Under [`PathChoice::Auto`] a kernel whose
//! MSL the driver rejects runs its WGSL workgroup-memory variant instead, the variant whose
//! dispatch geometry equals the MSL kernel's in every plan, with a warning in the log and in
//! [`Context::describe`]; an explicit [`PathChoice::Msl`] request fails with the driver's
//! message ([`Error::Shader`]). The state is per device, shared by every handle of it.
//!
//! [`PathChoice::Auto`]: crate::PathChoice::Auto
//! [`PathChoice::Msl`]: crate::PathChoice::Msl

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use super::registry::KernelDef;
use crate::context::{Context, Gpu};
use crate::error::{Error, Result};
use crate::path::KernelPath;

/// The path a kernel runs on when the driver rejected its MSL under `Auto`.
pub const FALLBACK: KernelPath = KernelPath::WgslWorkgroup;

/// First line of every MSL source under [`Context::with_broken_msl`]: a preprocessor error,
/// which any Metal compiler rejects.
const BROKEN: &str = "#error kvpack test: a deliberately broken MSL source\n";

/// What a device's Metal driver made of kvpack's MSL.
#[derive(Debug, Default)]
pub(crate) struct MslState {
    /// Kernels whose MSL the driver rejected, with its message.
    rejected: BTreeMap<&'static str, String>,
    /// Kernels asked for on MSL explicitly ([`crate::PathChoice::Msl`]) on this device.
    explicit: BTreeSet<&'static str>,
    /// Test hook ([`Context::with_broken_msl`]): every MSL source is broken.
    broken: bool,
}

fn lock(m: &Mutex<MslState>) -> std::sync::MutexGuard<'_, MslState> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Context {
    /// Kernels whose MSL the Metal driver rejected on this device, each with the driver's
    /// message: under [`crate::PathChoice::Auto`] they run their WGSL workgroup-memory variant
    /// (empty off Metal and while every MSL kernel built).
    pub fn msl_fallbacks(&self) -> Vec<(&'static str, String)> {
        self.gpu().map_or_else(Vec::new, |g| {
            let s = lock(&g.msl);
            s.rejected.iter().map(|(k, m)| (*k, m.clone())).collect()
        })
    }

    /// A handle to the same device (with a pipeline cache and MSL state of its own) whose
    /// every MSL source starts with a preprocessor `#error`: for the test that a kernel the
    /// driver rejects falls back to WGSL under `Auto` and fails under `Msl`. On a device that
    /// is not Metal it also stands in for a Metal driver (the MSL path counts as available
    /// and every MSL source is rejected with a message naming its first line), so that the
    /// same test runs on every CI machine.
    #[doc(hidden)]
    pub fn with_broken_msl(&self) -> Self {
        self.with_gpu_edit(|g| {
            g.pipelines = Arc::default();
            g.built = Arc::default();
            g.msl = Arc::new(Mutex::new(MslState {
                broken: true,
                ..MslState::default()
            }));
        })
    }

    /// The driver's message when it rejected `kernel`'s MSL on this device.
    pub(crate) fn msl_rejection(&self, kernel: &str) -> Option<String> {
        self.gpu()
            .and_then(|g| lock(&g.msl).rejected.get(kernel).cloned())
    }

    /// Whether this handle stands in for a Metal driver ([`Self::with_broken_msl`] off Metal).
    pub(crate) fn simulates_metal(&self) -> bool {
        self.gpu()
            .is_some_and(|g| g.info.backend != wgpu::Backend::Metal && lock(&g.msl).broken)
    }

    /// Notes an explicit MSL request for `kernel` (its failure is then an error).
    pub(crate) fn note_explicit_msl(&self, kernel: &'static str) {
        if let Some(g) = self.gpu() {
            lock(&g.msl).explicit.insert(kernel);
        }
    }
}

/// The MSL source to hand the driver: the kernel's own, or a broken one under the test hook.
pub(crate) fn source(gpu: &Gpu, src: String) -> String {
    if lock(&gpu.msl).broken {
        format!("{BROKEN}{src}")
    } else {
        src
    }
}

/// Off Metal under the test hook: the stand-in driver's answer (it rejects every source).
pub(crate) fn simulated_compile(gpu: &Gpu, src: &str) -> Option<String> {
    (gpu.info.backend != wgpu::Backend::Metal && lock(&gpu.msl).broken).then(|| {
        format!(
            "stand-in Metal driver (kvpack test hook): rejected the source at line 1: {}",
            src.lines().next().unwrap_or_default()
        )
    })
}

/// Before building `def` on MSL: the path to build instead when the driver already rejected
/// its MSL (`Some(FALLBACK)`), or its error when MSL was asked for explicitly.
pub(crate) fn instead_of_msl(gpu: &Gpu, def: &KernelDef) -> Result<Option<KernelPath>> {
    let s = lock(&gpu.msl);
    match s.rejected.get(def.name) {
        None => Ok(None),
        Some(message) if s.explicit.contains(def.name) => Err(Error::Shader {
            kernel: def.name,
            path: KernelPath::Msl,
            message: message.clone(),
        }),
        Some(_) => Ok(Some(FALLBACK)),
    }
}

/// The driver rejected `def`'s MSL with `message`: records it, warns, and returns the path
/// to build instead, or the error when MSL was asked for explicitly.
pub(crate) fn rejected(gpu: &Gpu, def: &'static KernelDef, message: String) -> Result<KernelPath> {
    let mut s = lock(&gpu.msl);
    let explicit = s.explicit.contains(def.name);
    if explicit {
        log::error!(
            "kvpack: the Metal driver rejected the MSL kernel {} (asked for explicitly): {message}",
            def.name
        );
    } else {
        log::warn!(
            "kvpack: the Metal driver rejected the MSL kernel {}: {message}; it runs its WGSL \
             kernel ({FALLBACK}) instead",
            def.name
        );
    }
    s.rejected.insert(def.name, message.clone());
    if explicit {
        return Err(Error::Shader {
            kernel: def.name,
            path: KernelPath::Msl,
            message,
        });
    }
    Ok(FALLBACK)
}
