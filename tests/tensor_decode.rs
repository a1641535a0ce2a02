//! The tensor-core decode kernel (`attend_decode_tc_<k>_<v>`, `AttendKernel::TensorDecode`:
//! raw codes as f16 MMA operands, the codecs' scales folded into the query and the softmax
//! weights, f32 accumulation) through layers, against the CPU path on the same stored words:
//! relative L2 ≤ 1e-3 per row (spec/attention.md's f16-product bound). The kernel-level cases
//! of tests/attend_kernels.rs also run it where the device has tensor cores; here: real
//! SmolLM2 q/k/v (decode rows), D ∈ {64, 128, 256}, GQA 1–8, windows, sinks, a custom scale,
//! rings that wrap, several splits, 1–3 query rows, and the typed refusals (pairs without tile
//! hooks, widths off 16, devices without tensor cores: lavapipe in CI, where the rest says why
//! it did not run; `KVPACK_REQUIRE_TENSOR=1`, the H200 runs, makes that a failure).

mod common;

use kvpack::{AttendKernel, AttendOptions, Context, Error, Input, KvLayer, Layer, PathChoice};
use rand::Rng;

fn opts() -> AttendOptions {
    AttendOptions::default().kernel(AttendKernel::TensorDecode)
}

/// [`common::gpu_vs_cpu`] on the tensor-core decode kernel, which must have run.
#[allow(clippy::too_many_arguments)]
fn decode_vs_cpu(
    ctx: &Context,
    method: &str,
    hkv: usize,
    d: usize,
    hq: usize,
    k: &[f32],
    v: &[f32],
    q: &[f32],
    o: &AttendOptions,
) -> f64 {
    let (err, ran) = common::gpu_vs_cpu(ctx, method, hkv, d, hq, k, v, q, o);
    assert!(
        ran.iter().any(|k| k.starts_with("attend_decode_tc")),
        "{method}: the tensor-core decode kernel did not run: {ran:?}"
    );
    err
}

