//! Appends from the application's own GPU buffers (`KvLayer::append_gpu`,
//! `KvLayer::encode_append_gpu`, `kvpack::GpuInput`), one body per (codec × path)
//! (`codec_tests!`):
//!
//! - parity: f16 and f32 input at non-zero (and not word-aligned) offsets, in ragged chunks
//!   across block boundaries, blocking and recorded (several appends in one encoder, also
//!   alternating with recorded host appends across a new staging arena), stores
//!   bit-identical words and gives bit-identical attention to host appends of the same values;
//! - bad values: the blocking GPU append returns the host append's very error (NaN, ±Inf,
//!   beyond f16, a vector norm the codec cannot store) and changes nothing; a recorded one is
//!   reported by `sync()`, which rolls the layer back (appends recorded after it included) to
//!   exactly the words it held, after which the same appends store what a layer that never
//!   saw the bad input stores;
//! - bad buffers (no STORAGE usage, misaligned offsets, too small, another device, K and V of
//!   different lengths): typed errors before anything runs or is recorded, nothing changes,
//!   and the application's encoder stays usable;
//! - the CPU path refuses device input with `PathUnavailable`;
//! - the `frame_loop` example's logic runs a few frames.

mod common;

#[allow(dead_code)]
#[path = "../examples/frame_loop.rs"]
mod frame_loop;

use common::{Target, encoder, submit};
use half::f16;
use kvpack::{AttendOptions, Context, Error, GpuInput, Input, KvLayer};
use rand::Rng;

const H: usize = 2;
const D: usize = 40;
const ROW: usize = H * D;

fn layer(ctx: &Context, t: &Target, spec: &str) -> Box<dyn KvLayer> {
    common::parse_method(spec, H, D)
        .and_then(|m| m.layer(ctx, H, D, t.path()))
        .unwrap_or_else(|e| panic!("{} {spec}: layer: {e}", t.name()))
}

fn random(rng: &mut impl Rng, tokens: usize) -> (Vec<f32>, Vec<f32>) {
    let offs: Vec<f32> = (0..ROW).map(|_| rng.random_range(-3.0..3.0)).collect();
    let k = (0..tokens * ROW)
        .map(|i| offs[i % ROW] + rng.random_range(-1.0f32..1.0))
        .collect();
    let v = (0..tokens * ROW)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    (k, v)
}

/// An application buffer holding `pad` zero bytes, then `data`, then a few more bytes.
fn app_buffer(ctx: &Context, pad: usize, data: &[u8], usage: wgpu::BufferUsages) -> wgpu::Buffer {
    let device = ctx.device().expect("device");
    let size = (pad + data.len() + 8).div_ceil(4) * 4;
    let buf = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("app input"),
        size: size as u64,
        usage: usage | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: true,
    });
    {
        let mut view = buf.get_mapped_range_mut(..).expect("map");
        let mut bytes = vec![0u8; size];
        bytes[pad..pad + data.len()].copy_from_slice(data);
        view.copy_from_slice(&bytes);
    }
    buf.unmap();
    buf
}

fn storage() -> wgpu::BufferUsages {
    wgpu::BufferUsages::STORAGE
}

fn f16s(x: &[f32]) -> Vec<f16> {
    x.iter().map(|&v| f16::from_f32(v)).collect()
}

/// Ragged chunks of `n` tokens (1, small, across block and window boundaries).
fn chunks(n: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut left = n;
    for c in [1usize, 7, 33, 2, 64, 5, 38, 17, 1, 29].into_iter().cycle() {
        if left == 0 {
            break;
        }
        out.push(c.min(left));
        left -= c.min(left);
    }
    out
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// How a test appends from the app's buffers.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// `append_gpu`, one call per chunk.
    Blocking,
    /// `encode_append_gpu`, one encoder (and submit) per chunk.
    Recorded,
    /// `encode_append_gpu`, every chunk in one encoder.
    OneEncoder,
    /// Every chunk in one encoder, every other one from host values (`encode_append`: while a
    /// recorded device append is unsynced its window rows are written conditionally, read
    /// from a slot of the device's staging arena), the arena dropped halfway (slots recorded
    /// before stay the old buffer's).
    Mixed,
}

