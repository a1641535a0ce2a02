//! Which tokens each output row attended, against ../shared/spec/attention.md written out
//! here (causal `j ≤ p_i` with `p_i = T − Tq + i`; window `j > p_i − W` unless `j` is one of the
//! first `sinks` tokens; query head h reads KV head `h / (Hq / Hkv)`), not imported from src.
//!
//! Keys are all zero, so every visible token gets the same weight and each output row is the
//! mean of the value rows it attended. Value rows are position-coded: channel 0 is j / 2048
//! (exact in f16), the other channels random per (token, KV head), so a row that attended a
//! different set of tokens, or the wrong KV head, is off by far more than f32 rounding. The
//! expected row is the f64 mean of the layer's own reconstructed values over the oracle's set.
//!
//! Paths: the CPU layer; the kernels from their plans (decode and prefill kernel, splits +
//! merge) on WGSL (subgroup, workgroup) and the emulated MSL, with small segments and rings
//! that wrap; the layer API on WGSL with small bindings (segment growth) and a lowered
//! per-dimension workgroup limit (every attention and KIVI kernel split over x and y).

mod common;

use common::Target;
use common::attend_plans::{Case, on_target};
use kvpack::{AttendKernel, AttendOptions, Context, Input, KvLayer, Layer, Method, PathChoice};
use rand::Rng;

/// The spec's visibility of key j to query row i.
fn visible(j: usize, i: usize, t: usize, tq: usize, window: Option<usize>, sinks: usize) -> bool {
    let p = (t - tq + i) as i64;
    let j_ = j as i64;
    if j_ > p {
        return false;
    }
    match window {
        None => true,
        Some(w) => j_ > p - w as i64 || j < sinks,
    }
}

/// Expected output `[Tq, Hq, D]`: the mean of the reconstructed value rows each row sees.
fn oracle(c: &Case, vh: &[f32]) -> Vec<f32> {
    let (row, ratio) = (c.hkv * c.d, c.hq / c.hkv);
    let mut out = vec![0f32; c.tq * c.hq * c.d];
    for i in 0..c.tq {
        for h in 0..c.hq {
            let kv = h / ratio;
            let seen: Vec<usize> = (0..c.t)
                .filter(|&j| visible(j, i, c.t, c.tq, c.opts.window, c.opts.sinks))
                .collect();
            assert!(!seen.is_empty(), "{}: row {i} sees no token", c.what);
            for ch in 0..c.d {
                let s: f64 = seen
                    .iter()
                    .map(|&j| f64::from(vh[j * row + kv * c.d + ch]))
                    .sum();
                out[(i * c.hq + h) * c.d + ch] = (s / seen.len() as f64) as f32;
            }
        }
    }
    out
}

fn check(what: &str, got: &[f32], want: &[f32], c: &Case) {
    assert_eq!(got.len(), want.len(), "{what}: output length");
    for (e, (&g, &w)) in got.iter().zip(want).enumerate() {
        let (i, h, ch) = (e / (c.hq * c.d), e / c.d % c.hq, e % c.d);
        assert!(
            (g - w).abs() <= 2e-5 + 1e-4 * w.abs(),
            "{what}: row {i} head {h} channel {ch}: {g} vs the oracle's {w} (it attended another set of tokens)"
        );
    }
}

/// The grid: every edge of the mask, GQA ratios 1..=8, D in {41, 64, 80, 96, 128, 256}.
fn grid() -> Vec<Case> {
    let w =
        |window: usize, sinks: usize| AttendOptions::default().window(Some(window)).sinks(sinks);
    let base = Case {
        what: "",
        method: "f16",
        t: 100,
        tq: 1,
        hq: 2,
        hkv: 2,
        d: 64,
        opts: AttendOptions::default(),
        seg_tokens: 1 << 20,
        ring_extra: 0,
        target: 64,
    };
    vec![
        Case {
            what: "W >= T, GQA 1, D=41",
            t: 100,
            tq: 3,
            hq: 2,
            hkv: 2,
            d: 41,
            opts: w(150, 0),
            ..base
        },
        Case {
            what: "W = 1, GQA 2, D=64",
            t: 90,
            tq: 4,
            hq: 2,
            hkv: 1,
            d: 64,
            opts: w(1, 0),
            ..base
        },
        Case {
            what: "sinks >= W, GQA 3, D=80",
            t: 120,
            tq: 2,
            hq: 6,
            hkv: 2,
            d: 80,
            opts: w(5, 8),
            ..base
        },
        Case {
            what: "sinks > T, GQA 4, D=96",
            t: 40,
            tq: 3,
            hq: 4,
            hkv: 1,
            d: 96,
            opts: w(10, 50),
            ..base
        },
        Case {
            what: "Tq > W, GQA 5, D=128, kivi keys",
            method: "kivi:bits=4,group=32/f16:residual=32",
            t: 200,
            tq: 12,
            hq: 5,
            hkv: 1,
            d: 128,
            opts: w(6, 2),
            ..base
        },
        Case {
            what: "no window, GQA 6, D=256, two segments",
            t: 300,
            tq: 1,
            hq: 6,
            hkv: 1,
            d: 256,
            seg_tokens: 128,
            ..base
        },
        Case {
            what: "window crossing the ring and segment boundaries, GQA 7, D=64",
            method: "kivi:bits=2,group=32/f16:residual=64",
            t: 333,
            tq: 5,
            hq: 7,
            hkv: 1,
            d: 64,
            opts: w(100, 3),
            seg_tokens: 128,
            ring_extra: 7,
            target: 8,
        },
        Case {
            what: "window inside the ring, kivi values, GQA 8, D=41, many splits",
            method: "kivi:bits=4,group=32,vgroup=16,residual=64",
            t: 500,
            tq: 6,
            hq: 8,
            hkv: 1,
            d: 41,
            opts: w(40, 1),
            seg_tokens: 128,
            ring_extra: 3,
            target: 256,
        },
    ]
}

