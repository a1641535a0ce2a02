//! An L2 flush that the kernels under measurement cannot change: a bench-owned compute kernel
//! reads a buffer of 2× the assumed L2 and writes one word per invocation (1 MiB in all), so
//! the L2 ends up full of someone else's clean lines and the GPU has been busy right before
//! the timed call. (gpu_attend flushed with one of kvpack's own attention calls before
//! 2026-12-03: a measuring build that removed the tile loop or the loads also removed most
//! of the flush's work, and its runs became unstable: benches/results/h200-2026-12-03-diag.)

use kvpack::{Context, Error, gpu};

const SHADER: &str = "
@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>) {
    let stride = n.x * 256u;
    var acc = 0u;
    for (var i = gid.x; i < arrayLength(&src); i += stride) {
        let x = src[i];
        acc ^= x.x ^ x.y ^ x.z ^ x.w;
    }
    dst[gid.x] = acc;
}
";

/// Workgroups of the flush (256 invocations each; each reads every `WORKGROUPS · 256`-th
/// 16-byte word).
const WORKGROUPS: u32 = 1024;

/// The flush kernel, its 2×L2 source and its output.
pub struct ReadFlush {
    pipeline: wgpu::ComputePipeline,
    group: wgpu::BindGroup,
    /// Bytes read per flush.
    pub bytes: u64,
    /// Flushes per [`ReadFlush::spin`] submission, once measured.
    spin_n: std::cell::Cell<Option<(f64, u32)>>,
}

impl ReadFlush {
    /// A flush reading `bytes` (rounded up to 16) of a buffer filled with a pattern.
    pub fn new(ctx: &Context, bytes: u64) -> kvpack::Result<Self> {
        let (Some(device), Some(queue)) = (ctx.device(), ctx.queue()) else {
            return Err(Error::Config("the L2 flush needs a GPU context".into()));
        };
        let bytes = bytes.div_ceil(16) * 16;
        let src = gpu::storage_buffer(ctx, "bench L2 flush source", bytes)?;
        // A pattern, not zeros: nothing may treat the lines as compressible.
        let chunk: Vec<u32> = (0..(1u32 << 20))
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let chunk: &[u8] = bytemuck::cast_slice(&chunk);
        let mut at = 0u64;
        while at < bytes {
            let n = (bytes - at).min(chunk.len() as u64);
            queue.write_buffer(&src, at, &chunk[..n as usize]);
            at += n;
        }
        let dst = gpu::storage_buffer(
            ctx,
            "bench L2 flush output",
            u64::from(WORKGROUPS) * 256 * 4,
        )?;
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("bench L2 flush"),
            source: wgpu::ShaderSource::Wgsl(SHADER.into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("bench L2 flush"),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("bench L2 flush"),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: src.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: dst.as_entire_binding(),
                },
            ],
        });
        Ok(Self {
            pipeline,
            group,
            bytes,
            spin_n: std::cell::Cell::new(None),
        })
    }

    /// Runs the flush in a submission of its own and waits for it.
    pub fn run(&self, ctx: &Context) -> kvpack::Result<()> {
        self.run_n(ctx, 1)
    }

    /// `n` flushes back to back in one submission, waited for.
    fn run_n(&self, ctx: &Context, n: u32) -> kvpack::Result<()> {
        gpu::submit_blocking(ctx, "bench L2 flush", |enc| {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("bench L2 flush"),
                timestamp_writes: None,
            });
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &self.group, &[]);
            for _ in 0..n {
                pass.dispatch_workgroups(WORKGROUPS, 1, 1);
            }
            Ok(())
        })
    }

    /// Keeps the GPU busy for about `ms` milliseconds of wall time (flushes back to back in one
    /// submission), so that a round of short timed calls, each submitted alone and waited
    /// for, does not start on a GPU that idled long enough to lower its clock. (The H100 and
    /// H200 stepped their graphics clock between 345 and 1980 MHz inside single runs:
    /// benches/results/h200-2026-12-06-clamps.) The number of flushes is measured once, from
    /// 64 of them in one submission. Returns that number.
    pub fn spin(&self, ctx: &Context, ms: f64) -> kvpack::Result<u32> {
        if ms <= 0.0 {
            return Ok(0);
        }
        let n = match self.spin_n.get() {
            Some((m, n)) if m == ms => n,
            _ => {
                let t = std::time::Instant::now();
                self.run_n(ctx, 64)?;
                let per_ms = t.elapsed().as_secs_f64() * 1e3 / 64.0;
                let n = (ms / per_ms.max(1e-3)).ceil().clamp(1.0, 1e5) as u32;
                self.spin_n.set(Some((ms, n)));
                n
            }
        };
        self.run_n(ctx, n)?;
        Ok(n)
    }
}
