//! Host rows of recorded appends staged in the device's arena (`kvpack::gpu::staging`), on a
//! device of this test's own (the arena and its counter are per device):
//!
//! - a decode loop of one-token `encode_append`s, each submitted, makes no buffer per call:
//!   one arena for all of them;
//! - appends recorded into one encoder whose rows fill the 4 MiB arena several times (old
//!   slots still named by recorded copies when a new arena takes over) store the words of a
//!   layer given the same values from the app's buffers (`append_gpu`, whose rows never pass
//!   through the arena), bit for bit, and attend alike; the same through `clear_staging`
//!   between recordings;
//! - rows above `staging::LARGE` (a prefill chunk) get a buffer of their own, and store the
//!   same;
//! - rows of an odd number of values (staged padded to words, each side alone) and rows
//!   whose bytes are not a multiple of the offset alignment (both sides in one slot) store
//!   the same.

mod common;

use common::{encoder, submit};

use kvpack::gpu::staging;
use kvpack::{AttendOptions, Context, GpuInput, HeadlessOptions, Input, KvLayer};
use rand::Rng;

const H: usize = 8;
const D: usize = 128;
const ROW: usize = H * D;

fn own_ctx(test: &str) -> Option<Context> {
    match Context::headless_with(&HeadlessOptions::default().require_gpu(true)) {
        Ok(c) => Some(c),
        Err(e) => {
            common::skip(test, &e.to_string());
            None
        }
    }
}

fn layer(ctx: &Context, spec: &str) -> Box<dyn KvLayer> {
    layer_hd(ctx, spec, H, D)
}

fn layer_hd(ctx: &Context, spec: &str, h: usize, d: usize) -> Box<dyn KvLayer> {
    common::parse_method(spec, h, d)
        .and_then(|m| m.layer(ctx, h, d, kvpack::PathChoice::Wgsl))
        .unwrap_or_else(|e| panic!("{spec}: layer: {e}"))
}

fn values(rng: &mut impl Rng, tokens: usize) -> (Vec<f32>, Vec<f32>) {
    let k = (0..tokens * ROW)
        .map(|i| (i % 7) as f32 * 0.3 + rng.random_range(-1.0f32..1.0))
        .collect();
    let v = (0..tokens * ROW)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    (k, v)
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// `l` (appended from host values through the staging arena) against `want`, a layer of the
/// same device given the same values from a buffer of the app's (`append_gpu`: its rows never
/// pass through the staging arena): the same length, stored words and attention bits.
fn same(l: &dyn KvLayer, want: &dyn KvLayer, q: &[f32], what: &str) {
    assert_eq!(l.len(), want.len(), "{what}: length");
    assert!(
        l.snapshot().expect("snapshot") == want.snapshot().expect("snapshot"),
        "{what}: stored words differ from appends of device rows"
    );
    let o = AttendOptions::default();
    assert!(
        bits(&l.attend(q, 4 * H, &o).expect("attend"))
            == bits(&want.attend(q, 4 * H, &o).expect("attend")),
        "{what}: attention differs from appends of device rows"
    );
}

/// A layer given `k`, `v` (f32) from one app buffer each, an `append_gpu` per entry of
/// `chunks` (tokens), in order.
fn device_fed(
    ctx: &Context,
    spec: &str,
    k: &[f32],
    v: &[f32],
    chunks: &[usize],
) -> Box<dyn KvLayer> {
    device_fed_hd(ctx, spec, (H, D), k, v, chunks)
}

fn device_fed_hd(
    ctx: &Context,
    spec: &str,
    (h, d): (usize, usize),
    k: &[f32],
    v: &[f32],
    chunks: &[usize],
) -> Box<dyn KvLayer> {
    let device = ctx.device().expect("device");
    let buffer = |x: &[f32]| {
        let b = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("app rows"),
            size: (x.len() * 4) as u64,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: true,
        });
        b.slice(..)
            .get_mapped_range_mut()
            .expect("mapped at creation")
            .copy_from_slice(bytemuck::cast_slice(x));
        b.unmap();
        b
    };
    let (kb, vb) = (buffer(k), buffer(v));
    let mut l = layer_hd(ctx, spec, h, d);
    let mut at = 0;
    for &c in chunks {
        let off = (at * h * d * 4) as u64;
        l.append_gpu(GpuInput::f32(&kb, off, c), GpuInput::f32(&vb, off, c))
            .expect("append_gpu");
        at += c;
    }
    l
}

