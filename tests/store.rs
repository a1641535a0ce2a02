//! The shared store, one body per (codec × path) (`codec_tests!`): what every codec gets
//! from it and must keep.
//!
//! - chunking is invisible: one prefill, token-by-token appends and ragged chunks store the
//!   same words (bit-identical snapshots on the same path);
//! - a failed append loses nothing: an allocation made to fail at every point of an append
//!   that grows segments, splits pieces and grows the ring (a small binding limit) leaves the
//!   stored words, the token count and the memory report exactly as they were, and the same
//!   append then succeeds and matches a layer that never failed;
//! - bad input (NaN, ±Inf, beyond f16, ragged shapes) is a typed error that changes nothing;
//! - memory: the payload is the codec's layout formula, held ≥ payload within the growth
//!   slack, and a cache shorter than its window holds no more than f16 plus that slack;
//! - appends recorded into the application's encoder store what blocking appends store.

mod common;

use common::Target;
use kvpack::{Context, Error, Input, KvLayer, Snapshot};
use rand::Rng;

const H: usize = 2;
const D: usize = 40;

fn layer(ctx: &Context, t: &Target, spec: &str) -> Box<dyn KvLayer> {
    common::parse_method(spec, H, D)
        .and_then(|m| m.layer(ctx, H, D, t.path()))
        .unwrap_or_else(|e| panic!("{} {spec}: layer: {e}", t.name()))
}

fn random(rng: &mut impl Rng, tokens: usize) -> (Vec<f32>, Vec<f32>) {
    let offs: Vec<f32> = (0..H * D).map(|_| rng.random_range(-3.0..3.0)).collect();
    let k = (0..tokens * H * D)
        .map(|i| offs[i % (H * D)] + rng.random_range(-1.0f32..1.0))
        .collect();
    let v = (0..tokens * H * D)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    (k, v)
}

fn append_chunks(l: &mut dyn KvLayer, k: &[f32], v: &[f32], chunks: &[usize]) {
    let row = H * D;
    let mut at = 0;
    for &c in chunks {
        l.append(
            Input::F32(&k[at * row..(at + c) * row]),
            Input::F32(&v[at * row..(at + c) * row]),
        )
        .expect("append");
        at += c;
    }
}

fn store_chunking_is_invisible(t: &Target, spec: &str) {
    let mut rng = common::rng("store_chunking_is_invisible");
    let n = 300;
    let (k, v) = random(&mut rng, n);
    let mut prefill = layer(t.ctx(), t, spec);
    append_chunks(&mut *prefill, &k, &v, &[n]);
    let want = prefill.snapshot().expect("snapshot");
    let mut by_token = vec![1; 70];
    by_token.push(n - 70);
    let mut ragged = Vec::new();
    let mut left = n;
    while left > 0 {
        let c = rng.random_range(1..=47).min(left);
        ragged.push(c);
        left -= c;
    }
    for chunks in [by_token, ragged] {
        let mut l = layer(t.ctx(), t, spec);
        append_chunks(&mut *l, &k, &v, &chunks);
        let got = l.snapshot().expect("snapshot");
        assert!(
            got == want,
            "{} {spec}: chunks {chunks:?} store other words",
            t.name()
        );
        assert_eq!(l.memory().payload, prefill.memory().payload);
    }
    assert!(
        want.keys.quantized > 0 && want.values.quantized > 0,
        "{spec}: nothing quantized"
    );
}
codec_tests!(store_chunking_is_invisible);

/// The context a body runs on with small storage bindings (GPU targets): segments, pieces
/// and uploads split as on a small device.
fn small_bindings(t: &Target, bytes: u64) -> Context {
    match t {
        Target::Wgsl(c, _) => c.with_max_storage_binding_size(bytes).expect("limit"),
        _ => t.ctx().clone(),
    }
}

/// The small binding limit the store tests split segments under: 16 KiB, or the next power of
/// two that holds the codec's tables (one binding each: TurboQuant-Prod's sketch S [m][P] at
/// m = P = 64 is 16 KiB alone; below that the layer is refused with a typed Limit error).
fn small_limit(spec: &str) -> u64 {
    let cpu = Context::cpu();
    let tables = common::parse_method(spec, H, D)
        .and_then(|m| m.layer(&cpu, H, D, kvpack::PathChoice::Cpu))
        .unwrap_or_else(|e| panic!("{spec}: cpu layer: {e}"))
        .memory()
        .held
        .tables;
    (16 * 1024u64).max(tables.next_power_of_two())
}

fn state(l: &dyn KvLayer) -> (Snapshot, kvpack::MemoryReport, usize) {
    (l.snapshot().expect("snapshot"), l.memory(), l.len())
}

