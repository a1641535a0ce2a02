//! A game's frame loop with a compressed KV cache on the game's own device: every frame the
//! app computes one token's K, V and query into its own buffers with its own compute shader,
//! kvpack appends K and V from those buffers to the compressed cache and attends on it into an
//! output buffer the app owns, and the app consumes the output with a shader of its own, all
//! in one command encoder that the app submits once per frame. Nothing is read back to the
//! host but the app's own timestamps.
//!
//! Prints per-frame GPU time (timestamp queries when the device offers TIMESTAMP_QUERY, else
//! the wall time from submit to completion, and says which) and the bytes the cache holds.
//!
//! `cargo run --release --example frame_loop -- [METHOD] [FRAMES]` (default
//! `kivi:bits=4,group=32,residual=32` and 64 frames; `KVPACK_METHOD` also sets the method).

use kvpack::{AttendOptions, Context, GpuInput, Method, PathChoice};

/// KV heads, query heads and head width of the demo's one layer.
pub const HKV: usize = 2;
pub const HQ: usize = 4;
pub const D: usize = 64;

/// What a run measured.
#[derive(Debug)]
pub struct Report {
    /// Frames run.
    pub frames: usize,
    /// Tokens the cache holds at the end.
    pub tokens: usize,
    /// Bytes the cache holds at the end.
    pub bytes_held: u64,
    /// Whether the cache holds the very words of a cache appended the same values from the
    /// host.
    pub matches_host: bool,
    /// Largest |difference| between the last frame's attention (recorded into the app's
    /// buffer) and the host-appended cache's `attend` of the same query.
    pub max_abs_err: f32,
    /// How frames were timed.
    pub timing: &'static str,
}

// The app's own kernels. `produce`: K, V [HKV·D] and q [HQ·D] of token `frame`, exact small
// multiples of 1/512 (so a host twin can recompute them bit for bit). `consume`: the app
// reads the attention output (here: adds it into a running sum).
const APP_WGSL: &str = r#"
struct Frame { index: u32, kv: u32, q: u32, _pad: u32 }
@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(1) var<storage, read_write> k: array<f32>;
@group(0) @binding(2) var<storage, read_write> v: array<f32>;
@group(0) @binding(3) var<storage, read_write> q: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<storage, read_write> sum: array<f32>;

fn value(seed: u32) -> f32 {
    var x = seed * 747796405u + 2891336453u;
    x = ((x >> ((x >> 28u) + 4u)) ^ x) * 277803737u;
    x = (x >> 22u) ^ x;
    return f32(i32(x % 2001u) - 1000) * (1.0 / 512.0);
}

@compute @workgroup_size(64)
fn produce(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    let base = frame.index * 3u * 65536u;
    if (i < frame.kv) {
        k[i] = value(base + i);
        v[i] = value(base + 65536u + i);
    }
    if (i < frame.q) {
        q[i] = value(base + 131072u + i);
    }
}

@compute @workgroup_size(64)
fn consume(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < frame.q) {
        sum[i] = sum[i] + out[i];
    }
}
"#;

/// The host twin of the app's `value` (for checking the example's output).
fn value(seed: u32) -> f32 {
    let mut x = seed.wrapping_mul(747_796_405).wrapping_add(2_891_336_453);
    x = ((x >> ((x >> 28) + 4)) ^ x).wrapping_mul(277_803_737);
    x ^= x >> 22;
    ((x % 2001) as i32 - 1000) as f32 * (1.0 / 512.0)
}

fn token(frame: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let base = frame as u32 * 3 * 65536;
    let kv = HKV * D;
    (
        (0..kv as u32).map(|i| value(base + i)).collect(),
        (0..kv as u32).map(|i| value(base + 65536 + i)).collect(),
        (0..(HQ * D) as u32)
            .map(|i| value(base + 131072 + i))
            .collect(),
    )
}

