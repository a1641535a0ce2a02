//! A layer under eviction on a GPU path takes appends from device buffers (`append_gpu`,
//! scored on the device by the `evict_score` kernel) and records attention into the caller's
//! encoder (`encode_attend`, masks from the positions stream). Fed the same tokens in the same
//! chunks, it evicts the same tokens as a layer fed from the host (whose scores come from the
//! kernel's CPU twin): the same positions and stored words, scores within the f32 summation
//! bound, and recorded attention bit for bit the blocking attention. After `prepare()` (and
//! after `prepare_async()`, on a handle of its own) none of this builds a pipeline: the
//! scoring, selection and compaction kernels are prepared with the rest. Recorded appends
//! leave the tables unfinished until `sync()`: a snapshot and the eviction state are refused
//! before it. The CPU path refuses device input.

mod common;

use common::Target;
use kvpack::{AttendOptions, Error, GpuDtype, GpuInput, Input, KvLayer, Method};
use rand::Rng;

const H: usize = 2;
const D: usize = 16;
const ROW: usize = H * D;
const CHUNKS: [usize; 7] = [7, 1, 33, 2, 40, 17, 30];

fn random(rng: &mut impl Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn specs(calib: &std::path::Path) -> Vec<String> {
    vec![
        format!(
            "f16+qfilters:budget=24,sinks=2,window=3,calib={}",
            calib.display()
        ),
        "kivi:bits=4,group=8,residual=8+knorm:budget=40,sinks=2,stride=3".to_string(),
        "kivi:bits=2,group=8/turboquant-mse:bits=3,residual=8+streaming:budget=32,sinks=1".into(),
    ]
}

/// Attention recorded into an encoder of our own, read back.
fn encode_attend(
    t: &Target,
    l: &dyn KvLayer,
    q: &[f32],
    hq: usize,
    opts: &AttendOptions,
) -> Vec<f32> {
    let ctx = t.ctx();
    let qb = kvpack::gpu::upload(ctx, "test queries", bytemuck::cast_slice(q)).unwrap();
    let out = kvpack::gpu::storage_buffer(ctx, "test output", (q.len() * 4) as u64).unwrap();
    let device = ctx.device().unwrap();
    let mut enc = device.create_command_encoder(&Default::default());
    l.encode_attend(&mut enc, &qb, q.len() / (hq * D), hq, opts, &out)
        .unwrap();
    ctx.queue().unwrap().submit([enc.finish()]);
    bytemuck::pod_collect_to_vec(&kvpack::gpu::readback(ctx, &out, (q.len() * 4) as u64).unwrap())
}

fn evicting_layers_take_device_input(t: &Target) {
    let mut rng = common::rng("evicting_layers_take_device_input");
    let tn = t.name();
    let filters = random(&mut rng, H * D);
    let calib = common::tiny_calibration(&format!("gpu-input-{tn}"), H, D, Some(filters), None);
    let total: usize = CHUNKS.iter().sum();
    let (k, v) = (random(&mut rng, total * ROW), random(&mut rng, total * ROW));
    for spec in specs(&calib) {
        let m = Method::parse(&spec).unwrap();
        let mut a = m.layer(t.ctx(), H, D, t.path()).unwrap();
        // On a pipeline cache of its own: pipelines the other layer built cannot hide one
        // that prepare() missed.
        let own = t.ctx().with_own_pipeline_cache();
        let mut b = m.layer(&own, H, D, t.path()).unwrap();
        let (prepared, async_built) = if t.is_gpu() {
            b.prepare().unwrap();
            let fresh = t.ctx().with_own_pipeline_cache();
            let l = m.layer(&fresh, H, D, t.path()).unwrap();
            l.prepare_async().wait().unwrap();
            (own.built_pipelines(), fresh.built_pipelines())
        } else {
            (Vec::new(), Vec::new())
        };
        assert_eq!(
            prepared, async_built,
            "{spec}: prepare_async built other pipelines"
        );
        if !t.is_gpu() {
            // (A buffer of the GPU device, when there is one: refused before it is read.)
            if let Ok(gpu) = common::gpu_context() {
                let buf = kvpack::gpu::upload(&gpu, "test keys", bytemuck::cast_slice(&k)).unwrap();
                let i = GpuInput::new(&buf, 0, GpuDtype::F32, 1);
                match b.append_gpu(i, i) {
                    Err(Error::PathUnavailable { .. }) => {}
                    r => panic!("{spec}: device input on the CPU path: {r:?}"),
                }
            }
            continue;
        }
        // Keys as f32 and values as f16, at byte offsets inside larger buffers.
        let f16s: Vec<half::f16> = v.iter().map(|&x| half::f16::from_f32(x)).collect();
        let mut kbytes = vec![0u8; 256];
        kbytes.extend_from_slice(bytemuck::cast_slice(&k));
        let kb = kvpack::gpu::upload(t.ctx(), "test keys", &kbytes).unwrap();
        let vb = kvpack::gpu::upload(t.ctx(), "test values", bytemuck::cast_slice(&f16s)).unwrap();
        let mut at = 0;
        for c in CHUNKS {
            a.append(
                Input::F32(&k[at * ROW..(at + c) * ROW]),
                Input::F16(&f16s[at * ROW..(at + c) * ROW]),
            )
            .unwrap();
            let ki = GpuInput::new(&kb, (256 + at * ROW * 4) as u64, GpuDtype::F32, c);
            let vi = GpuInput::new(&vb, (at * ROW * 2) as u64, GpuDtype::F16, c);
            b.append_gpu(ki, vi).unwrap();
            at += c;
        }
        let what = format!("{spec} on {tn}");
        let ctx = &own;
        assert!(a.appended() - a.len() > 0, "{what}: nothing evicted");
        let (sa, sb) = (
            a.eviction_state().unwrap().unwrap(),
            b.eviction_state().unwrap().unwrap(),
        );
        assert_eq!((sb.appended, sb.since), (sa.appended, sa.since), "{what}");
        assert_eq!(sb.positions, sa.positions, "{what}: a different kept set");
        for (x, y) in sa.scores.iter().zip(&sb.scores) {
            // The kernel's sum against the twin's channel order: 2·D·2⁻²⁴ of Σ|k·u| ≤ D.
            assert!(
                (x - y).abs() <= 2.0 * D as f32 * D as f32 * f32::EPSILON,
                "{what}: device score {y} against {x}"
            );
        }
        if !spec.contains("streaming") {
            assert!(
                sb.scores.iter().any(|&s| s != 0.0),
                "{what}: the device wrote no scores"
            );
        }
        assert_eq!(
            b.snapshot().unwrap(),
            a.snapshot().unwrap(),
            "{what}: words"
        );

        let q = random(&mut rng, 3 * 4 * D);
        let opts = AttendOptions::default().window(Some(30)).sinks(3);
        let recorded = encode_attend(t, &*b, &q, 4, &opts);
        assert_eq!(
            recorded,
            b.attend(&q, 4, &opts).unwrap(),
            "{what}: recorded attention is not the blocking one"
        );
        let want = a.attend_reference(&q, 4, &opts).unwrap();
        let err = common::rel_l2_rows(&recorded, &want, D);
        assert!(
            err <= 1e-4,
            "{what}: against the CPU reference, rel L2 {err:e}"
        );
        assert_eq!(
            ctx.built_pipelines(),
            prepared,
            "{what}: pipelines built after prepare()"
        );
        // A bad query count is refused before anything is recorded.
        let qb = kvpack::gpu::upload(t.ctx(), "q", bytemuck::cast_slice(&q)).unwrap();
        let mut enc = t
            .ctx()
            .device()
            .unwrap()
            .create_command_encoder(&Default::default());
        match b.encode_attend(&mut enc, &qb, total + 1, 4, &opts, &qb) {
            Err(Error::Shape { .. }) => {}
            r => panic!("{what}: {} query rows for {total} tokens: {r:?}", total + 1),
        }
    }
    std::fs::remove_file(calib).ok();
}
parity_tests!(evicting_layers_take_device_input);

/// How the recorded body submits.
#[derive(Clone, Copy, Debug)]
enum Rec {
    /// One encoder, submit and sync per chunk (device input; host input every third chunk).
    PerChunk,
    /// Every chunk recorded into one encoder, then one submit and one sync.
    OneEncoder,
}

/// Recorded appends (`encode_append_gpu`, `encode_append`) on a layer under eviction: the
/// scores are read and the eviction runs at `sync()`, so a layer synced after every chunk
/// keeps what a layer fed the same chunks from the host keeps, and one synced once keeps what
/// one host append of all of them keeps. Attention recorded before the sync, in the same
/// encoder as the append, sees the new tokens at their positions (bit for bit the blocking
/// attention before the sync). A snapshot (so a save) before the sync is refused. A recorded
/// append of a NaN rolls back at the sync with the host append's error, tables included.
fn evicting_layers_record_appends(t: &Target) {
    if !t.is_gpu() {
        return; // (the CPU path's refusal is checked above)
    }
    let mut rng = common::rng("evicting_layers_record_appends");
    let tn = t.name();
    let filters = random(&mut rng, H * D);
    let calib = common::tiny_calibration(&format!("recorded-{tn}"), H, D, Some(filters), None);
    let total: usize = CHUNKS.iter().sum();
    let (k, v) = (random(&mut rng, total * ROW), random(&mut rng, total * ROW));
    let device = t.ctx().device().unwrap();
    let kb = kvpack::gpu::upload(t.ctx(), "test keys", bytemuck::cast_slice(&k)).unwrap();
    let vb = kvpack::gpu::upload(t.ctx(), "test values", bytemuck::cast_slice(&v)).unwrap();
    let submit = |enc: wgpu::CommandEncoder| {
        t.ctx().queue().unwrap().submit([enc.finish()]);
    };
    for spec in specs(&calib) {
        let m = Method::parse(&spec).unwrap();
        for mode in [Rec::PerChunk, Rec::OneEncoder] {
            let what = format!("{spec} on {tn}, {mode:?}");
            let mut a = m.layer(t.ctx(), H, D, t.path()).unwrap();
            let mut b = m.layer(t.ctx(), H, D, t.path()).unwrap();
            if matches!(mode, Rec::OneEncoder) {
                a.append(Input::F32(&k), Input::F32(&v)).unwrap();
            }
            let mut enc = device.create_command_encoder(&Default::default());
            let (mut at, mut seen_attend) = (0, false);
            for (i, c) in CHUNKS.into_iter().enumerate() {
                let (kr, vr) = (&k[at * ROW..(at + c) * ROW], &v[at * ROW..(at + c) * ROW]);
                if i % 3 == 2 {
                    b.encode_append(&mut enc, Input::F32(kr), Input::F32(vr))
                        .unwrap();
                } else {
                    let ki = GpuInput::new(&kb, (at * ROW * 4) as u64, GpuDtype::F32, c);
                    let vi = GpuInput::new(&vb, (at * ROW * 4) as u64, GpuDtype::F32, c);
                    b.encode_append_gpu(&mut enc, ki, vi).unwrap();
                }
                at += c;
                assert_eq!(b.appended(), at, "{what}: tokens counted at once");
                if matches!(mode, Rec::OneEncoder) {
                    continue;
                }
                a.append(Input::F32(kr), Input::F32(vr)).unwrap();
                if i == 4 {
                    // Recorded attention in the append's encoder, before the sync.
                    let q = random(&mut rng, 2 * 4 * D);
                    let opts = AttendOptions::default().window(Some(20)).sinks(2);
                    let qb = kvpack::gpu::upload(t.ctx(), "q", bytemuck::cast_slice(&q)).unwrap();
                    let out =
                        kvpack::gpu::storage_buffer(t.ctx(), "o", (q.len() * 4) as u64).unwrap();
                    b.encode_attend(&mut enc, &qb, 2, 4, &opts, &out).unwrap();
                    // Before the sync the tables are not final: a snapshot and a read of
                    // the eviction state are refused.
                    assert!(
                        matches!(b.snapshot(), Err(Error::Config(_))),
                        "{what}: a snapshot before the sync"
                    );
                    assert!(
                        matches!(b.eviction_state(), Err(Error::Config(_))),
                        "{what}: the eviction state before the sync"
                    );
                    submit(std::mem::replace(
                        &mut enc,
                        device.create_command_encoder(&Default::default()),
                    ));
                    let got: Vec<f32> = bytemuck::pod_collect_to_vec(
                        &kvpack::gpu::readback(t.ctx(), &out, (q.len() * 4) as u64).unwrap(),
                    );
                    assert_eq!(
                        got,
                        b.attend(&q, 4, &opts).unwrap(),
                        "{what}: recorded attention before the sync"
                    );
                    seen_attend = true;
                }
                submit(std::mem::replace(
                    &mut enc,
                    device.create_command_encoder(&Default::default()),
                ));
                b.sync().unwrap();
                assert_eq!(
                    b.eviction_state().unwrap().unwrap().positions,
                    a.eviction_state().unwrap().unwrap().positions,
                    "{what}: after chunk {i}"
                );
            }
            submit(enc);
            b.sync().unwrap();
            assert!(seen_attend || matches!(mode, Rec::OneEncoder));
            assert!(b.appended() > b.len(), "{what}: nothing evicted");
            let (sa, sb) = (
                a.eviction_state().unwrap().unwrap(),
                b.eviction_state().unwrap().unwrap(),
            );
            assert_eq!(
                (&sb.positions, sb.appended, sb.since),
                (&sa.positions, sa.appended, sa.since),
                "{what}"
            );
            for (x, y) in sa.scores.iter().zip(&sb.scores) {
                assert!(
                    (x - y).abs() <= 2.0 * D as f32 * D as f32 * f32::EPSILON,
                    "{what}: score {y} against {x}"
                );
            }
            assert_eq!(
                b.snapshot().unwrap(),
                a.snapshot().unwrap(),
                "{what}: words"
            );

            // A recorded append of a NaN: rolled back at the sync, tables included.
            let before = (b.eviction_state().unwrap(), b.snapshot().unwrap());
            let mut bad = k[..3 * ROW].to_vec();
            bad[7] = f32::NAN;
            let badb = kvpack::gpu::upload(t.ctx(), "bad", bytemuck::cast_slice(&bad)).unwrap();
            let mut enc = device.create_command_encoder(&Default::default());
            let bi = GpuInput::new(&badb, 0, GpuDtype::F32, 3);
            let vi = GpuInput::new(&vb, 0, GpuDtype::F32, 3);
            b.encode_append_gpu(&mut enc, bi, vi).unwrap();
            submit(enc);
            match b.sync() {
                Err(Error::NonFinite { .. }) => {}
                r => panic!("{what}: a recorded NaN: {r:?}"),
            }
            assert_eq!(
                (b.eviction_state().unwrap(), b.snapshot().unwrap()),
                before,
                "{what}: the rejected append left a trace"
            );
        }
    }
    std::fs::remove_file(calib).ok();
}
parity_tests!(evicting_layers_record_appends);