/// Appends `k`, `v` (f32 values) from app buffers as `dtype`, chunk by chunk, K at byte
/// offset `pad_k` and V at `pad_v` of their buffers. A configuration whose recorded append
/// needs the blocking status check is refused with nothing changed, then appended blocking.
fn append_from_gpu(
    ctx: &Context,
    l: &mut dyn KvLayer,
    k: &[f32],
    v: &[f32],
    dtype: kvpack::GpuDtype,
    (pad_k, pad_v): (usize, usize),
    mode: Mode,
) {
    let bytes = |x: &[f32]| -> Vec<u8> {
        match dtype {
            kvpack::GpuDtype::F16 => bytemuck::cast_slice(&f16s(x)).to_vec(),
            kvpack::GpuDtype::F32 => bytemuck::cast_slice(x).to_vec(),
            other => panic!("no test input for {other:?}"),
        }
    };
    let kb = app_buffer(ctx, pad_k, &bytes(k), storage());
    let vb = app_buffer(ctx, pad_v, &bytes(v), storage());
    let es = dtype.size() as usize;
    let mut at = 0;
    let mut shared = encoder(ctx);
    let sizes = chunks(k.len() / ROW);
    for (i, &c) in sizes.iter().enumerate() {
        let ki = GpuInput::new(&kb, (pad_k + at * ROW * es) as u64, dtype, c);
        let vi = GpuInput::new(&vb, (pad_v + at * ROW * es) as u64, dtype, c);
        if matches!(mode, Mode::Mixed) && i == sizes.len() / 2 {
            ctx.clear_staging();
        }
        match mode {
            Mode::Blocking => l.append_gpu(ki, vi).expect("append_gpu"),
            Mode::Mixed if i % 2 == 1 => {
                let (kh, vh) = (&k[at * ROW..(at + c) * ROW], &v[at * ROW..(at + c) * ROW]);
                match l.encode_append(&mut shared, Input::F32(kh), Input::F32(vh)) {
                    Ok(()) => {}
                    Err(Error::Config(m)) if m.contains("status check") => {
                        submit(ctx, std::mem::replace(&mut shared, encoder(ctx)));
                        l.sync().expect("sync");
                        l.append(Input::F32(kh), Input::F32(vh)).expect("append");
                    }
                    Err(e) => panic!("encode_append: {e}"),
                }
            }
            Mode::Recorded | Mode::OneEncoder | Mode::Mixed => {
                let before = l.len();
                let mut own = encoder(ctx);
                let enc = match mode {
                    Mode::Recorded => &mut own,
                    _ => &mut shared,
                };
                match l.encode_append_gpu(enc, ki, vi) {
                    Ok(()) => {}
                    Err(Error::Config(m)) if m.contains("status check") => {
                        assert_eq!(l.len(), before, "a refused append changed the length");
                        // What is recorded runs before the blocking append reads the layer.
                        submit(ctx, std::mem::replace(&mut shared, encoder(ctx)));
                        l.append_gpu(ki, vi).expect("append_gpu");
                    }
                    Err(e) => panic!("encode_append_gpu: {e}"),
                }
                if matches!(mode, Mode::Recorded) {
                    submit(ctx, own);
                }
            }
        }
        at += c;
    }
    submit(ctx, shared);
    l.sync().expect("sync");
}

fn append_host(l: &mut dyn KvLayer, k: &[f32], v: &[f32]) {
    let mut at = 0;
    for c in chunks(k.len() / ROW) {
        l.append(
            Input::F32(&k[at * ROW..(at + c) * ROW]),
            Input::F32(&v[at * ROW..(at + c) * ROW]),
        )
        .expect("append");
        at += c;
    }
}

/// The CPU path refuses device input (with a buffer of the shared GPU device, when there is
/// one).
fn cpu_refuses(t: &Target, spec: &str) {
    let Ok(gpu) = common::gpu_context() else {
        return;
    };
    let mut l = layer(t.ctx(), t, spec);
    let buf = app_buffer(&gpu, 0, &[0u8; ROW * 4], storage());
    let i = GpuInput::f32(&buf, 0, 1);
    assert!(matches!(
        l.append_gpu(i, i),
        Err(Error::PathUnavailable { .. })
    ));
    let mut enc = encoder(&gpu);
    assert!(matches!(
        l.encode_append_gpu(&mut enc, i, i),
        Err(Error::PathUnavailable { .. })
    ));
    assert!(l.sync().is_ok());
    assert_eq!(l.len(), 0);
}

