//! GPU helpers: buffers within the device's limits, uploads, readback through a `MAP_READ`
//! staging buffer, dispatch geometry split over x/y, and blocking submission wrapped in
//! error scopes. Nothing here installs an uncaptured-error handler.
//!
//! **Unstable.** This module is kvpack's machinery, public so that its tests, benches and tools
//! can drive single kernels; it is not part of the supported API and may change in any release
//! (the supported surface is what `kvpack`'s crate root re-exports).

pub(crate) mod arena;
pub mod bind_cache;
pub mod cache;
pub mod checks;
pub mod coop_emulation;
pub mod msl_fallback;
pub mod pipeline;
pub(crate) mod probe;
pub mod registry;
pub mod resolve;
pub mod staging;
pub mod timing;
pub mod uniforms;
pub mod unroll;

use crate::context::{Context, Gpu};
use crate::error::{Error, Result};

/// Usage of every storage buffer kvpack creates (it can be read back and written by copies).
pub const STORAGE_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

pub(crate) fn gpu_of<'a>(ctx: &'a Context, during: &'static str) -> Result<&'a Gpu> {
    let gpu = ctx.gpu().ok_or_else(|| Error::Gpu {
        during,
        message: "this context has no GPU device".into(),
    })?;
    if let Some(message) = gpu.lost.get() {
        return Err(Error::DeviceLost {
            during,
            message: message.clone(),
        });
    }
    Ok(gpu)
}

/// `err` unless the device turns out to be lost (wgpu reports a loss through the device-lost
/// callback on its next poll, and drops the errors of work on a lost device): then
/// [`Error::DeviceLost`].
fn or_lost(gpu: &Gpu, during: &'static str, err: Error) -> Error {
    let _ = gpu.device.poll(wgpu::PollType::Poll);
    match gpu.lost.get() {
        Some(message) => Error::DeviceLost {
            during,
            message: message.clone(),
        },
        None => err,
    }
}

/// Bytes rounded up to whole u32 words, at least one word (wgpu rejects empty bindings).
pub fn binding_size(bytes: u64) -> u64 {
    bytes.div_ceil(4).max(1) * 4
}

/// Checks that a storage binding of `bytes` fits this device's limits.
pub fn check_storage_size(ctx: &Context, what: &'static str, bytes: u64) -> Result<()> {
    gpu_of(ctx, what)?;
    let limit = ctx.max_storage_binding_size();
    if bytes > limit {
        return Err(Error::Limit {
            what,
            needed: bytes,
            limit,
        });
    }
    Ok(())
}

/// Creates a buffer inside an out-of-memory error scope (and the context's test hook that
/// fails an allocation on purpose): an allocation the device cannot make is
/// [`Error::OutOfMemory`], never wgpu's default handler (which panics).
fn allocate(
    ctx: &Context,
    label: &'static str,
    size: u64,
    make: impl FnOnce(&wgpu::Device) -> std::result::Result<wgpu::Buffer, String>,
) -> Result<wgpu::Buffer> {
    let gpu = gpu_of(ctx, label)?;
    if ctx.take_injected_allocation_failure() {
        return Err(Error::OutOfMemory {
            what: label,
            bytes: size,
            message: "allocation failed on purpose (Context::fail_allocation_after)".into(),
        });
    }
    let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    ctx.count_allocation(size);
    let buffer = make(&gpu.device);
    if let Some(e) = pollster::block_on(scope.pop()) {
        let oom = Error::OutOfMemory {
            what: label,
            bytes: size,
            message: e.to_string(),
        };
        return Err(or_lost(gpu, label, oom));
    }
    buffer.map_err(|message| {
        or_lost(
            gpu,
            label,
            Error::Gpu {
                during: label,
                message,
            },
        )
    })
}

/// A zero-filled storage buffer of at least `bytes` (rounded to words), checked against limits.
pub fn storage_buffer(ctx: &Context, label: &'static str, bytes: u64) -> Result<wgpu::Buffer> {
    let size = binding_size(bytes);
    check_storage_size(ctx, label, size)?;
    allocate(ctx, label, size, |device| {
        Ok(device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: STORAGE_USAGE,
            mapped_at_creation: false,
        }))
    })
}