#[test]
fn decode_appends_make_no_buffer_per_call() {
    let Some(ctx) = own_ctx("decode_appends_make_no_buffer_per_call") else {
        return;
    };
    let mut rng = common::rng("decode_appends_make_no_buffer_per_call");
    let (t0, n) = (100, 300);
    let (k, v) = values(&mut rng, n);
    let q: Vec<f32> = (0..4 * ROW).map(|_| rng.random_range(-1.0..1.0)).collect();
    let mut sizes = vec![t0];
    sizes.resize(1 + n - t0, 1);
    for spec in ["kivi:bits=2,group=32,residual=64", "f16"] {
        let want = device_fed(&ctx, spec, &k, &v, &sizes);
        let mut l = layer(&ctx, spec);
        l.append(Input::F32(&k[..t0 * ROW]), Input::F32(&v[..t0 * ROW]))
            .expect("append");
        let before = ctx.staging_arenas_made();
        for t in t0..n {
            let (kt, vt) = (&k[t * ROW..(t + 1) * ROW], &v[t * ROW..(t + 1) * ROW]);
            let mut enc = encoder(&ctx);
            l.encode_append(&mut enc, Input::F32(kt), Input::F32(vt))
                .expect("encode_append");
            submit(&ctx, enc);
        }
        // 200 tokens × 2 sides × 2 KiB: 0.8 MiB, within one arena.
        let made = ctx.staging_arenas_made() - before;
        assert!(
            made <= 1,
            "{spec}: {made} staging arenas for 200 one-token appends"
        );
        same(&*l, &*want, &q, spec);
    }
}

#[test]
fn recorded_appends_across_arenas() {
    let Some(ctx) = own_ctx("recorded_appends_across_arenas") else {
        return;
    };
    let mut rng = common::rng("recorded_appends_across_arenas");
    // Chunks of 100 tokens: 200 KiB a side, 400 KiB an append; 24 chunks ≈ 9.4 MiB of rows.
    let (chunk, n) = (100, 24);
    let (k, v) = values(&mut rng, chunk * n);
    let q: Vec<f32> = (0..4 * ROW).map(|_| rng.random_range(-1.0..1.0)).collect();
    for spec in [
        "kivi:bits=4,group=32,residual=32",
        "f16",
        "turboquant-mse:bits=3,residual=24",
    ] {
        let want = device_fed(&ctx, spec, &k, &v, &vec![chunk; n]);
        for clear in [false, true] {
            let mut l = layer(&ctx, spec);
            let before = ctx.staging_arenas_made();
            let mut enc = encoder(&ctx);
            for c in 0..n {
                if clear && c % 5 == 4 {
                    ctx.clear_staging();
                }
                let r = c * chunk * ROW..(c + 1) * chunk * ROW;
                l.encode_append(&mut enc, Input::F32(&k[r.clone()]), Input::F32(&v[r]))
                    .expect("encode_append");
            }
            submit(&ctx, enc);
            let made = ctx.staging_arenas_made() - before;
            assert!(
                made >= 2,
                "{spec}: the rows filled {made} arenas (the test needs a new one mid-encoder)"
            );
            same(&*l, &*want, &q, &format!("{spec} (clear_staging: {clear})"));
        }
    }
}