fn gpu_append_parity(t: &Target, spec: &str) {
    if !t.is_gpu() {
        return cpu_refuses(t, spec);
    }
    let ctx = t.ctx();
    let mut rng = common::rng("gpu_append_parity");
    let n = 200;
    let (k, v) = random(&mut rng, n);
    let mut host = layer(ctx, t, spec);
    append_host(&mut *host, &k, &v);
    let want = host.snapshot().expect("snapshot");
    let hq = 2 * H;
    let q: Vec<f32> = (0..3 * hq * D)
        .map(|_| rng.random_range(-1.5f32..1.5))
        .collect();
    let opts = AttendOptions::default();
    let want_att = bits(&host.attend(&q, hq, &opts).expect("attend"));
    use kvpack::GpuDtype::{F16, F32};
    for (dtype, pads, mode) in [
        (F32, (12, 260), Mode::Blocking),
        (F16, (6, 2), Mode::Recorded),
        (F32, (4, 0), Mode::OneEncoder),
        (F16, (0, 514), Mode::Blocking),
        (F32, (8, 4), Mode::Mixed),
    ] {
        let mut l = layer(ctx, t, spec);
        append_from_gpu(ctx, &mut *l, &k, &v, dtype, pads, mode);
        let what = format!("{} {spec} {dtype:?} {pads:?} {mode:?}", t.name());
        assert_eq!(l.len(), n, "{what}: length");
        assert!(
            l.snapshot().expect("snapshot") == want,
            "{what}: stored words differ from host appends"
        );
        assert_eq!(l.memory(), host.memory(), "{what}: memory");
        assert!(
            bits(&l.attend(&q, hq, &opts).expect("attend")) == want_att,
            "{what}: attention differs from host appends"
        );
    }
}

codec_tests!(gpu_append_parity);

/// The same values through the host and through app buffers: the same error, nothing changed.
fn gpu_append_bad_values(t: &Target, spec: &str) {
    if !t.is_gpu() {
        return;
    }
    let ctx = t.ctx();
    let mut rng = common::rng("gpu_append_bad_values");
    let t0 = 45;
    let (k, v) = random(&mut rng, t0 + 40);
    let mut cases: Vec<(&str, Vec<f32>, Vec<f32>)> = Vec::new();
    let (mut k1, mut v1) = (k[t0 * ROW..].to_vec(), v[t0 * ROW..].to_vec());
    k1[3 * ROW + 17] = f32::NAN;
    k1[20 * ROW + 1] = f32::INFINITY;
    cases.push(("NaN in k", k1.clone(), v1.clone()));
    k1 = k[t0 * ROW..].to_vec();
    v1[31 * ROW + 5] = -70000.0;
    v1[35 * ROW] = 65520.0;
    cases.push(("beyond f16 in v", k1.clone(), v1.clone()));
    v1 = v[t0 * ROW..].to_vec();
    v1[2 * ROW + 7] = 65519.0; // rounds to 65504: fine on its own
    for x in &mut k1[9 * ROW + D..9 * ROW + 2 * D] {
        *x = 30000.0; // a head whose norm f16 cannot hold
    }
    cases.push(("a large key norm", k1.clone(), v1.clone()));
    for (name, bk, bv) in &cases {
        for dtype in [kvpack::GpuDtype::F32, kvpack::GpuDtype::F16] {
            let what = format!("{} {spec} {name} {dtype:?}", t.name());
            let to_bytes = |x: &[f32]| -> Vec<u8> {
                match dtype {
                    kvpack::GpuDtype::F16 => bytemuck::cast_slice(&f16s(x)).to_vec(),
                    kvpack::GpuDtype::F32 => bytemuck::cast_slice(x).to_vec(),
                    other => panic!("no test input for {other:?}"),
                }
            };
            // The host's verdict on the same values (f16 input: rounded first, as the app's
            // f16 buffer holds them).
            let mut host = layer(ctx, t, spec);
            append_host(&mut *host, &k[..t0 * ROW], &v[..t0 * ROW]);
            let before = host.snapshot().expect("snapshot");
            let mem = host.memory();
            let (hk, hv) = (f16s(bk), f16s(bv));
            let host_err = match dtype {
                kvpack::GpuDtype::F32 => host.append(Input::F32(bk), Input::F32(bv)),
                kvpack::GpuDtype::F16 => host.append(Input::F16(&hk), Input::F16(&hv)),
                other => panic!("no host append for {other:?}"),
            }
            .err()
            .map(|e| e.to_string());
            let kb = app_buffer(ctx, 8, &to_bytes(bk), storage());
            let vb = app_buffer(ctx, 4, &to_bytes(bv), storage());
            let n = bk.len() / ROW;
            let (ki, vi) = (
                GpuInput::new(&kb, 8, dtype, n),
                GpuInput::new(&vb, 4, dtype, n),
            );
            // Blocking: the host's error, nothing changed.
            let mut l = layer(ctx, t, spec);
            append_host(&mut *l, &k[..t0 * ROW], &v[..t0 * ROW]);
            let got = l.append_gpu(ki, vi).err().map(|e| e.to_string());
            assert_eq!(got, host_err, "{what}: blocking append_gpu's verdict");
            let Some(host_err) = host_err else {
                // Accepted by both: the same words.
                assert!(
                    l.snapshot().expect("snapshot") == host.snapshot().expect("snapshot"),
                    "{what}: accepted input stored other words"
                );
                continue;
            };
            assert_eq!(l.len(), t0, "{what}");
            assert_eq!(l.memory(), mem, "{what}");
            assert!(l.snapshot().expect("snapshot") == before, "{what}");
            // Recorded: the bad append, then a good one, in one encoder; sync reports and
            // rolls back both.
            let good = app_buffer(ctx, 0, bytemuck::cast_slice(&k[..30 * ROW]), storage());
            let mut enc = encoder(ctx);
            match l.encode_append_gpu(&mut enc, ki, vi) {
                Err(Error::Config(m)) if m.contains("status check") => continue,
                r => r.expect("encode_append_gpu"),
            }
            let g = GpuInput::f32(&good, 0, 30);
            l.encode_append_gpu(&mut enc, g, g)
                .expect("encode_append_gpu (good)");
            // A host append recorded after it is rolled back too (its window writes wait on
            // the same status).
            let five = &k[..5 * ROW];
            match l.encode_append(&mut enc, Input::F32(five), Input::F32(five)) {
                Ok(()) => {}
                Err(Error::Config(m)) if m.contains("status check") => {
                    l.encode_append(&mut enc, Input::F32(&five[..0]), Input::F32(&five[..0]))
                        .expect("empty append");
                    l.encode_append_gpu(
                        &mut enc,
                        GpuInput::f32(&good, 0, 5),
                        GpuInput::f32(&good, 0, 5),
                    )
                    .expect("encode_append_gpu (good)");
                }
                Err(e) => panic!("{what}: encode_append: {e}"),
            }
            submit(ctx, enc);
            assert_eq!(l.len(), t0 + n + 35, "{what}: counted until the sync");
            assert_eq!(
                l.snapshot().err().map(|e| e.to_string()),
                Some(host_err.clone()),
                "{what}: snapshot before the sync"
            );
            assert_eq!(
                l.sync().err().map(|e| e.to_string()),
                Some(host_err.clone()),
                "{what}: sync"
            );
            assert_eq!(l.len(), t0, "{what}: rolled back");
            assert!(
                l.snapshot().expect("snapshot") == before,
                "{what}: words after the rollback"
            );
            assert_eq!(l.memory().payload, mem.payload, "{what}");
            l.sync().expect("a second sync has nothing to report");
            // The layer goes on as if the bad appends never happened.
            let mut enc = encoder(ctx);
            l.encode_append_gpu(&mut enc, g, g).expect("encode again");
            submit(ctx, enc);
            l.sync().expect("sync");
            host.append(Input::F32(&k[..30 * ROW]), Input::F32(&k[..30 * ROW]))
                .expect("host append");
            assert!(
                l.snapshot().expect("snapshot") == host.snapshot().expect("snapshot"),
                "{what}: words after appending again"
            );
        }
    }
}