fn store_failed_append_loses_nothing(t: &Target, spec: &str) {
    let mut rng = common::rng("store_failed_append_loses_nothing");
    let (k, v) = random(&mut rng, 700);
    let row = H * D;
    let ctx = small_bindings(t, small_limit(spec)).with_fault_injection();
    let mut l = layer(&ctx, t, spec);
    let mut reference = layer(&small_bindings(t, small_limit(spec)), t, spec);
    append_chunks(&mut *l, &k, &v, &[90]);
    append_chunks(&mut *reference, &k, &v, &[90]);
    // One append that quantizes many blocks across segment boundaries (several pieces) and
    // grows the ring: fail each of its allocations in turn.
    let (ks, vs) = (&k[90 * row..700 * row], &v[90 * row..700 * row]);
    let mut failures = 0;
    for n in 1.. {
        let before = state(&*l);
        ctx.fail_allocation_after(n);
        match l.append(Input::F32(ks), Input::F32(vs)) {
            Err(Error::OutOfMemory { .. }) => {
                failures += 1;
                let after = state(&*l);
                assert!(
                    after.0 == before.0,
                    "{} {spec}: allocation {n} failed and the stored words changed",
                    t.name()
                );
                assert_eq!(
                    after.1,
                    before.1,
                    "{} {spec}: allocation {n}: memory changed",
                    t.name()
                );
                assert_eq!(
                    after.2,
                    before.2,
                    "{} {spec}: allocation {n}: length changed",
                    t.name()
                );
            }
            Err(e) => panic!("{} {spec}: allocation {n}: unexpected error {e}", t.name()),
            Ok(()) => break,
        }
        assert!(n < 10_000, "{spec}: the append never stopped failing");
    }
    ctx.fail_allocation_after(0);
    assert!(
        failures >= 2,
        "{} {spec}: only {failures} allocations were made to fail",
        t.name()
    );
    reference
        .append(Input::F32(ks), Input::F32(vs))
        .expect("append");
    assert!(
        l.snapshot().expect("snapshot") == reference.snapshot().expect("snapshot"),
        "{} {spec}: after {failures} failed attempts the layer differs from one that never failed",
        t.name()
    );
    eprintln!(
        "store_failed_append_loses_nothing[{}] {spec}: {failures} allocations failed on purpose, nothing lost",
        t.name()
    );
}
codec_tests!(store_failed_append_loses_nothing);

fn store_bad_input_changes_nothing(t: &Target, spec: &str) {
    let mut rng = common::rng("store_bad_input_changes_nothing");
    let (k, v) = random(&mut rng, 80);
    let row = H * D;
    let mut l = layer(t.ctx(), t, spec);
    append_chunks(&mut *l, &k, &v, &[50]);
    let before = state(&*l);
    let good = &k[50 * row..80 * row];
    let with = |at: usize, x: f32| {
        let mut b = good.to_vec();
        b[at] = x;
        b
    };
    for (what, bk, bv) in [
        ("NaN in k", with(7, f32::NAN), good.to_vec()),
        (
            "+Inf in v",
            good.to_vec(),
            with(row * 29 + 3, f32::INFINITY),
        ),
        (
            "-Inf in k",
            with(row * 12, f32::NEG_INFINITY),
            good.to_vec(),
        ),
        ("beyond f16 in v", good.to_vec(), with(11, 70_000.0)),
    ] {
        let r = l.append(Input::F32(&bk), Input::F32(&bv));
        assert!(
            matches!(r, Err(Error::NonFinite { .. })),
            "{} {spec} {what}: {r:?}",
            t.name()
        );
    }
    let r = l.append(Input::F32(&good[1..]), Input::F32(&good[1..]));
    assert!(
        matches!(r, Err(Error::Shape { what: "k", .. })),
        "ragged k: {r:?}"
    );
    let r = l.append(Input::F32(good), Input::F32(&good[row..]));
    assert!(
        matches!(r, Err(Error::Shape { what: "v", .. })),
        "k/v mismatch: {r:?}"
    );
    let after = state(&*l);
    assert!(
        after.0 == before.0,
        "{} {spec}: bad input changed the stored words",
        t.name()
    );
    assert_eq!(after.1, before.1);
    assert_eq!(after.2, before.2);
    // Nothing to append is a no-op; good input afterwards works.
    l.append(Input::F32(&[]), Input::F32(&[]))
        .expect("empty append");
    assert_eq!(l.len(), 50);
    l.append(Input::F32(good), Input::F32(&v[50 * row..80 * row]))
        .expect("good append");
    assert_eq!(l.len(), 80);
}
codec_tests!(store_bad_input_changes_nothing);