/// Runs `frames` frames of `method` on the app's `device` and `queue` (printing a line per
/// frame when `print`), and checks the last frame's attention against the host-side call.
pub fn run(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    method: &str,
    frames: usize,
    print: bool,
) -> Result<Report, Box<dyn std::error::Error>> {
    // kvpack on the app's device (clones of its handles; kvpack reads features and limits).
    let ctx = Context::from_device(device.clone(), queue.clone())?;
    let mut cache = Method::parse(method)?.layer(&ctx, HKV, D, PathChoice::Auto)?;
    // Every pipeline the frames will use, built before the first one (no shader compilation
    // on frame 1; `cache.prepare_async()` would build them on kvpack's thread meanwhile).
    cache.prepare()?;
    if print {
        println!("{}", cache.describe());
    }

    // The app's buffers.
    let storage = |label, floats: usize, extra: wgpu::BufferUsages| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: (floats * 4) as u64,
            usage: wgpu::BufferUsages::STORAGE | extra,
            mapped_at_creation: false,
        })
    };
    let none = wgpu::BufferUsages::empty();
    let k = storage("app k", HKV * D, none);
    let v = storage("app v", HKV * D, none);
    let q = storage("app q", HQ * D, none);
    let out = storage("app attention", HQ * D, wgpu::BufferUsages::COPY_SRC);
    let sum = storage("app sum", HQ * D, none);
    let frame_uniform = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("app frame"),
        size: 16,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("app kernels"),
        source: wgpu::ShaderSource::Wgsl(APP_WGSL.into()),
    });
    let entry = |binding: u32, ty: wgpu::BufferBindingType| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    };
    let mut entries = vec![entry(0, wgpu::BufferBindingType::Uniform)];
    entries.extend((1..6).map(|i| entry(i, wgpu::BufferBindingType::Storage { read_only: false })));
    let bind_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("app kernels"),
        entries: &entries,
    });
    let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some("app kernels"),
        bind_group_layouts: &[Some(&bind_layout)],
        immediate_size: 0,
    });
    let pipeline = |entry: &str| {
        device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry),
            layout: Some(&layout),
            module: &module,
            entry_point: Some(entry),
            compilation_options: Default::default(),
            cache: None,
        })
    };
    let (produce, consume) = (pipeline("produce"), pipeline("consume"));
    let group = || {
        let buffers = [&frame_uniform, &k, &v, &q, &out, &sum];
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &bind_layout,
            entries: &entries,
        })
    };
    let bind_group = group();

    // GPU timing: timestamps at the start of the app's first pass and the end of its last.
    let timestamps = device.features().contains(wgpu::Features::TIMESTAMP_QUERY);
    let queries = timestamps.then(|| {
        let set = device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("app frame time"),
            ty: wgpu::QueryType::Timestamp,
            count: 2,
        });
        let resolve = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("app timestamps"),
            size: 16,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let read = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("app timestamps (read)"),
            size: 16,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        (set, resolve, read)
    });
    let timing = if timestamps {
        "GPU timestamps"
    } else {
        "wall time, submit to done (no TIMESTAMP_QUERY)"
    };
    if print {
        println!("{method}: {frames} frames, timed by {timing}");
    }

    let opts = AttendOptions::default();
    let groups = |n: usize| n.div_ceil(64) as u32;
    for f in 0..frames {
        let header = [f as u32, (HKV * D) as u32, (HQ * D) as u32, 0];
        queue.write_buffer(&frame_uniform, 0, bytemuck::cast_slice(&header));
        let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("app frame"),
        });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("app produce"),
                timestamp_writes: queries.as_ref().map(|(set, ..)| {
                    wgpu::ComputePassTimestampWrites {
                        query_set: set,
                        beginning_of_pass_write_index: Some(0),
                        end_of_pass_write_index: None,
                    }
                }),
            });
            pass.set_pipeline(&produce);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(groups(HQ * D), 1, 1);
        }
        // kvpack records into the app's encoder: the append from the app's buffers, then
        // attention of the app's query into the app's output buffer.
        cache.encode_append_gpu(&mut enc, GpuInput::f32(&k, 0, 1), GpuInput::f32(&v, 0, 1))?;
        cache.encode_attend(&mut enc, &q, 1, HQ, &opts, &out)?;
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("app consume"),
                timestamp_writes: queries.as_ref().map(|(set, ..)| {
                    wgpu::ComputePassTimestampWrites {
                        query_set: set,
                        beginning_of_pass_write_index: None,
                        end_of_pass_write_index: Some(1),
                    }
                }),
            });
            pass.set_pipeline(&consume);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(groups(HQ * D), 1, 1);
        }
        if let Some((set, resolve, read)) = &queries {
            enc.resolve_query_set(set, 0..2, resolve, 0);
            enc.copy_buffer_to_buffer(resolve, 0, read, 0, 16);
        }
        let started = std::time::Instant::now();
        let index = queue.submit([enc.finish()]);
        device.poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        })?;
        let ms = match &queries {
            Some((_, _, read)) => {
                read.map_async(wgpu::MapMode::Read, .., |r| r.expect("map timestamps"));
                device.poll(wgpu::PollType::Wait {
                    submission_index: None,
                    timeout: None,
                })?;
                let t: [u64; 2] = {
                    let view = read.get_mapped_range(..)?;
                    bytemuck::pod_read_unaligned(&view[..16])
                };
                read.unmap();
                t[1].saturating_sub(t[0]) as f64 * f64::from(queue.get_timestamp_period()) / 1e6
            }
            None => started.elapsed().as_secs_f64() * 1e3,
        };
        if print {
            println!(
                "frame {f:3}: {ms:7.3} ms, {} tokens, {} bytes held",
                cache.len(),
                cache.memory().held.total()
            );
        }
    }
    // Every frame's append was checked on the GPU; the app syncs when it likes (here once).
    cache.sync()?;

    // The example checks itself (an app would just use `out`): a reference cache appended
    // from the host with the same values (recomputed here) must hold the same words, and the
    // last frame's attention must match its host-side call.
    let mut max_abs_err = 0f32;
    let mut reference = Method::parse(method)?.layer(&ctx, HKV, D, PathChoice::Auto)?;
    let (mut ks, mut vs) = (Vec::new(), Vec::new());
    for f in 0..frames {
        let (k, v, _) = token(f);
        ks.extend(k);
        vs.extend(v);
    }
    reference.append(kvpack::Input::F32(&ks), kvpack::Input::F32(&vs))?;
    let matches_host = reference.snapshot()? == cache.snapshot()?;
    if frames > 0 {
        let got = read_f32(device, queue, &out, HQ * D)?;
        let (_, _, q_last) = token(frames - 1);
        let want = reference.attend(&q_last, HQ, &opts)?;
        max_abs_err = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
    }
    let report = Report {
        frames,
        tokens: cache.len(),
        bytes_held: cache.memory().held.total(),
        matches_host,
        max_abs_err,
        timing,
    };
    if print {
        println!(
            "{} tokens in {} bytes (f16 would take {:.2}x that); same words as host appends: {}; \
             last frame's attention vs the host call: max |diff| {}",
            report.tokens,
            report.bytes_held,
            cache.memory().ratio().unwrap_or(0.0),
            report.matches_host,
            report.max_abs_err
        );
    }
    Ok(report)
}