codec_tests!(gpu_append_bad_values);

/// `n` devices of one new wgpu instance, with no optional feature (no SUBGROUP, no
/// TIMESTAMP_QUERY), or `None` after a visible skip.
fn own_devices(test: &str, n: usize) -> Option<Vec<(wgpu::Device, wgpu::Queue)>> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle().with_env());
    let Ok(adapter) =
        pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))
    else {
        common::skip(test, "no adapter");
        return None;
    };
    Some(
        (0..n)
            .map(|_| {
                pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
                    required_limits: adapter.limits(),
                    ..Default::default()
                }))
                .expect("device")
            })
            .collect(),
    )
}

/// A bad-buffer case: its name, K, V and what the error must be.
type BadCase<'a> = (&'static str, GpuInput<'a>, GpuInput<'a>, fn(&Error) -> bool);

/// Bad buffers: typed errors, nothing stored changes, the app's encoder stays usable.
#[test]
fn gpu_append_bad_buffers() {
    // Two devices of one wgpu instance: the layer on the first, a foreign buffer on the
    // second (wgpu validates a buffer's device within an instance; a buffer of another
    // instance is beyond what its public API can tell).
    let Some(mut devices) = own_devices("gpu_append_bad_buffers", 2) else {
        return;
    };
    let (db, qb) = devices.pop().expect("device");
    let (da, qa) = devices.pop().expect("device");
    let ctx = &Context::from_device(da, qa).expect("context");
    let other = &Context::from_device(db, qb).expect("context");
    let t = Target::Wgsl(ctx.clone(), kvpack::PathChoice::WgslWorkgroup);
    let spec = "kivi:bits=4,group=32,residual=32";
    let mut rng = common::rng("gpu_append_bad_buffers");
    let (k, v) = random(&mut rng, 60);
    let mut l = layer(ctx, &t, spec);
    append_host(&mut *l, &k[..40 * ROW], &v[..40 * ROW]);
    let snap = l.snapshot().expect("snapshot");
    let mem = l.memory();
    let data: &[u8] = bytemuck::cast_slice(&k[40 * ROW..]);
    let good = app_buffer(ctx, 0, data, storage());
    let uniform_only = app_buffer(ctx, 0, data, wgpu::BufferUsages::UNIFORM);
    let foreign = app_buffer(other, 0, data, storage());
    let n = 20;
    let f32_in = |b, off| GpuInput::f32(b, off, n);
    let cases: Vec<BadCase<'_>> = vec![
        (
            "no STORAGE usage",
            f32_in(&uniform_only, 0),
            f32_in(&good, 0),
            |e| matches!(e, Error::Config(m) if m.contains("STORAGE")),
        ),
        (
            "f32 at a 2-byte offset",
            f32_in(&good, 2),
            f32_in(&good, 0),
            |e| matches!(e, Error::Shape { what: "k", .. }),
        ),
        (
            "f16 at an odd offset",
            f32_in(&good, 0),
            GpuInput::f16(&good, 1, n),
            |e| matches!(e, Error::Shape { what: "v", .. }),
        ),
        ("past the end", f32_in(&good, 16), f32_in(&good, 0), |e| {
            matches!(e, Error::LengthMismatch { what: "k", .. })
        }),
        (
            "too many tokens",
            f32_in(&good, 0),
            GpuInput::f32(&good, 0, n + 1),
            |e| matches!(e, Error::Shape { what: "v", .. }),
        ),
        (
            "another device's buffer",
            f32_in(&good, 0),
            f32_in(&foreign, 0),
            |e| matches!(e, Error::Config(m) if m.contains("device")),
        ),
    ];
    let mut enc = encoder(ctx);
    for (name, ki, vi, ok) in &cases {
        let e = l.append_gpu(*ki, *vi).expect_err(name);
        assert!(ok(&e), "{name}: append_gpu gave {e:?}");
        let e = l.encode_append_gpu(&mut enc, *ki, *vi).expect_err(name);
        assert!(ok(&e), "{name}: encode_append_gpu gave {e:?}");
        assert_eq!(l.len(), 40, "{name}");
        assert_eq!(l.memory(), mem, "{name}");
    }
    // The encoder the refused calls saw still records and submits.
    l.encode_append_gpu(&mut enc, f32_in(&good, 0), f32_in(&good, 0))
        .expect("a good append after the refused ones");
    submit(ctx, enc);
    l.sync().expect("sync");
    assert_eq!(l.len(), 40 + n);
    let mut host = layer(ctx, &t, spec);
    append_host(&mut *host, &k[..40 * ROW], &v[..40 * ROW]);
    let same = &k[40 * ROW..];
    host.append(Input::F32(same), Input::F32(same))
        .expect("append");
    assert!(l.snapshot().expect("snapshot") == host.snapshot().expect("snapshot"));
    assert!(snap.tokens == 40);
    // An input range beyond one storage binding: a typed Limit error (split the append).
    let small = ctx.with_max_storage_binding_size(16 * 1024).expect("small");
    let mut l = layer(&small, &t, spec);
    let big = app_buffer(ctx, 0, bytemuck::cast_slice(&k), storage());
    let e = l
        .append_gpu(GpuInput::f32(&big, 0, 60), GpuInput::f32(&big, 0, 60))
        .expect_err("beyond a binding");
    assert!(matches!(e, Error::Limit { .. }), "{e:?}");
    assert_eq!(l.len(), 0);
    l.append_gpu(GpuInput::f32(&big, 0, 40), GpuInput::f32(&big, 0, 40))
        .expect("within a binding");
    assert_eq!(l.len(), 40);
}