/// A buffer of `size` bytes (a multiple of 4, at least `data.len()`) holding `data` then zeros:
/// mapped at creation and filled here, not with wgpu's `create_buffer_init`, which panics when
/// the mapping fails (as it does on a lost device); here that is an error.
fn init_buffer(
    device: &wgpu::Device,
    label: &'static str,
    data: &[u8],
    size: u64,
    usage: wgpu::BufferUsages,
) -> std::result::Result<wgpu::Buffer, String> {
    let buffer = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size,
        usage,
        mapped_at_creation: size > 0,
    });
    if size > 0 {
        let mut view = buffer
            .get_mapped_range_mut(..)
            .map_err(|e| format!("the new buffer cannot be written: {e}"))?;
        let mut padded = data.to_vec();
        padded.resize(size as usize, 0);
        view.copy_from_slice(&padded);
    }
    buffer.unmap();
    Ok(buffer)
}

/// A storage buffer holding `data` (padded with zeros to whole words).
pub fn upload(ctx: &Context, label: &'static str, data: &[u8]) -> Result<wgpu::Buffer> {
    let size = binding_size(data.len() as u64);
    check_storage_size(ctx, label, size)?;
    allocate(ctx, label, size, |device| {
        init_buffer(device, label, data, size, STORAGE_USAGE)
    })
}

/// One storage binding: a whole buffer or a byte range of one (offsets aligned to the
/// device's `min_storage_buffer_offset_alignment`).
#[derive(Clone, Copy, Debug)]
pub struct Bind<'a> {
    /// The buffer.
    pub buffer: &'a wgpu::Buffer,
    /// First byte.
    pub offset: u64,
    /// Bytes bound (`None`: to the end of the buffer).
    pub size: Option<u64>,
}

impl<'a> Bind<'a> {
    /// `size` bytes of `buffer` from `offset` (at least one word is bound).
    pub fn range(buffer: &'a wgpu::Buffer, offset: u64, size: u64) -> Self {
        Self {
            buffer,
            offset,
            size: Some(size.max(4)),
        }
    }
}

impl<'a> From<&'a wgpu::Buffer> for Bind<'a> {
    fn from(buffer: &'a wgpu::Buffer) -> Self {
        Self {
            buffer,
            offset: 0,
            size: None,
        }
    }
}

/// Checks that `buf` is a storage buffer of at least `bytes`.
pub fn check_buffer(buf: &wgpu::Buffer, what: &'static str, bytes: u64) -> Result<()> {
    if !buf.usage().contains(wgpu::BufferUsages::STORAGE) {
        return Err(Error::Config(format!("{what}: buffer lacks STORAGE usage")));
    }
    if buf.size() < bytes {
        return Err(Error::LengthMismatch {
            what,
            expected: bytes as usize,
            actual: buf.size() as usize,
        });
    }
    Ok(())
}

/// Workgroup counts (x, y) for `total` workgroups on this context (see [`split_workgroups_with`]).
pub fn split_workgroups(ctx: &Context, total: u64) -> Result<(u32, u32)> {
    split_workgroups_with(total, ctx.max_workgroups_per_dim())
}

/// Workgroup counts (x, y) for `total` workgroups: x up to `max_per_dim`, y the rest.
/// Kernels compute their linear workgroup index as `wg.y * num_wg.x + wg.x` and return early
/// (uniformly per workgroup) past the end.
pub fn split_workgroups_with(total: u64, max_per_dim: u32) -> Result<(u32, u32)> {
    let max = u64::from(max_per_dim.max(1));
    if total == 0 {
        return Ok((0, 0));
    }
    let x = total.min(max);
    let y = total.div_ceil(x);
    if y > max {
        return Err(Error::Limit {
            what: "workgroups per dispatch",
            needed: total,
            limit: max * max,
        });
    }
    Ok((x as u32, y as u32))
}

