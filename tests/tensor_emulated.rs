//! The tensor-core prefill kernel (`attend_prefill_tc_<k>_<v>`) with its cooperative matrices
//! emulated (`Context::with_emulated_tensor_cores`, src/gpu/coop_emulation.rs): the kernel's
//! own logic (tiles, padded strides, masks, windows, sinks, rings that wrap, part-empty vector
//! blocks, splits, the rescale path) against the CPU path on the same stored words, on any
//! adapter with f16 shaders. CI's lavapipe has no cooperative matrices, so this is where the
//! kernel runs on every push (tests/tensor_attend.rs runs the real one where the device has
//! tensor cores). lavapipe offers 32 KiB of workgroup storage: head widths up to 32 fit
//! (with the emulation's 4 KiB of scratch).
//! Bound: spec/attention.md's f16-product rule (relative L2 ≤ 1e-3 per row).

mod common;

use kvpack::{AttendKernel, AttendOptions, Context, Error, Input, KvLayer, Layer, PathChoice};
use rand::Rng;

fn emulated_ctx(test: &str) -> Option<Context> {
    let ctx = match common::gpu_context() {
        Ok(c) => c.with_emulated_tensor_cores(),
        Err(e) => {
            common::skip(test, &e);
            return None;
        }
    };
    if let Err(e) = ctx.tensor_cores() {
        common::skip(test, &format!("no emulated tensor-core kernel here: {e}"));
        return None;
    }
    Some(ctx)
}

#[test]
fn emulated_tensor_kernel_matches_the_cpu_path() {
    let Some(ctx) = emulated_ctx("emulated_tensor_kernel_matches_the_cpu_path") else {
        return;
    };
    let seed = {
        use rand::Rng;
        common::rng("tensor_emulated_shapes").random::<u64>()
    };
    common::tc_emulated::check(&ctx, seed, true);
}

/// Scores that grow along the context by twice the kernel's rescale threshold: earlier
/// tiles' output must be rescaled (the kernel's rare path, through workgroup memory).
#[test]
fn emulated_tensor_kernel_rescales_when_scores_grow() {
    let Some(ctx) = emulated_ctx("emulated_tensor_kernel_rescales_when_scores_grow") else {
        return;
    };
    let (hkv, d, hq, t, tq) = (1, 32, 4, 256, 16);
    let mut rng = common::rng("tensor_emulated_rescale");
    // Score growth over the context: 2·8·8/√32·log2 e ≈ 33 (log2 units), four thresholds.
    let (q, k, v) = common::rising_scores_qkv(&mut rng, (hkv, d, hq, t, tq), 8.0);
    for method in ["f16", "kivi-4"] {
        let o = AttendOptions::default()
            .chunk_tokens(Some(256))
            .kernel(AttendKernel::Tensor);
        let (err, ran) = common::gpu_vs_cpu(&ctx, method, hkv, d, hq, &k, &v, &q, &o);
        eprintln!("emulated tensor kernel rescale {method}: worst row rel L2 {err:e}");
        assert!(ran.iter().any(|k| k.starts_with("attend_prefill_tc")));
        let tol = common::tc_emulated::bound(&ctx, method);
        assert!(
            err <= tol,
            "{method}: worst row rel L2 {err:e} (bound {tol:e})"
        );
    }
}

/// What an emulating handle refuses: the tensor-core decode kernel (not emulated), and Auto
/// never picks the emulated prefill kernel, not even for a call past its thresholds.
#[test]
fn emulated_tensor_cores_are_asked_for_by_name_only() {
    let Some(ctx) = emulated_ctx("emulated_tensor_cores_are_asked_for_by_name_only") else {
        return;
    };
    let (hkv, d, hq) = (1, 32, 4);
    let m = common::parse_method("kivi-4", hkv, d).expect("method");
    let logged = ctx.with_dispatch_log();
    let mut l = Layer::new(&logged, hkv, d, &m, PathChoice::WgslSubgroup).expect("layer");
    let (vectors, t) = kvpack::attention::plan::TENSOR_AUTO[0];
    let mut rng = common::rng("tensor_emulated_auto");
    let mut n = |x: usize| -> Vec<f32> { (0..x).map(|_| rng.random_range(-1.0f32..1.0)).collect() };
    let (k, v) = (n(t * hkv * d), n(t * hkv * d));
    l.append(Input::F32(&k), Input::F32(&v)).expect("append");
    let rows = vectors / hq;
    let q = n(rows * hq * d);
    let out = l.attend(&q, hq, &AttendOptions::default()).expect("auto");
    assert_eq!(out.len(), q.len());
    let ran: Vec<&str> = logged.dispatches().into_iter().map(|(k, _, _)| k).collect();
    assert!(
        !ran.iter().any(|k| k.starts_with("attend_prefill_tc")),
        "Auto ran the emulated kernel: {ran:?}"
    );
    let d1 = n(hq * d);
    match l.attend(
        &d1,
        hq,
        &AttendOptions::default().kernel(AttendKernel::TensorDecode),
    ) {
        Err(Error::PathUnavailable { reason, .. }) => {
            assert!(reason.contains("prefill kernel only"), "{reason}")
        }
        other => panic!("TensorDecode on emulated tensor cores must be refused: {other:?}"),
    }
    let described = ctx.describe().to_string();
    assert!(described.contains("emulated on this handle"), "{described}");
}