/// The f32 → f16 rounding on the GPU is the host's, bit for bit: ties to even, subnormals,
/// the edge of f16's range, signed zeros, and many random bit patterns (the f16 codec stores
/// the rounded rows as they are).
fn gpu_append_rounding(t: &Target) {
    if !t.is_gpu() {
        return;
    }
    let ctx = t.ctx();
    let mut rng = common::rng("gpu_append_rounding");
    let mut x: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        65504.0,
        -65504.0,
        65519.99,
        -65519.99,
        65505.0,
        65519.0,
        1.0 + 2f32.powi(-11),       // a tie: to even (1.0)
        1.0 + 3.0 * 2f32.powi(-11), // a tie: to even (up)
        2f32.powi(-14),
        2f32.powi(-15),
        2f32.powi(-24),
        2f32.powi(-25),
        -2f32.powi(-25),
        2f32.powi(-25) * 1.0001,
        3.0 * 2f32.powi(-25),
        2f32.powi(-26),
        1e-30,
        f32::MIN_POSITIVE,
        6.1e-5,
        6.097555e-5,
        0.1,
        1.0 / 3.0,
        2049.0,
        2051.0,
        4097.0,
        32769.0,
    ];
    while x.len() < 40 * ROW {
        let v = if rng.random_bool(0.5) {
            f32::from_bits(rng.random::<u32>())
        } else {
            rng.random_range(-65519.0f32..65519.0)
        };
        if v.is_finite() && v.abs() < 65520.0 {
            x.push(v);
        }
    }
    x.truncate(40 * ROW);
    let spec = "f16";
    let mut host = layer(ctx, t, spec);
    host.append(Input::F32(&x), Input::F32(&x)).expect("append");
    let mut l = layer(ctx, t, spec);
    let b = app_buffer(ctx, 20, bytemuck::cast_slice(&x), storage());
    l.append_gpu(GpuInput::f32(&b, 20, 40), GpuInput::f32(&b, 20, 40))
        .expect("append_gpu");
    let (want, got) = (
        host.snapshot().expect("snapshot"),
        l.snapshot().expect("snapshot"),
    );
    let (w, g) = (
        host.reconstruct().expect("reconstruct").0,
        l.reconstruct().expect("reconstruct").0,
    );
    assert_eq!(w.len(), x.len());
    assert_eq!(g.len(), x.len());
    for (i, (a, b)) in w.iter().zip(g).enumerate() {
        assert_eq!(
            a.to_bits(),
            b.to_bits(),
            "{}: f32 {:e} ({:#010x}) rounds to {:#06x} on the host, {:#06x} on the GPU",
            t.name(),
            x[i],
            x[i].to_bits(),
            a.to_bits(),
            b.to_bits()
        );
    }
    assert!(want == got);
}

