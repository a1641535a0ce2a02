//! A layer under eviction on a GPU path takes appends from device buffers (`append_gpu`,
//! scored on the device by the `evict_score` kernel) and records attention into the caller's
//! encoder (`encode_attend`, masks from the positions stream). Fed the same tokens in the same
//! chunks, it evicts the same tokens as a layer fed from the host (whose scores come from the
//! kernel's CPU twin): the same positions and stored words, scores within the f32 summation
//! bound, and recorded attention bit for bit the blocking attention. After `prepare()` (and
//! after `prepare_async()`, on a handle of its own) none of this builds a pipeline: the
//! scoring and compaction kernels are prepared with the rest. The CPU path refuses device
//! input.

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
        let (sa, sb) = (a.eviction_state().unwrap(), b.eviction_state().unwrap());
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