fn read_f32(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    buf: &wgpu::Buffer,
    n: usize,
) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("app readback"),
        size: (n * 4) as u64,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(buf, 0, &staging, 0, (n * 4) as u64);
    queue.submit([enc.finish()]);
    staging.map_async(wgpu::MapMode::Read, .., |r| r.expect("map"));
    device.poll(wgpu::PollType::Wait {
        submission_index: None,
        timeout: None,
    })?;
    let out = bytemuck::pod_collect_to_vec(&staging.get_mapped_range(..)?[..n * 4]);
    staging.unmap();
    Ok(out)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let method = args
        .first()
        .cloned()
        .or_else(|| std::env::var("KVPACK_METHOD").ok())
        .unwrap_or_else(|| "kivi:bits=4,group=32,residual=32".into());
    let frames = args.get(1).map_or(Ok(64), |s| s.parse::<usize>())?;

    // The application creates its device as it always does.
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle().with_env());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))
    .map_err(|e| format!("this example needs a GPU adapter (on Linux, lavapipe will do): {e}"))?;
    let features = adapter.features()
        & (wgpu::Features::SUBGROUP | wgpu::Features::SHADER_F16 | wgpu::Features::TIMESTAMP_QUERY);
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("my game's device"),
        required_features: features,
        required_limits: adapter.limits(),
        ..Default::default()
    }))?;
    let report = run(&device, &queue, &method, frames, true)?;
    if report.max_abs_err > 1e-3 {
        return Err(format!(
            "attention differs from the host call: {}",
            report.max_abs_err
        )
        .into());
    }
    Ok(())
}