parity_tests!(gpu_append_rounding, gl);

/// A rejected recorded append in the middle of a chain recorded into one encoder (GPU and
/// host appends, the window growing several times after it): the appends before it are kept,
/// it and everything after it are rolled back, and the layer goes on from there like a layer
/// that never saw them.
fn gpu_append_rejected_chain(t: &Target, spec: &str) {
    if !t.is_gpu() {
        return;
    }
    let ctx = t.ctx();
    let mut rng = common::rng("gpu_append_rejected_chain");
    let total = 3 + 10 + 5 + 20 + 7 + 60;
    let (k, v) = random(&mut rng, total);
    let mut bad_v = v.clone();
    bad_v[(13 + 4) * ROW + 3] = f32::NAN; // the last token of the third append
    let (kb, vb) = (
        app_buffer(ctx, 0, bytemuck::cast_slice(&k), storage()),
        app_buffer(ctx, 0, bytemuck::cast_slice(&bad_v), storage()),
    );
    let at = |from: usize, n: usize| {
        (
            GpuInput::f32(&kb, (from * ROW * 4) as u64, n),
            GpuInput::f32(&vb, (from * ROW * 4) as u64, n),
        )
    };
    let rows = |from: usize, n: usize| &k[from * ROW..(from + n) * ROW];
    let mut l = layer(ctx, t, spec);
    l.append(Input::F32(rows(0, 3)), Input::F32(&v[..3 * ROW]))
        .expect("append");
    let mut host = layer(ctx, t, spec);
    host.append(Input::F32(rows(0, 3)), Input::F32(&v[..3 * ROW]))
        .expect("append");
    host.append(Input::F32(rows(3, 10)), Input::F32(&v[3 * ROW..13 * ROW]))
        .expect("append");
    let kept = host.snapshot().expect("snapshot");
    let mut enc = encoder(ctx);
    for (from, n) in [(3, 10), (13, 5), (18, 20)] {
        let (ki, vi) = at(from, n);
        match l.encode_append_gpu(&mut enc, ki, vi) {
            Err(Error::Config(m)) if m.contains("status check") => return,
            r => r.expect("encode_append_gpu"),
        }
    }
    match l.encode_append(&mut enc, Input::F32(rows(38, 7)), Input::F32(rows(38, 7))) {
        Err(Error::Config(m)) if m.contains("status check") => return,
        r => r.expect("encode_append"),
    }
    let (ki, vi) = at(45, 60);
    match l.encode_append_gpu(&mut enc, ki, vi) {
        // A configuration that needs the blocking status check (1-bit KIVI with f16
        // parameters) cannot record appends that quantize: nothing to chain.
        Err(Error::Config(m)) if m.contains("status check") => return,
        r => r.expect("encode_append_gpu"),
    }
    submit(ctx, enc);
    assert_eq!(l.len(), total);
    let e = l.sync().expect_err("the third append was rejected");
    assert!(
        matches!(e, Error::NonFinite { what: "v", index, .. } if index == 4 * ROW + 3),
        "{} {spec}: {e:?}",
        t.name()
    );
    assert_eq!(
        l.len(),
        13,
        "{} {spec}: the appends before it stay",
        t.name()
    );
    assert!(
        l.snapshot().expect("snapshot") == kept,
        "{} {spec}: words after the rollback",
        t.name()
    );
    // Going on: the same good appends store what a host layer stores.
    let mut enc = encoder(ctx);
    let (ki, _) = at(13, 25);
    l.encode_append_gpu(&mut enc, ki, ki)
        .expect("encode_append_gpu");
    submit(ctx, enc);
    l.sync().expect("sync");
    host.append(Input::F32(rows(13, 25)), Input::F32(rows(13, 25)))
        .expect("append");
    assert!(
        l.snapshot().expect("snapshot") == host.snapshot().expect("snapshot"),
        "{} {spec}: words after appending again",
        t.name()
    );
    let q: Vec<f32> = (0..2 * H * D)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    let opts = AttendOptions::default();
    assert!(
        bits(&l.attend(&q, 2 * H, &opts).expect("attend"))
            == bits(&host.attend(&q, 2 * H, &opts).expect("attend")),
        "{} {spec}: attention after appending again",
        t.name()
    );
}