fn store_memory_accounting(t: &Target, spec: &str) {
    let mut rng = common::rng("store_memory_accounting");
    let (k, v) = random(&mut rng, 900);
    let method = common::parse_method(spec, H, D).expect("method");
    let r = method.residual();
    // Shorter than the window: everything is f16 rows, held within the growth slack of f16.
    let short = (r / 2).max(1);
    let mut l = layer(t.ctx(), t, spec);
    append_chunks(&mut *l, &k, &v, &vec![1; short]);
    let m = l.memory();
    let tokens_bytes = (2 * short * H * D * 2) as u64;
    assert_eq!(m.f16_bytes, tokens_bytes);
    if m.quantized == 0 {
        assert!(
            m.held.total() as f64 <= 1.125 * tokens_bytes as f64 + 8.0 + m.held.tables as f64,
            "{} {spec}: {short} tokens in the window hold {} bytes vs {tokens_bytes} in f16",
            t.name(),
            m.held.total()
        );
    }
    // Long: the payload is the layout formula of both sides.
    append_chunks(&mut *l, &k, &v, &[900 - short]);
    let m = l.memory();
    let snap = l.snapshot().expect("snapshot");
    for (side, words, quant) in [
        ("keys", &snap.keys, method.key()),
        ("values", &snap.values, method.value()),
    ] {
        let g = quant.block_tokens();
        assert_eq!(
            words.quantized,
            kvpack::store::quantized_len(900, r, g),
            "{spec} {side}: Q"
        );
        assert_eq!(
            words.residual.len(),
            (900 - words.quantized) * H * D,
            "{spec} {side}: window rows"
        );
    }
    let codes: u64 = snap
        .keys
        .streams
        .iter()
        .chain(&snap.values.streams)
        .map(|s| (s.len() * 4) as u64)
        .sum();
    let resid = ((snap.keys.residual.len() + snap.values.residual.len()) * 2) as u64;
    assert_eq!(
        m.payload.total() - m.payload.tables,
        codes + resid,
        "{} {spec}: payload {:?} is not the stored words' size",
        t.name(),
        m.payload
    );
    assert_eq!(m.payload.residual, resid);
    assert!(m.held.total() >= m.payload.total(), "{m:?}");
    // Growth slack: 12.5 % plus one block per stream and the GPU's binding alignment.
    let slack = 1.125 * m.payload.total() as f64 + 64.0 * 1024.0;
    assert!(
        m.held.total() as f64 <= slack,
        "{} {spec}: held {} payload {}",
        t.name(),
        m.held.total(),
        m.payload.total()
    );
    if !method.is_f16()
        && method.bits_per_value(kvpack::store::Geometry::new(H, D).expect("geometry")) < 8.0
    {
        assert!(
            m.ratio().is_some_and(|x| x > 1.0),
            "{spec}: ratio {:?}",
            m.ratio()
        );
    }
}
codec_tests!(store_memory_accounting);

fn store_encode_append_matches_append(t: &Target, spec: &str) {
    let mut rng = common::rng("store_encode_append");
    let (k, v) = random(&mut rng, 400);
    let row = H * D;
    let Target::Wgsl(ctx, _) = t else {
        // CPU layers refuse recording (a typed error) and stay empty.
        if let Ok(dev) = common::gpu_context() {
            let mut l = layer(t.ctx(), t, spec);
            let device = dev.device().expect("device");
            let mut enc = device.create_command_encoder(&Default::default());
            let r = l.encode_append(&mut enc, Input::F32(&k[..row]), Input::F32(&v[..row]));
            assert!(matches!(r, Err(Error::PathUnavailable { .. })), "{r:?}");
            assert_eq!(l.len(), 0);
        }
        return;
    };
    let ctx = ctx
        .with_max_storage_binding_size(small_limit(spec))
        .expect("limit");
    let mut recorded = layer(&ctx, t, spec);
    let mut blocking = layer(&ctx, t, spec);
    // (KIVI's 1-bit spec; `kbits=1` of VecInfer has no status check.)
    let needs_status = spec.starts_with("kivi:bits=1,");
    for (a, b) in [(0, 33), (33, 34), (34, 200), (200, 400)] {
        let (ks, vs) = (&k[a * row..b * row], &v[a * row..b * row]);
        blocking
            .append(Input::F32(ks), Input::F32(vs))
            .expect("append");
        let device = ctx.device().expect("device");
        let mut enc = device.create_command_encoder(&Default::default());
        match recorded.encode_append(&mut enc, Input::F32(ks), Input::F32(vs)) {
            Ok(()) => ctx.queue().expect("queue").submit([enc.finish()]),
            // 1-bit codes with f16 parameters need the blocking status check when a block flushes.
            Err(Error::Config(m)) if needs_status && m.contains("status") => {
                recorded
                    .append(Input::F32(ks), Input::F32(vs))
                    .expect("append");
                continue;
            }
            Err(e) => panic!("{} {spec}: encode_append: {e}", t.name()),
        };
    }
    assert_eq!(recorded.len(), 400);
    assert!(
        recorded.snapshot().expect("snapshot") == blocking.snapshot().expect("snapshot"),
        "{} {spec}: recorded appends store other words",
        t.name()
    );
    assert_eq!(recorded.memory().payload, blocking.memory().payload);
}
codec_tests!(store_encode_append_matches_append);