#[test]
fn large_rows_get_a_buffer_of_their_own() {
    let Some(ctx) = own_ctx("large_rows_get_a_buffer_of_their_own") else {
        return;
    };
    let mut rng = common::rng("large_rows_get_a_buffer_of_their_own");
    // 1,100 tokens × 2 KiB = 2.2 MiB a side: above staging::LARGE (1 MiB), and both sides
    // together above the arena (4 MiB): staged there they would need a new arena.
    let n = 1100;
    assert!((n * ROW * 2) as u64 > staging::LARGE);
    assert!((2 * n * ROW * 2) as u64 > staging::ARENA_BYTES);
    let (k, v) = values(&mut rng, n);
    let q: Vec<f32> = (0..4 * ROW).map(|_| rng.random_range(-1.0..1.0)).collect();
    let spec = "kivi:bits=2,group=32,residual=64";
    let want = device_fed(&ctx, spec, &k, &v, &[n]);
    // A fresh arena first (the window's rows of the large append are staged there: ~100 KiB).
    ctx.clear_staging();
    let mut warm = layer(&ctx, spec);
    let mut enc = encoder(&ctx);
    warm.encode_append(&mut enc, Input::F32(&k[..ROW]), Input::F32(&v[..ROW]))
        .expect("encode_append");
    submit(&ctx, enc);
    let before = ctx.staging_arenas_made();
    let mut l = layer(&ctx, spec);
    let mut enc = encoder(&ctx);
    l.encode_append(&mut enc, Input::F32(&k), Input::F32(&v))
        .expect("encode_append");
    submit(&ctx, enc);
    assert_eq!(
        ctx.staging_arenas_made(),
        before,
        "rows above staging::LARGE went into the arena"
    );
    same(&*l, &*want, &q, spec);
}

/// Small rows staged one token at a time and in chunks store what the same values from app
/// buffers store: H = 3, D = 5 (15 f16 values, padded to 8 words: each side staged alone)
/// and H = 3, D = 6 (36 bytes a row: both sides in one slot, the value rows at the next
/// multiple of the storage offset alignment, not right after the key rows).
#[test]
fn small_rows_odd_and_unaligned() {
    let Some(ctx) = own_ctx("small_rows_odd_and_unaligned") else {
        return;
    };
    let mut rng = common::rng("small_rows_odd_and_unaligned");
    let n = 120;
    let sizes: Vec<usize> = [1, 7, 33, 1, 1, 40, 37].to_vec();
    assert_eq!(sizes.iter().sum::<usize>(), n);
    for (h, d) in [(3, 5), (3, 6)] {
        let k: Vec<f32> = (0..n * h * d)
            .map(|_| rng.random_range(-2.0..2.0))
            .collect();
        let v: Vec<f32> = (0..n * h * d)
            .map(|_| rng.random_range(-2.0..2.0))
            .collect();
        let q: Vec<f32> = (0..2 * h * d)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        for spec in ["f16", "kivi:bits=4,group=16,residual=16"] {
            let what = format!("{spec} H={h} D={d}");
            let want = device_fed_hd(&ctx, spec, (h, d), &k, &v, &sizes);
            let mut l = layer_hd(&ctx, spec, h, d);
            let mut at = 0;
            for &c in &sizes {
                let r = at * h * d..(at + c) * h * d;
                let mut enc = encoder(&ctx);
                l.encode_append(&mut enc, Input::F32(&k[r.clone()]), Input::F32(&v[r]))
                    .expect("encode_append");
                submit(&ctx, enc);
                at += c;
            }
            assert!(
                l.snapshot().expect("snapshot") == want.snapshot().expect("snapshot"),
                "{what}: stored otherwise than from app buffers"
            );
            let o = AttendOptions::default();
            assert!(
                bits(&l.attend(&q, 2 * h, &o).expect("attend"))
                    == bits(&want.attend(&q, 2 * h, &o).expect("attend")),
                "{what}: attention differs"
            );
        }
    }
}