codec_tests!(gpu_append_rejected_chain);

/// An allocation made to fail at every point of a GPU append (blocking and recorded) leaves
/// the stored words, the memory report and the length as they were; the same append then
/// stores what a host append stores.
#[test]
fn gpu_append_failed_allocation_loses_nothing() {
    let Some(t) = common::target("wgsl_workgroup", "gpu_append_failed_allocation") else {
        return;
    };
    let ctx = &t.ctx().with_fault_injection();
    let spec = "kivi:bits=2,group=32,residual=64";
    let mut rng = common::rng("gpu_append_failed_allocation");
    let (k, v) = random(&mut rng, 300);
    let (kb, vb) = (
        app_buffer(ctx, 0, bytemuck::cast_slice(&k[90 * ROW..]), storage()),
        app_buffer(ctx, 0, bytemuck::cast_slice(&v[90 * ROW..]), storage()),
    );
    let (ki, vi) = (GpuInput::f32(&kb, 0, 210), GpuInput::f32(&vb, 0, 210));
    let mut host = layer(ctx, &t, spec);
    append_host(&mut *host, &k, &v);
    for recorded in [false, true] {
        let mut l = layer(ctx, &t, spec);
        append_host(&mut *l, &k[..90 * ROW], &v[..90 * ROW]);
        let before = (l.snapshot().expect("snapshot"), l.memory(), l.len());
        let mut failures = 0;
        for n in 1.. {
            ctx.fail_allocation_after(n);
            let mut enc = encoder(ctx);
            let r = if recorded {
                l.encode_append_gpu(&mut enc, ki, vi)
            } else {
                l.append_gpu(ki, vi)
            };
            ctx.fail_allocation_after(0);
            match r {
                Err(Error::OutOfMemory { .. }) => {
                    failures += 1;
                    drop(enc);
                    l.sync().expect("sync after a failed append");
                    let after = (l.snapshot().expect("snapshot"), l.memory(), l.len());
                    assert!(
                        after == before,
                        "recorded {recorded}: allocation {n} changed the layer"
                    );
                }
                Err(e) => panic!("recorded {recorded}: allocation {n}: {e}"),
                Ok(()) => {
                    submit(ctx, enc);
                    break;
                }
            }
            assert!(n < 1000, "the append never stopped failing");
        }
        assert!(failures >= 3, "only {failures} allocations failed");
        l.sync().expect("sync");
        assert!(l.snapshot().expect("snapshot") == host.snapshot().expect("snapshot"));
    }
}