/// Zero keys, position-coded values (`[T, Hkv, D]`), random queries.
fn inputs(rng: &mut impl Rng, c: &Case) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let row = c.hkv * c.d;
    let k = vec![0f32; c.t * row];
    let v = (0..c.t * row)
        .map(|e| {
            if e % c.d == 0 {
                (e / row) as f32 / 2048.0
            } else {
                rng.random_range(-1.0f32..1.0)
            }
        })
        .collect();
    let q = (0..c.tq * c.hq * c.d)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    (q, k, v)
}

fn mask_oracle(t: &Target) {
    let mut rng = common::rng("mask_oracle");
    let cpu = Context::cpu();
    for (n, c) in grid().into_iter().enumerate() {
        let (q, k, v) = inputs(&mut rng, &c);
        let method = Method::parse(c.method).expect("method");
        let mut layer = Layer::new(&cpu, c.hkv, c.d, &method, PathChoice::Cpu).expect("layer");
        layer
            .append(Input::F32(&k), Input::F32(&v))
            .expect("append");
        let (_, vh) = layer.reconstruct().expect("reconstruct");
        let want = oracle(&c, &vh);
        if let Target::Cpu(_) = t {
            let got = layer.attend(&q, c.hq, &c.opts).expect("attend");
            check(&format!("cpu {}", c.what), &got, &want, &c);
            continue;
        }
        let snap = layer.snapshot().expect("snapshot");
        // Both kernels on every case where the grid's filter (KVPACK_MASK_BOTH=1) asks; by
        // default the cases alternate between them (pipelines per head width dominate the
        // runtime on lavapipe).
        let both = std::env::var("KVPACK_MASK_BOTH").is_ok_and(|v| v == "1");
        let kernels: &[AttendKernel] = if both {
            &[AttendKernel::Decode, AttendKernel::Prefill]
        } else if n % 2 == 0 {
            &[AttendKernel::Decode]
        } else {
            &[AttendKernel::Prefill]
        };
        for &kernel in kernels {
            let c = Case {
                opts: c.opts.kernel(kernel),
                ..c
            };
            let (got, dispatches, direct) =
                on_target(t, &c, &layer, &snap, &q).unwrap_or_else(|e| panic!("{}: {e}", c.what));
            eprintln!(
                "mask_oracle[{}] {} ({kernel:?}): {dispatches} dispatches, direct {direct}",
                t.name(),
                c.what
            );
            check(
                &format!("{} {} ({kernel:?})", t.name(), c.what),
                &got,
                &want,
                &c,
            );
        }
    }
}
parity_tests!(mask_oracle, msl);