#[test]
fn tensor_decode_refusals_are_typed() {
    let Ok(ctx) = common::gpu_context() else {
        common::skip("tensor_decode_refusals_are_typed", "no GPU adapter");
        return;
    };
    let mut rng = common::rng("tensor_decode_refusals");
    let (hkv, hq, t) = (2, 8, 96);
    let data = |rng: &mut rand::rngs::StdRng, n: usize| -> Vec<f32> {
        (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
    };
    // Pairs without tile hooks or off the hooks' layouts, and a width off 16: refused with
    // the reason, whatever the device.
    for (method, d, what) in [
        ("turboquant-mse:bits=4", 64, "transform the query"),
        ("kivi-4/turboquant-mse:bits=4", 64, "tile hooks"),
        ("kivi:bits=3,group=32,residual=32", 64, "3-bit"),
        ("kivi:bits=4,group=16,residual=16", 64, "blocks of 16"),
        ("kivi-4", 40, "40"),
    ] {
        let m = common::parse_method(method, hkv, d).expect("method");
        let mut l = Layer::new(&ctx, hkv, d, &m, PathChoice::WgslSubgroup).expect("layer");
        let k = data(&mut rng, t * hkv * d);
        l.append(Input::F32(&k), Input::F32(&k)).expect("append");
        let q = data(&mut rng, hq * d);
        match l.attend(&q, hq, &opts()) {
            Err(Error::PathUnavailable { reason, .. }) => {
                eprintln!("tensor decode, {method} D {d}: refused: {reason}");
                if ctx.tensor_cores().is_ok() {
                    assert!(
                        reason.contains(what),
                        "{method}: reason {reason:?} should name {what:?}"
                    );
                }
            }
            other => panic!("tensor decode on {method} D {d}: {other:?}"),
        }
    }
    // Where the device has no tensor cores (or on the workgroup-memory path, everywhere):
    // the device's reason, typed.
    let m = common::parse_method("kivi-4", hkv, 64).expect("method");
    let k = data(&mut rng, t * hkv * 64);
    let q = data(&mut rng, hq * 64);
    let mut wl = Layer::new(&ctx, hkv, 64, &m, PathChoice::WgslWorkgroup).expect("layer");
    wl.append(Input::F32(&k), Input::F32(&k)).expect("append");
    match wl.attend(&q, hq, &opts()) {
        Err(Error::PathUnavailable { reason, .. }) => {
            eprintln!("tensor decode on wgsl-workgroup: refused: {reason}")
        }
        other => panic!("tensor decode on wgsl-workgroup: {other:?}"),
    }
    if let Err(why) = ctx.tensor_cores() {
        let mut l = Layer::new(&ctx, hkv, 64, &m, PathChoice::WgslSubgroup).expect("layer");
        l.append(Input::F32(&k), Input::F32(&k)).expect("append");
        match l.attend(&q, hq, &opts()) {
            Err(Error::PathUnavailable { reason, .. }) => assert_eq!(reason, why),
            other => panic!("tensor decode without tensor cores: {other:?}"),
        }
        eprintln!("tensor_decode_refusals_are_typed: no tensor cores here ({why}); refused, typed");
    }
}

/// SmolLM2-135M's real q/k/v (every 5th layer, both fixtures): the last query rows (a decode
/// step, and 3 rows) on the tensor-core decode kernel against the CPU path.
#[test]
fn tensor_decode_on_smollm2() {
    let Some(ctx) = common::tensor_ctx("tensor_decode_on_smollm2") else {
        return;
    };
    for fixture in ["paris.safetensors", "story-512.safetensors"] {
        let Some(path) = common::shared_fixture(fixture, "tensor_decode_on_smollm2") else {
            continue;
        };
        let (shape, k) = common::load_f16(&path, "k");
        let (_, v) = common::load_f16(&path, "v");
        let (qshape, q) = common::load_f16(&path, "q");
        let (layers, tokens, hkv, d) = (shape[0], shape[1], shape[2], shape[3]);
        let hq = qshape[2];
        let f = |x: &[half::f16]| x.iter().map(|x| x.to_f32()).collect::<Vec<f32>>();
        for method in ["kivi-4", "kivi-2", "kivi:bits=4,group=32,residual=0", "f16"] {
            let mut worst = 0f64;
            for l in (0..layers).step_by(5) {
                let per = tokens * hkv * d;
                let (kl, vl) = (f(&k[l * per..(l + 1) * per]), f(&v[l * per..(l + 1) * per]));
                for tq in [1, 3] {
                    let qper = tokens * hq * d;
                    let ql = f(&q[l * qper + (tokens - tq) * hq * d..(l + 1) * qper]);
                    let err = decode_vs_cpu(&ctx, method, hkv, d, hq, &kl, &vl, &ql, &opts());
                    worst = worst.max(err);
                    assert!(
                        err <= 1e-3,
                        "{method} layer {l} Tq {tq}: worst row rel L2 {err:e}"
                    );
                }
            }
            eprintln!(
                "tensor_decode_on_smollm2 {} {method}: worst row rel L2 vs the CPU path {worst:e}",
                path.display()
            );
        }
    }
}

#[test]
fn tensor_decode_shapes() {
    let Some(ctx) = common::tensor_ctx("tensor_decode_shapes") else {
        return;
    };
    let mut rng = common::rng("tensor_decode_shapes");
    let cases: &[common::ShapeCase] = &[
        ("kivi-4", 2, 64, 8, 333, 1, None, 0, None, None),
        ("kivi-2", 8, 128, 32, 1000, 1, None, 0, None, Some(128)),
        (
            "kivi:bits=2,group=32,residual=32",
            3,
            64,
            9,
            700,
            2,
            Some(100),
            4,
            None,
            Some(64),
        ),
        (
            "kivi:bits=8,group=32,residual=64",
            2,
            128,
            16,
            517,
            1,
            None,
            0,
            Some(0.05),
            None,
        ),
        (
            "kivi:bits=1,group=32,residual=32",
            1,
            128,
            8,
            401,
            1,
            Some(200),
            0,
            None,
            Some(96),
        ),
        (
            "kivi:bits=4,group=64,residual=0",
            2,
            128,
            2,
            640,
            3,
            None,
            2,
            None,
            Some(128),
        ),
        (
            "kivi:bits=4,group=32,residual=32",
            1,
            128,
            1,
            300,
            1,
            None,
            0,
            None,
            None,
        ),
        ("f16", 1, 128, 8, 257, 1, Some(64), 0, None, None),
        ("f16", 2, 64, 8, 1000, 1, None, 1, None, Some(96)),
        ("f16", 3, 16, 6, 77, 3, None, 0, Some(0.1), None),
        (
            "f16/kivi:bits=4,group=32,residual=32",
            2,
            128,
            8,
            300,
            1,
            None,
            0,
            None,
            Some(64),
        ),
        (
            "f16:residual=16",
            4,
            256,
            4,
            131,
            2,
            Some(40),
            2,
            None,
            None,
        ),
        ("kivi-4", 2, 256, 4, 300, 1, None, 0, None, Some(64)),
        ("kivi-2", 2, 256, 16, 500, 1, Some(128), 1, None, None),
    ];
    // Random q/k/v over head widths, GQA ratios, windows and sinks, a custom scale, wrapped
    // rings, several splits and 1–3 query rows.
    for c in cases {
        let &(method, hkv, d, hq, t, tq, window, sinks, _, _) = c;
        let (k, v, q, o) = common::shape_case_inputs(&mut rng, c, AttendKernel::TensorDecode);
        let err = decode_vs_cpu(&ctx, method, hkv, d, hq, &k, &v, &q, &o);
        eprintln!(
            "tensor_decode_shapes {method} hkv {hkv} D {d} hq {hq} T {t} Tq {tq} window {window:?} sinks {sinks}: worst row rel L2 {err:e}"
        );
        assert!(err <= 1e-3, "{method} D {d}: worst row rel L2 {err:e}");
    }
}

/// The f16-rows kernel's branches, rising scores and a ring (tests/common/tc_decode.rs),
/// through layers.
#[test]
fn tensor_decode_rows_kernel() {
    let Some(ctx) = common::tensor_ctx("tensor_decode_rows_kernel") else {
        return;
    };
    let mut rng = common::rng("tensor_decode_rows_kernel");
    for (c, rising) in common::tc_decode::cases() {
        let (q, mut k, v) = common::attend_plans::qkv(&mut rng, &c);
        if rising {
            common::tc_decode::rising(&mut k, c.hkv, c.d);
        }
        let o = c.opts.kernel(AttendKernel::TensorDecode);
        let err = decode_vs_cpu(&ctx, c.method, c.hkv, c.d, c.hq, &k, &v, &q, &o);
        eprintln!(
            "tensor_decode_rows_kernel {}: worst row rel L2 {err:e}",
            c.what
        );
        assert!(err <= 1e-3, "{}: worst row rel L2 {err:e}", c.what);
    }
}