/// Everything one dispatch of a kernel needs besides its storage buffers: the kernel, its
/// specialization, the bytes of its uniform (binding 0) and the number of workgroups. Host code
/// builds a plan once; the GPU paths record it ([`encode_plan`]) and the tests' MSL emulator
/// runs the very same plan, so dispatch geometry and parameters are written once.
#[derive(Clone, Debug)]
pub struct DispatchPlan {
    /// The kernel.
    pub kernel: &'static registry::KernelDef,
    /// Its specialization.
    pub spec: registry::Specialization,
    /// Bytes of the uniform block bound at binding 0.
    pub uniform: Vec<u8>,
    /// Total workgroups (split over x/y at dispatch).
    pub workgroups: u64,
}

/// Records `plan` on `path`: builds (or reuses) the pipeline, uploads the uniform and binds
/// `storage` as bindings 1.. in order.
pub fn encode_plan(
    ctx: &Context,
    encoder: &mut wgpu::CommandEncoder,
    path: crate::context::KernelPath,
    plan: &DispatchPlan,
    storage: &[&wgpu::Buffer],
) -> Result<()> {
    let binds: Vec<Bind<'_>> = storage.iter().map(|b| Bind::from(*b)).collect();
    encode_plan_with(ctx, encoder, path, plan, &binds, None)
}