/// The layer API on a GPU with small storage bindings (segments grow while appending in
/// chunks) and at most 16 workgroups per grid dimension (every kernel split over x and y),
/// against the oracle.
fn mask_oracle_layer_split_grid(t: &Target) {
    let Target::Wgsl(ctx, path) = t else {
        unreachable!("instantiated for the WGSL targets only");
    };
    let ctx = ctx
        .with_max_storage_binding_size(64 * 1024)
        .and_then(|c| c.with_max_workgroups_per_dimension(16))
        .expect("lowered limits");
    let mut rng = common::rng("mask_oracle_layer_split_grid");
    for c in grid().into_iter().filter(|c| c.t >= 300) {
        let (q, k, v) = inputs(&mut rng, &c);
        let method = Method::parse(c.method).expect("method");
        let mut layer = Layer::new(&ctx, c.hkv, c.d, &method, *path).expect("layer");
        let row = c.hkv * c.d;
        let mut at = 0;
        for n in [37, 1, 90, usize::MAX] {
            let n = n.min(c.t - at);
            layer
                .append(
                    Input::F32(&k[at * row..(at + n) * row]),
                    Input::F32(&v[at * row..(at + n) * row]),
                )
                .unwrap_or_else(|e| panic!("{} {}: append: {e}", t.name(), c.what));
            at += n;
        }
        let (_, vh) = layer.reconstruct().expect("reconstruct");
        let want = oracle(&c, &vh);
        for kernel in [AttendKernel::Decode, AttendKernel::Prefill] {
            let got = layer
                .attend(&q, c.hq, &c.opts.kernel(kernel))
                .unwrap_or_else(|e| panic!("{} {}: attend: {e}", t.name(), c.what));
            check(
                &format!("{} layer, split grid, {} ({kernel:?})", t.name(), c.what),
                &got,
                &want,
                &c,
            );
        }
    }
}
parity_tests!(@module mask_oracle_layer_split_grid, wgsl_subgroup);

/// Regression (found by this oracle): the MSL decode kernel returned NaN rows for a window that
/// crosses from the quantized values into a residual ring that wraps (ring capacity above the
/// window's need, stale slots holding NaN): its ring rows were clamped from above only, so a
/// lane's tokens below Q read stale slots, weighted 0 (0 × NaN = NaN). Both WGSL variants clamp
/// to [Q, last]; msl/attend/attend_core.metal `attend_ring_rows` now does too.
#[test]
fn mask_oracle_msl_window_into_wrapped_ring() {
    let Some(t) = common::target("msl_emulated", "mask_oracle_msl_window_into_wrapped_ring") else {
        return;
    };
    let mut rng = common::rng("mask_oracle_msl_window_into_wrapped_ring");
    let c = Case {
        what: "window crossing into a wrapped ring",
        method: "kivi:bits=2,group=32/f16:residual=64",
        t: 333,
        tq: 5,
        hq: 7,
        hkv: 1,
        d: 64,
        opts: AttendOptions::default()
            .window(Some(100))
            .sinks(3)
            .kernel(AttendKernel::Decode),
        seg_tokens: 128,
        ring_extra: 7,
        target: 8,
    };
    let (q, k, v) = inputs(&mut rng, &c);
    let method = Method::parse(c.method).expect("method");
    let mut layer =
        Layer::new(&Context::cpu(), c.hkv, c.d, &method, PathChoice::Cpu).expect("layer");
    layer
        .append(Input::F32(&k), Input::F32(&v))
        .expect("append");
    let (_, vh) = layer.reconstruct().expect("reconstruct");
    let snap = layer.snapshot().expect("snapshot");
    let (got, _, _) = on_target(&t, &c, &layer, &snap, &q).expect("kernels");
    check(
        "msl-emulated window into a wrapped ring",
        &got,
        &oracle(&c, &vh),
        &c,
    );
}

/// `ATT_SG_WIDE = 1` (a 32-invocation slice is one subgroup: the reduction on every 32- and
/// 64-wide GPU) on WGSL: the kernels specialize on the device's subgroup width
/// (`attention::gpu::wide_subgroups`), so this runs the oracle with `ATT_SG_WIDE = 1` wherever
/// subgroups are at least 32 wide. lavapipe's are 8 wide: there it prints a SKIP line, and
/// `KVPACK_REQUIRE_WIDE_SUBGROUPS=1` (the H200 run) makes that a failure. The emulated MSL runs
/// 32-lane SIMD groups in every `msl_emulated` test (its attention kernels are written for 32).
#[test]
fn mask_oracle_wide_subgroups() {
    let Some(t) = common::target("wgsl_subgroup", "mask_oracle_wide_subgroups") else {
        return;
    };
    let wide = common::attend_plans::wide_for(&t);
    let info = t
        .ctx()
        .adapter_info()
        .map(|i| (i.name.clone(), i.subgroup_min_size, i.subgroup_max_size));
    if !wide {
        let msg = format!(
            "SKIP mask_oracle_wide_subgroups because the adapter's subgroups are narrower than 32 ({info:?}): ATT_SG_WIDE = 1 cannot run here"
        );
        if std::env::var("KVPACK_REQUIRE_WIDE_SUBGROUPS").is_ok_and(|v| v == "1") {
            panic!("{msg} (KVPACK_REQUIRE_WIDE_SUBGROUPS=1 forbids this skip)");
        }
        eprintln!("{msg}");
        return;
    }
    eprintln!("mask_oracle_wide_subgroups: ATT_SG_WIDE = 1 on {info:?}");
    mask_oracle(&t);
}