/// The example's frame loop, a few frames, on the shared device.
#[test]
fn frame_loop_runs() {
    let Some(t) = common::target("wgsl_subgroup", "frame_loop_runs") else {
        return;
    };
    let (device, queue) = (
        t.ctx().device().expect("device").clone(),
        t.ctx().queue().expect("queue").clone(),
    );
    // 70 frames: KIVI quantizes its first key block at 64 tokens (R = 32, G = 32).
    for method in ["kivi:bits=4,group=32,residual=32", "turboquant-mse:bits=3"] {
        let report = frame_loop::run(&device, &queue, method, 70, false).expect("frame loop");
        eprintln!("{method}: {report:?}");
        assert_eq!(report.frames, 70);
        assert_eq!(report.tokens, 70);
        assert!(report.bytes_held > 0);
        assert!(
            report.matches_host,
            "{method}: other words than host appends"
        );
        // The same kernels over the same words: bit-identical.
        assert!(
            report.max_abs_err == 0.0,
            "{method}: the recorded attention differs from the host call: {}",
            report.max_abs_err
        );
    }
    // A device without TIMESTAMP_QUERY (nor SUBGROUP): wall time, and the same checks.
    let Some(mut devices) = own_devices("frame_loop_runs (no timestamps)", 1) else {
        return;
    };
    let (device, queue) = devices.pop().expect("device");
    let report =
        frame_loop::run(&device, &queue, "turboquant-mse:bits=4", 8, false).expect("frame loop");
    assert!(report.timing.starts_with("wall time"), "{}", report.timing);
    assert!(
        report.matches_host && report.max_abs_err == 0.0,
        "{report:?}"
    );
}

/// `Cache`'s device-input methods reach the layer they name: appends from the app's buffers
/// to layer 1 of a two-layer cache (blocking, then recorded and synced) store what host
/// appends store, leave layer 0 untouched, and attention recorded through the cache equals
/// the layer's own; a layer index past the end is a typed error that changes nothing.
fn cache_device_appends(t: &Target) {
    if !t.is_gpu() {
        return; // the CPU path refuses device input: gpu_append_parity checks that refusal
    }
    let ctx = t.ctx();
    let spec = "kivi:bits=4,group=32,residual=32";
    let method = common::parse_method(spec, H, D).expect("method");
    let mut cache = kvpack::Cache::uniform(ctx, 2, H, D, &method, t.path()).expect("cache");
    let mut host = kvpack::Cache::uniform(ctx, 2, H, D, &method, t.path()).expect("cache");
    let mut rng = common::rng("cache_device_appends");
    let (k, v) = random(&mut rng, 70);
    let (kb, vb) = (
        app_buffer(ctx, 0, bytemuck::cast_slice(&k), storage()),
        app_buffer(ctx, 0, bytemuck::cast_slice(&v), storage()),
    );
    let at = |tok: usize| (tok * ROW * 4) as u64;
    cache
        .append_gpu(1, GpuInput::f32(&kb, 0, 50), GpuInput::f32(&vb, 0, 50))
        .expect("append_gpu");
    let mut enc = ctx
        .device()
        .expect("device")
        .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
    cache
        .encode_append_gpu(
            1,
            &mut enc,
            GpuInput::f32(&kb, at(50), 20),
            GpuInput::f32(&vb, at(50), 20),
        )
        .expect("encode_append_gpu");
    ctx.queue().expect("queue").submit([enc.finish()]);
    cache.sync().expect("sync");
    host.append(1, Input::F32(&k), Input::F32(&v))
        .expect("host append");
    let snap =
        |c: &kvpack::Cache, l: usize| c.layer(l).expect("layer").snapshot().expect("snapshot");
    assert!(
        snap(&cache, 1) == snap(&host, 1),
        "layer 1 differs from the host appends"
    );
    assert_eq!(
        cache.layer(0).expect("layer 0").len(),
        0,
        "layer 0 was written"
    );
    let before = snap(&cache, 1);
    let bad = cache.append_gpu(2, GpuInput::f32(&kb, 0, 1), GpuInput::f32(&vb, 0, 1));
    assert!(matches!(bad, Err(Error::Shape { .. })), "{bad:?}");
    assert!(snap(&cache, 1) == before, "a bad index changed layer 1");
    // Attention recorded through the cache equals the layer's own blocking call.
    let q: Vec<f32> = (0..2 * H * D).map(|i| (i as f32 * 0.37).sin()).collect();
    let opts = AttendOptions::new();
    let want = host.attend(1, &q, H, &opts).expect("attend");
    let qb = app_buffer(ctx, 0, bytemuck::cast_slice(&q), storage());
    let out = ctx
        .device()
        .expect("device")
        .create_buffer(&wgpu::BufferDescriptor {
            label: Some("out"),
            size: (q.len() * 4) as u64,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
    let mut enc = ctx
        .device()
        .expect("device")
        .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
    cache
        .encode_attend(1, &mut enc, &qb, 2, H, &opts, &out)
        .expect("encode_attend");
    ctx.queue().expect("queue").submit([enc.finish()]);
    let bytes = kvpack::gpu::readback(ctx, &out, (q.len() * 4) as u64).expect("readback");
    let got: Vec<f32> = bytemuck::cast_slice(&bytes).to_vec();
    assert_eq!(got, want, "recorded attention through the cache");
}

parity_tests!(cache_device_appends, gl);