/// [`encode_plan`] with bindings that may be ranges of buffers.
pub fn encode_plan_bound(
    ctx: &Context,
    encoder: &mut wgpu::CommandEncoder,
    path: crate::context::KernelPath,
    plan: &DispatchPlan,
    storage: &[Bind<'_>],
) -> Result<()> {
    encode_plan_with(ctx, encoder, path, plan, storage, None)
}

/// [`encode_plan`] with the compute pass's timestamp writes (see [`timing`]).
pub(crate) fn encode_plan_with(
    ctx: &Context,
    encoder: &mut wgpu::CommandEncoder,
    path: crate::context::KernelPath,
    plan: &DispatchPlan,
    storage: &[Bind<'_>],
    timestamp_writes: Option<wgpu::ComputePassTimestampWrites<'_>>,
) -> Result<()> {
    let def = plan.kernel;
    if !path.is_gpu() {
        return Err(Error::PathUnavailable {
            kernel: def.name,
            requested: path.to_string(),
            reason: "encode() records GPU work; this operation was resolved to the CPU path".into(),
        });
    }
    if storage.len() + 1 != def.bindings.len() {
        return Err(Error::LengthMismatch {
            what: "kernel bindings",
            expected: def.bindings.len(),
            actual: storage.len() + 1,
        });
    }
    if plan.workgroups == 0 {
        return Ok(());
    }
    let pipeline = pipeline::pipeline(ctx, def, path, &plan.spec)?;
    let uniform = uniforms::uniform(ctx, def.name, &plan.uniform)?;
    let mut all: Vec<Bind<'_>> = vec![Bind::from(&uniform)];
    all.extend_from_slice(storage);
    encode_dispatch_with(
        ctx,
        encoder,
        &pipeline,
        def.name,
        &all,
        plan.workgroups,
        timestamp_writes,
    )
}

/// Records one compute dispatch of `pipeline` with `buffers` bound in binding order.
pub fn encode_dispatch(
    ctx: &Context,
    encoder: &mut wgpu::CommandEncoder,
    pipeline: &registry::Pipeline,
    label: &'static str,
    buffers: &[&wgpu::Buffer],
    total_workgroups: u64,
) -> Result<()> {
    let binds: Vec<Bind<'_>> = buffers.iter().map(|b| Bind::from(*b)).collect();
    encode_dispatch_with(
        ctx,
        encoder,
        pipeline,
        label,
        &binds,
        total_workgroups,
        None,
    )
}

/// [`encode_dispatch`] with the compute pass's timestamp writes (see [`timing`]).
pub(crate) fn encode_dispatch_with(
    ctx: &Context,
    encoder: &mut wgpu::CommandEncoder,
    pipeline: &registry::Pipeline,
    label: &'static str,
    buffers: &[Bind<'_>],
    total_workgroups: u64,
    timestamp_writes: Option<wgpu::ComputePassTimestampWrites<'_>>,
) -> Result<()> {
    let (x, y) = split_workgroups(ctx, total_workgroups)?;
    if x == 0 {
        return Ok(());
    }
    ctx.log_dispatch(label, x, y);
    let gpu = gpu_of(ctx, label)?;
    let (bind_group, offsets) =
        bind_cache::bind_group(gpu, &pipeline.layout, pipeline.bindings, buffers, None);
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: Some(label),
        timestamp_writes,
    });
    pass.set_pipeline(&pipeline.pipeline);
    pass.set_bind_group(0, &bind_group, &offsets);
    pass.dispatch_workgroups(x, y, 1);
    Ok(())
}

/// A uniform buffer holding `data` (padded to 16 bytes).
pub fn uniform_buffer(ctx: &Context, label: &'static str, data: &[u8]) -> Result<wgpu::Buffer> {
    let mut padded = data.to_vec();
    padded.resize(data.len().div_ceil(16).max(1) * 16, 0);
    let size = padded.len() as u64;
    allocate(ctx, label, size, |device| {
        init_buffer(device, label, &padded, size, wgpu::BufferUsages::UNIFORM)
    })
}

/// Records several plans in one compute pass, in order (wgpu orders a dispatch after the
/// writes of the ones before it). Each plan's own uniform is binding 0; `storage` binds 1..
/// (uniform or storage buffers, as the kernel's bindings say). Bind groups come from `cache`
/// where given ([`bind_cache`]: an owner's groups kept across its calls), else are made.
pub fn encode_plans_in_one_pass(
    ctx: &Context,
    encoder: &mut wgpu::CommandEncoder,
    items: &[(crate::context::KernelPath, DispatchPlan, Vec<Bind<'_>>)],
    cache: Option<&bind_cache::BindGroupCache>,
) -> Result<()> {
    let mut prepared = Vec::new();
    for (path, plan, storage) in items {
        let def = plan.kernel;
        if !path.is_gpu() {
            return Err(Error::PathUnavailable {
                kernel: def.name,
                requested: path.to_string(),
                reason: "encode() records GPU work; this operation was resolved to the CPU path"
                    .into(),
            });
        }
        if storage.len() + 1 != def.bindings.len() {
            return Err(Error::LengthMismatch {
                what: "kernel bindings",
                expected: def.bindings.len(),
                actual: storage.len() + 1,
            });
        }
        if plan.workgroups == 0 {
            continue;
        }
        let pipeline = pipeline::pipeline(ctx, def, *path, &plan.spec)?;
        let uniform = uniforms::uniform(ctx, def.name, &plan.uniform)?;
        let (x, y) = split_workgroups(ctx, plan.workgroups)?;
        ctx.log_dispatch(def.name, x, y);
        prepared.push((pipeline, uniform, storage, x, y, def.name));
    }
    let gpu = gpu_of(ctx, "dispatch")?;
    let mut groups = Vec::new();
    for (pipeline, uniform, storage, ..) in &prepared {
        let mut binds = Vec::with_capacity(storage.len() + 1);
        binds.push(Bind::from(uniform));
        binds.extend_from_slice(storage);
        groups.push(bind_cache::bind_group(
            gpu,
            &pipeline.layout,
            pipeline.bindings,
            &binds,
            cache,
        ));
    }
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: prepared.first().map(|p| p.5),
        timestamp_writes: None,
    });
    for ((pipeline, _, _, x, y, _), (group, offsets)) in prepared.iter().zip(&groups) {
        pass.set_pipeline(&pipeline.pipeline);
        pass.set_bind_group(0, group, offsets);
        pass.dispatch_workgroups(*x, *y, 1);
    }
    Ok(())
}

/// Records work with `record` and submits it without waiting for the device to run it:
/// validation errors (wgpu checks them on the host) are [`Error::Gpu`], a device already lost
/// [`Error::DeviceLost`]. Work submitted later to the queue runs after it, and reading its
/// results back waits for it; a device lost while it runs shows at the next blocking call.
/// Returns the submission's index.
pub fn submit(
    ctx: &Context,
    during: &'static str,
    record: impl FnOnce(&mut wgpu::CommandEncoder) -> Result<()>,
) -> Result<wgpu::SubmissionIndex> {
    let gpu = gpu_of(ctx, during)?;
    let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
    let mut encoder = gpu
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some(during),
        });
    let recorded = record(&mut encoder);
    let index = gpu.queue.submit([encoder.finish()]);
    let err = pollster::block_on(scope.pop());
    recorded.map_err(|e| or_lost(gpu, during, e))?;
    if let Some(e) = err {
        let e = Error::Gpu {
            during,
            message: e.to_string(),
        };
        return Err(or_lost(gpu, during, e));
    }
    match gpu.lost.get() {
        Some(message) => Err(Error::DeviceLost {
            during,
            message: message.clone(),
        }),
        None => Ok(index),
    }
}

