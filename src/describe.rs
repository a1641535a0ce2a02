//! `Context::describe()`: the device, its features and limits, and the path every kernel of
//! kvpack ([`crate::kernels::all`]) runs on with the context's default choice.

use std::fmt;

use crate::context::{Context, Origin};
use crate::gpu::registry::KernelDef;
use crate::path::{KernelPath, PathChoice};

impl Context {
    /// What this context is and which path each kernel will run with the default choice.
    pub fn describe(&self) -> Description {
        let gpu = self.gpu().map(|g| GpuFacts {
            adapter: g.info.name.clone(),
            backend: format!("{:?}", g.info.backend),
            device_type: format!("{:?}", g.info.device_type),
            driver: format!("{} {}", g.info.driver, g.info.driver_info)
                .trim()
                .to_string(),
            subgroup_sizes: (g.info.subgroup_min_size, g.info.subgroup_max_size),
            features: feature_names(g.features),
            limits: vec![
                (
                    "max_storage_buffer_binding_size",
                    g.limits.max_storage_buffer_binding_size,
                ),
                ("max_buffer_size", g.limits.max_buffer_size),
                (
                    "max_compute_workgroup_storage_size",
                    u64::from(g.limits.max_compute_workgroup_storage_size),
                ),
                (
                    "max_compute_invocations_per_workgroup",
                    u64::from(g.limits.max_compute_invocations_per_workgroup),
                ),
                (
                    "max_compute_workgroups_per_dimension",
                    u64::from(g.limits.max_compute_workgroups_per_dimension),
                ),
                (
                    "max_storage_buffers_per_shader_stage",
                    u64::from(g.limits.max_storage_buffers_per_shader_stage),
                ),
            ],
            tensor_cores: match self.tensor_cores() {
                // Emulated (Context::with_emulated_tensor_cores): named as such, never Auto's.
                Ok(()) if self.tensor_cores_emulated() => Err(
                    "emulated on this handle (Context::with_emulated_tensor_cores): attend_prefill_tc runs only when asked for (AttendKernel::Tensor), on the f32 pipe, for tests"
                        .into(),
                ),
                r => r,
            },
        });
        let kernels = crate::kernels::all()
            .into_iter()
            .map(|k: &KernelDef| {
                let r = self
                    .resolve(k, self.path())
                    .map(|p| match p {
                        KernelPath::WgslSubgroup | KernelPath::WgslWorkgroup
                            if k.wgsl_subgroup.is_none() =>
                        {
                            format!("{p} (one WGSL source: no cross-lane operations)")
                        }
                        _ => match self.msl_rejection(k.name) {
                            Some(m) if p != KernelPath::Msl => {
                                format!("{p} (the Metal driver rejected its MSL: {m})")
                            }
                            _ => p.to_string(),
                        },
                    })
                    .map_err(|e| e.to_string());
                (k.name, r)
            })
            .collect();
        Description {
            origin: self.origin().clone(),
            path: self.path(),
            gpu,
            kernels,
        }
    }
}

fn feature_names(f: wgpu::Features) -> Vec<&'static str> {
    let known = [
        (wgpu::Features::SUBGROUP, "SUBGROUP"),
        (wgpu::Features::SHADER_F16, "SHADER_F16"),
        (wgpu::Features::TIMESTAMP_QUERY, "TIMESTAMP_QUERY"),
        (wgpu::Features::PASSTHROUGH_SHADERS, "PASSTHROUGH_SHADERS"),
        (
            wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX,
            "EXPERIMENTAL_COOPERATIVE_MATRIX",
        ),
    ];
    known
        .iter()
        .filter(|(k, _)| f.contains(*k))
        .map(|(_, n)| *n)
        .collect()
}

/// Facts about the GPU of a context.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GpuFacts {
    /// Adapter name.
    pub adapter: String,
    /// wgpu backend.
    pub backend: String,
    /// Device type (discrete, integrated, CPU, ...).
    pub device_type: String,
    /// Driver name and info.
    pub driver: String,
    /// (min, max) subgroup size the adapter reports.
    pub subgroup_sizes: (u32, u32),
    /// kvpack-relevant features enabled on the device.
    pub features: Vec<&'static str>,
    /// Limits that size kvpack's buffers and dispatches.
    pub limits: Vec<(&'static str, u64)>,
    /// Whether the tensor-core attention kernel runs here, or why not
    /// ([`Context::tensor_cores`]).
    pub tensor_cores: std::result::Result<(), String>,
}

/// The output of [`Context::describe`]; `Display` prints it as a small report.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Description {
    /// Where the device came from.
    pub origin: Origin,
    /// The context's default path choice.
    pub path: PathChoice,
    /// GPU facts, when there is a GPU.
    pub gpu: Option<GpuFacts>,
    /// Each kernel and the path it runs with the default choice (or why it cannot).
    pub kernels: Vec<(&'static str, std::result::Result<String, String>)>,
}

impl fmt::Display for Description {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let origin = match &self.origin {
            Origin::AppDevice => "application's own device".to_string(),
            Origin::Headless => "headless device created by kvpack".to_string(),
            Origin::CpuRequested => "CPU only (requested)".to_string(),
            Origin::CpuNoAdapter(r) => format!("CPU only: {r}"),
        };
        writeln!(f, "kvpack context: {origin}")?;
        if let Some(g) = &self.gpu {
            writeln!(
                f,
                "  adapter        {} ({}, {})",
                g.adapter, g.backend, g.device_type
            )?;
            if !g.driver.is_empty() {
                writeln!(f, "  driver         {}", g.driver)?;
            }
            writeln!(
                f,
                "  subgroup size  {}..={}",
                g.subgroup_sizes.0, g.subgroup_sizes.1
            )?;
            let feats = if g.features.is_empty() {
                "(none)".to_string()
            } else {
                g.features.join(", ")
            };
            writeln!(f, "  features       {feats}")?;
            for (name, v) in &g.limits {
                writeln!(f, "  {name:<38} {v}")?;
            }
            match &g.tensor_cores {
                Ok(()) => writeln!(
                    f,
                    "  tensor cores   yes: Auto runs calls of at least {} query vectors per KV head over {} cached tokens (long prefill chunks) on attend_prefill_tc, where the key codec does not transform the query (AttendKernel::Tensor asks for it; f16 products, f32 accumulation: relative L2 ≤ 1e-3 per row, AttendKernel::Decode keeps f32 products); attend_decode_tc (AttendKernel::TensorDecode, pairs with tile hooks) runs when asked for (Auto does not use it: slower than the decode kernel on the H200)",
                    crate::attention::plan::TENSOR_AUTO
                        .iter()
                        .map(|(v, _)| v.to_string())
                        .collect::<Vec<_>>()
                        .join(" / "),
                    crate::attention::plan::TENSOR_AUTO
                        .iter()
                        .map(|(_, t)| t.to_string())
                        .collect::<Vec<_>>()
                        .join(" / ")
                )?,
                Err(e) => writeln!(f, "  tensor cores   no: {e}")?,
            }
        }
        writeln!(f, "  path choice    {}", self.path)?;
        for (k, r) in &self.kernels {
            match r {
                Ok(p) => writeln!(f, "  kernel {k:<26} -> {p}")?,
                Err(e) => writeln!(f, "  kernel {k:<26} -> unavailable: {e}")?,
            }
        }
        Ok(())
    }
}
