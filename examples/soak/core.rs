//! The soak loop shared by `examples/soak` (a million tokens) and `tests/soak.rs` (a short
//! run): one layer appended chunk by chunk with deterministic K/V, bytes held recorded every
//! `every` tokens with the wgpu buffers alive (when the caller can count them), and attention
//! spot-checked against the CPU reference of the stored words (GPU paths) along the way.
#![allow(dead_code)]

use kvpack::{AttendOptions, Context, Input, KvLayer, Method, PathChoice};

/// One record of the soak.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Tokens appended.
    pub tokens: usize,
    /// Tokens held per KV head (fewer than appended under eviction).
    pub held_tokens: usize,
    /// Bytes allocated ([`kvpack::MemoryReport::held`]).
    pub held: u64,
    /// Bytes in use.
    pub payload: u64,
    /// The same tokens in f16.
    pub f16_bytes: u64,
    /// wgpu buffers alive (all of the device's), when counted.
    pub buffers: Option<usize>,
    /// Worst row's relative L2 error of attention against the CPU reference, when checked.
    pub spot_error: Option<f64>,
}

/// What to run.
pub struct Soak<'a> {
    pub ctx: &'a Context,
    pub path: PathChoice,
    pub method: Method,
    pub heads: usize,
    pub dim: usize,
    pub tokens: usize,
    pub chunk: usize,
    pub every: usize,
    /// Spot-check attention every this many tokens (0: never).
    pub spot_every: usize,
    /// Counts the wgpu buffers alive.
    pub buffers: &'a dyn Fn() -> Option<usize>,
}

/// Deterministic K and V for tokens `[first, first + n)`: per-channel offsets on keys (as
/// real keys have) plus a cheap hash-driven spread, all within f16 range.
pub fn kv(first: usize, n: usize, row: usize) -> (Vec<f32>, Vec<f32>) {
    let h = |i: u64| {
        let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i >> 29);
        ((x.wrapping_mul(0xBF58_476D_1CE4_E5B9) >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let mut k = Vec::with_capacity(n * row);
    let mut v = Vec::with_capacity(n * row);
    for t in first..first + n {
        for c in 0..row {
            let i = (t * row + c) as u64;
            k.push((c % 7) as f32 - 3.0 + h(2 * i));
            v.push(h(2 * i + 1));
        }
    }
    (k, v)
}

/// Runs the soak; returns the samples (one at 0 tokens, then every `every` tokens) and the
/// layer (so that the caller can drop it and count buffers again).
pub fn run(s: &Soak<'_>) -> kvpack::Result<(Vec<Sample>, Box<dyn KvLayer>)> {
    let row = s.heads * s.dim;
    let mut layer = s.method.layer(s.ctx, s.heads, s.dim, s.path)?;
    let mut out = vec![sample(&*layer, s, None)];
    let mut t = 0;
    while t < s.tokens {
        let n = s.chunk.min(s.tokens - t);
        let (k, v) = kv(t, n, row);
        layer.append(Input::F32(&k), Input::F32(&v))?;
        let before = t;
        t += n;
        let spot = s.spot_every > 0 && t / s.spot_every != before / s.spot_every;
        let spot_error = if spot {
            Some(spot_check(&*layer, s)?)
        } else {
            None
        };
        if t / s.every != before / s.every || t == s.tokens {
            out.push(sample(&*layer, s, spot_error));
        }
    }
    Ok((out, layer))
}

fn sample(layer: &dyn KvLayer, s: &Soak<'_>, spot_error: Option<f64>) -> Sample {
    let m = layer.memory();
    Sample {
        tokens: layer.appended(),
        held_tokens: layer.len(),
        held: m.held.total(),
        payload: m.payload.total(),
        f16_bytes: m.f16_bytes,
        buffers: (s.buffers)(),
        spot_error,
    }
}

/// Two query rows (the last positions) against the CPU reference of the stored words.
fn spot_check(layer: &dyn KvLayer, s: &Soak<'_>) -> kvpack::Result<f64> {
    let hq = 2 * s.heads;
    let q: Vec<f32> = kv(layer.len() + 7, 2, hq * s.dim).1;
    let opts = AttendOptions::default();
    let got = layer.attend(&q, hq, &opts)?;
    let want = layer.attend_reference(&q, hq, &opts)?;
    let mut worst = 0f64;
    for (a, b) in got.chunks(s.dim).zip(want.chunks(s.dim)) {
        let num: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
        let den: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum();
        let e = (num / den.max(1e-30)).sqrt();
        worst = if e.is_nan() {
            f64::INFINITY
        } else {
            worst.max(e)
        };
    }
    Ok(worst)
}

/// Counts the live wgpu buffers of a device (`None` where wgpu cannot report them).
pub type BufferCount = Box<dyn Fn() -> Option<usize>>;

/// A GPU context on a device this process created, and a counter of its live wgpu buffers
/// (`wgpu::Instance::generate_report`) net of kvpack's uniform cache, or why there is none.
pub fn gpu_with_buffer_count() -> Result<(Context, BufferCount), String> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle().with_env());
    let adapter = pollster::block_on(instance.request_adapter(&Default::default()))
        .map_err(|e| format!("no GPU adapter: {e}"))?;
    let features =
        adapter.features() & kvpack::context::wanted_features(adapter.get_info().backend);
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("kvpack soak"),
        required_features: features,
        required_limits: adapter.limits(),
        ..Default::default()
    }))
    .map_err(|e| format!("no device: {e}"))?;
    let ctx = Context::from_device(device.clone(), queue).map_err(|e| e.to_string())?;
    let handle = ctx.clone();
    // Net of kvpack's uniform and staging arenas: at most one buffer each that the device
    // keeps across layers and steps (`Context::cached_uniforms`,
    // `Context::staging_arenas_held`), not held by any cache.
    let count = move || {
        let _ = device.poll(wgpu::PollType::Wait {
            submission_index: None,
            timeout: None,
        });
        instance.generate_report().map(|r| {
            r.hub.buffers.num_kept_from_user
                - handle.cached_uniforms()
                - handle.staging_arenas_held()
        })
    };
    Ok((ctx, Box::new(count)))
}