/// [`submit`], then waits until the device has run the work.
pub fn submit_blocking(
    ctx: &Context,
    during: &'static str,
    record: impl FnOnce(&mut wgpu::CommandEncoder) -> Result<()>,
) -> Result<()> {
    let index = submit(ctx, during, record)?;
    let gpu = gpu_of(ctx, during)?;
    gpu.device
        .poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        })
        .map_err(|e| {
            let e = Error::Gpu {
                during,
                message: e.to_string(),
            };
            or_lost(gpu, during, e)
        })?;
    // Work on a lost device is dropped without an error: the callback says so.
    match gpu.lost.get() {
        Some(message) => Err(Error::DeviceLost {
            during,
            message: message.clone(),
        }),
        None => Ok(()),
    }
}

/// Reads `bytes` bytes from the start of `buf` back to the host (blocking).
pub fn readback(ctx: &Context, buf: &wgpu::Buffer, bytes: u64) -> Result<Vec<u8>> {
    readback_range(ctx, buf, 0, bytes)
}

/// Reads `bytes` bytes of `buf` from byte `offset` (a multiple of 4) back to the host
/// (blocking).
pub fn readback_range(
    ctx: &Context,
    buf: &wgpu::Buffer,
    offset: u64,
    bytes: u64,
) -> Result<Vec<u8>> {
    let during = "readback";
    if bytes == 0 {
        return Ok(Vec::new());
    }
    let gpu = gpu_of(ctx, during)?;
    let size = binding_size(bytes);
    if !offset.is_multiple_of(4) || offset + size > buf.size() {
        return Err(Error::LengthMismatch {
            what: "readback range",
            expected: (offset + size) as usize,
            actual: buf.size() as usize,
        });
    }
    // Inside the out-of-memory scope of every allocation (a snapshot of a large cache can
    // exceed what the device has left): a typed error, not wgpu's panicking default handler.
    let staging = allocate(ctx, "kvpack readback", size, |device| {
        Ok(device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("kvpack readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        }))
    })?;
    submit_blocking(ctx, during, |enc| {
        enc.copy_buffer_to_buffer(buf, offset, &staging, 0, size);
        Ok(())
    })?;
    let (tx, rx) = std::sync::mpsc::channel();
    staging.map_async(wgpu::MapMode::Read, .., move |r| {
        let _ = tx.send(r);
    });
    gpu.device
        .poll(wgpu::PollType::Wait {
            submission_index: None,
            timeout: None,
        })
        .map_err(|e| Error::Gpu {
            during,
            message: e.to_string(),
        })?;
    rx.recv()
        .map_err(|e| Error::Gpu {
            during,
            message: e.to_string(),
        })?
        .map_err(|e| {
            let e = Error::Gpu {
                during,
                message: e.to_string(),
            };
            or_lost(gpu, during, e)
        })?;
    let out = {
        let view = staging.get_mapped_range(..).map_err(|e| Error::Gpu {
            during,
            message: e.to_string(),
        })?;
        view[..bytes as usize].to_vec()
    };
    staging.unmap();
    Ok(out)
}
