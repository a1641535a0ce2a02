//! Pipelines built on first use and cached per device (keyed by kernel, path and
//! specialization), inside error scopes: a shader or pipeline the device rejects is
//! [`Error::Shader`], never a panic.

use std::borrow::Cow;
use std::sync::Arc;

use super::cache::{Pipeline, PipelineKey, Specialization};
use super::registry::{Binding, KernelDef, compose_msl, compose_wgsl};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::path::KernelPath;

/// The bind group layout of `def`: its bindings in order, compute-visible; every uniform
/// binding with a dynamic offset (its bytes live in a slot of the device's uniform arena,
/// [`super::uniforms`], so that a bind group outlives a change of them: [`super::bind_cache`]).
pub fn layout_entries(def: &KernelDef) -> Vec<wgpu::BindGroupLayoutEntry> {
    def.bindings
        .iter()
        .enumerate()
        .map(|(i, b)| wgpu::BindGroupLayoutEntry {
            binding: i as u32,
            // COMPUTE only: wgpu's Metal backend miscounts slots when other stages are visible.
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: match b {
                    Binding::Uniform => wgpu::BufferBindingType::Uniform,
                    Binding::StorageRead => wgpu::BufferBindingType::Storage { read_only: true },
                    Binding::StorageReadWrite => {
                        wgpu::BufferBindingType::Storage { read_only: false }
                    }
                },
                has_dynamic_offset: *b == Binding::Uniform,
                min_binding_size: None,
            },
            count: None,
        })
        .collect()
}

/// The pipeline for `def` on `path`, built on first use and cached in the context.
pub fn pipeline(
    ctx: &Context,
    def: &'static KernelDef,
    path: KernelPath,
    spec: &Specialization,
) -> Result<Arc<Pipeline>> {
    let gpu = ctx.gpu().ok_or_else(|| Error::PathUnavailable {
        kernel: def.name,
        requested: path.to_string(),
        reason: "no GPU device".into(),
    })?;
    if !path.is_gpu() {
        return Err(Error::PathUnavailable {
            kernel: def.name,
            requested: path.to_string(),
            reason: "the CPU path has no pipeline".into(),
        });
    }
    if path == KernelPath::Msl {
        if let Some(instead) = super::msl_fallback::instead_of_msl(gpu, def)? {
            return pipeline(ctx, def, instead, spec);
        }
    }
    let key = PipelineKey {
        kernel: def.name,
        path,
        spec: spec.clone(),
    };
    if let Some(p) = lock(&gpu.pipelines).get(&key) {
        return Ok(p.clone());
    }
    let built = match build(gpu, def, path, spec) {
        Err(Error::Shader { message, .. }) if path == KernelPath::Msl => {
            let instead = super::msl_fallback::rejected(gpu, def, message)?;
            return pipeline(ctx, def, instead, spec);
        }
        r => Arc::new(r?),
    };
    lock(&gpu.pipelines).insert(key, built.clone());
    let spec_text: Vec<String> = spec.0.iter().map(|(n, v)| format!("{n}={v}")).collect();
    lock(&gpu.built).push(format!("{} {path} [{}]", def.name, spec_text.join(", ")));
    Ok(built)
}

/// Whether workgroup memory is zeroed when a workgroup starts (WGSL's rule, wgpu's default).
/// `KVPACK_WG_ZERO=0` turns it off: a measuring knob (what the zeroing costs).
fn zero_workgroup_memory() -> bool {
    !std::env::var("KVPACK_WG_ZERO").is_ok_and(|v| v == "0")
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding this lock cannot leave the cache inconsistent (inserts are atomic).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn build(
    gpu: &crate::context::Gpu,
    def: &'static KernelDef,
    path: KernelPath,
    spec: &Specialization,
) -> Result<Pipeline> {
    let device = &gpu.device;
    let started = std::time::Instant::now();
    let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some(def.name),
        entries: &layout_entries(def),
    });
    let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(def.name),
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let (module, entry) = match path {
        KernelPath::Msl => {
            let src = compose_msl(def, spec).ok_or_else(|| Error::PathUnavailable {
                kernel: def.name,
                requested: path.to_string(),
                reason: "kernel has no MSL source".into(),
            })?;
            let src = super::msl_fallback::source(gpu, src);
            if let Some(message) = super::msl_fallback::simulated_compile(gpu, &src) {
                // Nothing was pushed to the device yet but the two scopes: pop them.
                let _ = pollster::block_on(internal.pop());
                let _ = pollster::block_on(validation.pop());
                return Err(Error::Shader {
                    kernel: def.name,
                    path,
                    message,
                });
            }
            let entry_points = [wgpu::PassthroughShaderEntryPoint {
                name: Cow::Borrowed(def.name),
                workgroup_size: (def.workgroup_size, 1, 1),
            }];
            let desc = wgpu::ShaderModuleDescriptorPassthrough {
                label: Some(def.name),
                entry_points: Cow::Borrowed(&entry_points),
                msl: Some(Cow::Owned(src)),
                ..Default::default()
            };
            // SAFETY: the MSL sources are kvpack's own, reviewed to stay within their buffers
            // (lengths travel in the uniform at buffer(0)) and emulated on the CPU in tests.
            (
                unsafe { device.create_shader_module_passthrough(desc) },
                def.name,
            )
        }
        _ => {
            let src = if gpu.coop_emulated && super::registry::needs_cooperative_matrix(def) {
                // Context::with_emulated_tensor_cores: the kernel without cooperative matrices.
                match super::registry::compose_wgsl_emulated(def, path, spec) {
                    Ok(s) => s,
                    Err(message) => {
                        let _ = pollster::block_on(internal.pop());
                        let _ = pollster::block_on(validation.pop());
                        return Err(Error::Shader {
                            kernel: def.name,
                            path,
                            message: format!("emulated cooperative matrices: {message}"),
                        });
                    }
                }
            } else {
                compose_wgsl(def, path, spec)
            };
            let checks = super::checks::runtime_checks(&src, device);
            let desc = wgpu::ShaderModuleDescriptor {
                label: Some(def.name),
                source: wgpu::ShaderSource::Wgsl(Cow::Owned(src)),
            };
            // SAFETY: see `RUNTIME_CHECKS`: buffer bounds checks stay on (naga's, or the
            // driver's where gpu/checks.rs builds a kernel without naga's); the two checks turned
            // off guard against infinite loops and division by zero, which kvpack's kernels do
            // not contain (every loop is bounded by a constant or a uniform the host validated,
            // every divisor is a validated non-zero uniform or a constant).
            let m = unsafe { device.create_shader_module_trusted(desc, checks) };
            (m, "main")
        }
    };
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(def.name),
        layout: Some(&pl),
        module: &module,
        entry_point: Some(entry),
        compilation_options: wgpu::PipelineCompilationOptions {
            zero_initialize_workgroup_memory: zero_workgroup_memory(),
            ..Default::default()
        },
        cache: None,
    });
    let e_internal = pollster::block_on(internal.pop());
    let e_validation = pollster::block_on(validation.pop());
    if let Some(e) = e_validation.or(e_internal) {
        return Err(Error::Shader {
            kernel: def.name,
            path,
            message: e.to_string(),
        });
    }
    let ms = started.elapsed().as_secs_f64() * 1e3;
    // Creation only: a software driver (llvmpipe) may compile the machine code at the first
    // dispatch instead.
    log::debug!("built {} on {path} in {ms:.0} ms", def.name);
    Ok(Pipeline {
        pipeline,
        layout,
        bindings: def.bindings,
    })
}
