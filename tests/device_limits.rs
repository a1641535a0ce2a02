//! Device limits that small or unusual devices have and lavapipe does not (issue 19 point 4),
//! on both WGSL paths (subgroup and workgroup-memory kernel variants):
//!
//! - the x/y workgroup grid split, for every kernel a layer dispatches (the quantize kernels
//!   of each codec, the attention kernels, the partials' merge, and the dequantize kernels of
//!   its reconstruction): layers on a context whose `max_workgroups_per_dimension` is lowered
//!   store bit-identical words, return bit-identical attention and reconstruct bit-identically
//!   to a layer on the device's own limit, and the context's dispatch log shows each kernel
//!   really ran with y > 1;
//! - small storage bindings: a residual window or a block of f16 rows beyond the binding limit
//!   and attention partials beyond it are the typed `Error::Limit`, and the cache is intact
//!   afterwards (same words, length, memory; attention still answers as before).
//! - lavapipe's loop limit: attention splits up to `plan::LOOP_LIMITED_SPLIT` tokens are correct
//!   there and longer ones refused (`long_splits`).

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::Target;
use kvpack::{AttendKernel, AttendOptions, Context, Error, Input, KvLayer, Method};
use rand::Rng;

const H: usize = 2;
const D: usize = 40;
const ROW: usize = H * D;

/// One quantize path per codec (both KIVI sides and parameter storages, TurboQuant MSE, RVQ
/// and Prod, QJL keys, VecInfer on a synthetic calibration of this geometry, the f16
/// baseline), with the dequantize kernels its reconstruction must dispatch on a GPU layer
/// (each must run split too). TurboQuant-Prod keys, QJL keys and VecInfer have no GPU
/// dequantize kernel (`Codec::gpu_decodes`): their reconstruction reads the words back and
/// decodes on the CPU, which the test prints.
const SPLIT_SPECS: &[(&str, &[&str])] = &[
    ("f16:residual=0", &[]),
    (
        "kivi:bits=4,group=32,residual=32",
        &["kivi_dequant_keys", "kivi_dequant_values"],
    ),
    (
        "kivi:kbits=2,vbits=3,group=16,vgroup=24,residual=16,params=f32",
        &["kivi_dequant_keys", "kivi_dequant_values"],
    ),
    ("turboquant-mse:bits=3,residual=8", &["turboquant_dequant"]),
    (
        "f16/turboquant-rvq:bits=2,residual=8",
        &["turboquant_dequant"],
    ),
    ("qjl:m=64/f16:residual=8", &[]),
    (
        "turboquant-prod:bits=3,residual=8/turboquant-mse:bits=2",
        &["turboquant_dequant"],
    ),
    ("vecinfer:kbits=1,vbits=2,residual=8,calib=@synthetic", &[]),
];

/// The reconstruction of each side that has one (QJL keys have none: `None`).
type Recon = [Option<kvpack::Result<Vec<f32>>>; 2];

fn reconstruct(l: &dyn KvLayer, method: &Method) -> Recon {
    use kvpack::store::Side;
    [
        (Side::Keys, method.key().reconstructs()),
        (Side::Values, method.value().reconstructs()),
    ]
    .map(|(side, has)| has.then(|| l.reconstruct_side(side)))
}

/// Append chunks (tokens): a prefill, single tokens that flush blocks, a ragged chunk.
const CHUNKS: &[usize] = &[100, 1, 1, 29, 120];

fn queries(rng: &mut impl Rng) -> Vec<(String, Vec<f32>, usize, AttendOptions)> {
    let q = |rng: &mut dyn rand::RngCore, tq: usize, hq: usize| -> Vec<f32> {
        (0..tq * hq * D)
            .map(|_| rng.random_range(-1.5f32..1.5))
            .collect()
    };
    let mut v = Vec::new();
    for (tq, hq, kernel, chunk) in [
        (1, 16, AttendKernel::Decode, Some(32)),
        (8, 8, AttendKernel::Prefill, Some(32)),
        (16, 8, AttendKernel::Prefill, None),
        (16, 8, AttendKernel::Decode, None),
    ] {
        let opts = AttendOptions::default().kernel(kernel).chunk_tokens(chunk);
        v.push((
            format!("Tq={tq} Hq={hq} {kernel:?} chunk {chunk:?}"),
            q(rng, tq, hq),
            hq,
            opts,
        ));
    }
    v
}

fn grid_split_every_kernel(t: &Target) {
    let Target::Wgsl(base, path) = t else {
        unreachable!("WGSL targets only");
    };
    let mut rng = common::rng("grid_split_every_kernel");
    let total: usize = CHUNKS.iter().sum();
    let k: Vec<f32> = (0..total * ROW)
        .map(|i| (i % 7) as f32 * 0.3 + rng.random_range(-1.0f32..1.0))
        .collect();
    let v: Vec<f32> = (0..total * ROW)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    let qs = queries(&mut rng);
    for &(spec, dequant) in SPLIT_SPECS {
        let started = std::time::Instant::now();
        let method = common::parse_method(spec, H, D).expect("method");
        // The reference: the device's own limit, logged for each kernel's largest grid.
        let logged = base.with_dispatch_log();
        let mut want = method.layer(&logged, H, D, *path).expect("layer");
        let mut at = 0;
        for &n in CHUNKS {
            want.append(
                Input::F32(&k[at * ROW..(at + n) * ROW]),
                Input::F32(&v[at * ROW..(at + n) * ROW]),
            )
            .expect("append");
            at += n;
        }
        let want_snap = want.snapshot().expect("snapshot");
        // (A kernel a codec does not serve, e.g. prefill for TurboQuant keys, is the same
        // typed error on every limit.)
        let want_out: Vec<kvpack::Result<Vec<f32>>> = qs
            .iter()
            .map(|(_, q, hq, o)| want.attend(q, *hq, o))
            .collect();
        // The reconstruction (GPU dequantize kernels where the codec has them).
        let before = logged.dispatches().len();
        let want_recon = reconstruct(&*want, &method);
        let recon_kernels: BTreeSet<&str> =
            logged.dispatches()[before..].iter().map(|d| d.0).collect();
        for (side, r) in ["keys", "values"].iter().zip(&want_recon) {
            match r {
                None => eprintln!("NOTE {spec}: {side} have no reconstruction"),
                Some(Err(e)) => panic!("{spec}: {side} reconstruction: {e}"),
                Some(Ok(_)) => {}
            }
        }
        let expected: BTreeSet<&str> = dequant.iter().copied().collect();
        assert_eq!(
            recon_kernels,
            expected,
            "{} {spec}: the kernels its reconstruction dispatched",
            t.name()
        );
        let mut largest: BTreeMap<&str, u32> = BTreeMap::new();
        // (The device's subgroup probes run once per device, not per layer.)
        for (kernel, x, y) in logged
            .dispatches()
            .into_iter()
            .filter(|d| !d.0.starts_with("subgroup_probe"))
        {
            assert_eq!(y, 1, "{kernel}: split on the device's own limit");
            let e = largest.entry(kernel).or_default();
            *e = (*e).max(x);
        }
        // Each lowered limit L splits the kernels whose grids exceed L; a grid beyond L² is a
        // typed Limit that must leave the layer as it was.
        let mut split: BTreeSet<&str> = BTreeSet::new();
        // For each kernel, the smallest limit at which its largest grid splits (√ of it):
        // the others' grids then split too, or are beyond L² (a typed Limit; an append that
        // hits it is retried in halves, as an application with a small device would).
        let mut limits: Vec<u32> = largest
            .values()
            .filter(|&&n| n > 2)
            .map(|&n| (f64::from(n).sqrt().ceil() as u32).max(2))
            .collect();
        limits.sort_unstable();
        limits.dedup();
        for lim in limits {
            let ctx = base
                .with_max_workgroups_per_dimension(lim)
                .expect("lower")
                .with_dispatch_log();
            let mut l = method.layer(&ctx, H, D, *path).expect("layer");
            let mut at = 0;
            let mut complete = true;
            for &n in CHUNKS {
                complete &= append_halving(&mut *l, &ctx, &k, &v, at, n, &mut split, spec, lim);
                at += n;
            }
            if !complete {
                continue;
            }
            assert!(
                l.snapshot().expect("snapshot") == want_snap,
                "{} {spec}: max {lim} workgroups per dimension stored other words",
                t.name()
            );
            for ((what, q, hq, o), w) in qs.iter().zip(&want_out) {
                let before = ctx.dispatches().len();
                match (l.attend(q, *hq, o), w) {
                    (Err(Error::Config(a)), Err(Error::Config(b))) => assert_eq!(&a, b),
                    (_, Err(e)) => panic!("{spec} {what}: attend on the device's limit: {e}"),
                    (Ok(got), Ok(w)) => {
                        let same = got.len() == w.len()
                            && got.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(
                            same,
                            "{} {spec} {what}: max {lim} workgroups per dimension changed the output (worst rel L2 {:e})",
                            t.name(),
                            common::rel_l2_rows(&got, w, D)
                        );
                        split.extend(split_since(&ctx, before));
                    }
                    (
                        Err(Error::Limit {
                            what: "workgroups per dispatch",
                            ..
                        }),
                        _,
                    ) => {}
                    (Err(e), _) => panic!("{spec} {what} L={lim}: attend: {e}"),
                }
            }
            let before = ctx.dispatches().len();
            for ((side, got), w) in ["keys", "values"]
                .iter()
                .zip(reconstruct(&*l, &method))
                .zip(&want_recon)
            {
                match (got, w) {
                    (None, None) => {}
                    (Some(Ok(got)), Some(Ok(w))) => {
                        let same = got.len() == w.len()
                            && got.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(
                            same,
                            "{} {spec}: max {lim} workgroups per dimension changed the {side}' reconstruction",
                            t.name()
                        );
                    }
                    (
                        Some(Err(Error::Limit {
                            what: "workgroups per dispatch",
                            ..
                        })),
                        _,
                    ) => {}
                    (got, _) => panic!(
                        "{spec} L={lim}: {side}' reconstruction: {:?}",
                        got.map(|r| r.map(|v| v.len()))
                    ),
                }
            }
            split.extend(split_since(&ctx, before));
        }
        // Every kernel whose grid can split (more than 2 workgroups) ran split and agreed.
        let missing: Vec<_> = largest
            .iter()
            .filter(|(name, n)| **n > 2 && !split.contains(*name))
            .collect();
        eprintln!(
            "grid_split_every_kernel[{}] {spec}: kernels (largest grid) {largest:?}; ran split: {split:?}; reconstruction dispatched {recon_kernels:?} (a side without a GPU dequantize kernel decodes on the CPU) ({:.1} s)",
            t.name(),
            started.elapsed().as_secs_f64()
        );
        assert!(
            missing.is_empty(),
            "{} {spec}: never ran split over x and y: {missing:?}",
            t.name()
        );
        // The reconstruction's kernels have grids that can split, and did.
        for k in dequant {
            assert!(
                largest.get(k).is_some_and(|&n| n > 2) && split.contains(k),
                "{} {spec}: {k} (largest grid {:?}) never ran split",
                t.name(),
                largest.get(k)
            );
        }
    }
}
parity_tests!(@module grid_split_every_kernel, wgsl_subgroup, wgsl_workgroup);

/// Appends tokens `[at, at + n)`; an append refused for its grid (beyond L²) must change
/// nothing and is retried in two halves. False when a single token is refused.
#[allow(clippy::too_many_arguments)]
fn append_halving(
    l: &mut dyn KvLayer,
    ctx: &Context,
    k: &[f32],
    v: &[f32],
    at: usize,
    n: usize,
    split: &mut BTreeSet<&'static str>,
    spec: &str,
    lim: u32,
) -> bool {
    let before = ctx.dispatches().len();
    let (len, mem) = (l.len(), l.memory());
    match l.append(
        Input::F32(&k[at * ROW..(at + n) * ROW]),
        Input::F32(&v[at * ROW..(at + n) * ROW]),
    ) {
        Ok(()) => {
            split.extend(split_since(ctx, before));
            true
        }
        Err(Error::Limit {
            what: "workgroups per dispatch",
            ..
        }) => {
            assert_eq!(
                (l.len(), l.memory()),
                (len, mem),
                "{spec} L={lim}: refused append"
            );
            n > 1 && {
                let h = n / 2;
                append_halving(l, ctx, k, v, at, h, split, spec, lim)
                    && append_halving(l, ctx, k, v, at + h, n - h, split, spec, lim)
            }
        }
        Err(e) => panic!("{spec} L={lim}: append: {e}"),
    }
}

/// Kernels dispatched with y > 1 since the log held `from` entries.
fn split_since(ctx: &Context, from: usize) -> Vec<&'static str> {
    ctx.dispatches()[from..]
        .iter()
        .filter(|(_, _, y)| *y > 1)
        .map(|(k, _, _)| *k)
        .collect()
}

type State = (kvpack::Snapshot, kvpack::MemoryReport, usize);

fn state(l: &dyn KvLayer) -> State {
    (l.snapshot().expect("snapshot"), l.memory(), l.len())
}

/// Attention of one decode query against the layer's own CPU reference (the cache answers).
fn answers(l: &dyn KvLayer, q: &[f32], what: &str) -> Vec<f32> {
    let opts = AttendOptions::default();
    let got = l
        .attend(q, H, &opts)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let want = l.attend_reference(q, H, &opts).expect("reference");
    let err = common::rel_l2_rows(&got, &want, D);
    assert!(err < 1e-3, "{what}: attention off its reference by {err:e}");
    got
}

fn small_bindings_are_a_typed_limit(t: &Target) {
    let Target::Wgsl(base, path) = t else {
        unreachable!("WGSL targets only");
    };
    let mut rng = common::rng("small_bindings_are_a_typed_limit");
    let rows = |rng: &mut rand::rngs::StdRng, n: usize| -> Vec<f32> {
        (0..n * ROW)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect()
    };
    // f16 rows are 160 bytes. 5000 bytes hold 31 of them but not a block of 32.
    let small = base.with_max_storage_binding_size(5000).expect("lower");
    let limit = |r: kvpack::Result<()>, what: &str, want: &str| match r {
        Err(Error::Limit {
            what: w,
            needed,
            limit,
        }) => {
            assert!(
                w.contains(want),
                "{what}: Limit for `{w}`, expected `{want}`"
            );
            assert!(
                needed > limit && limit <= 5000,
                "{what}: needed {needed} limit {limit}"
            );
        }
        other => panic!("{what}: expected Error::Limit ({want}), got {other:?}"),
    };
    // A window of R + G − 1 = 95 rows cannot be one binding: refused when the layer is made.
    let made = Method::parse("kivi:bits=4,group=32,residual=64")
        .expect("method")
        .layer(&small, H, D, *path)
        .map(|_| ());
    limit(made, "R = 64 window", "residual window");
    // R = 0: the 31-row ring fits; the first whole block of f16 rows to quantize does not.
    let method = Method::parse("kivi:bits=4,group=32,residual=0").expect("method");
    let mut l = method.layer(&small, H, D, *path).expect("layer");
    l.append(
        Input::F32(&rows(&mut rng, 20)),
        Input::F32(&rows(&mut rng, 20)),
    )
    .expect("20 tokens stay in the window");
    let q: Vec<f32> = (0..H * D).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let before = state(&*l);
    let out = answers(&*l, &q, "before the refused append");
    let (k, v) = (rows(&mut rng, 20), rows(&mut rng, 20));
    limit(
        l.append(Input::F32(&k), Input::F32(&v)),
        "a block of 32 f16 rows",
        "block of f16 rows",
    );
    let after = state(&*l);
    assert!(
        after.0 == before.0,
        "{}: the refused append changed the words",
        t.name()
    );
    assert_eq!(
        (after.1, after.2),
        (before.1, before.2),
        "{}: memory/len",
        t.name()
    );
    let again = answers(&*l, &q, "after the refused append");
    assert!(
        again
            .iter()
            .zip(&out)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "{}: attention changed after the refused append",
        t.name()
    );
    // Attention whose query or partials exceed the binding: a typed Limit, nothing changed.
    let ctx = base
        .with_max_storage_binding_size(16 * 1024)
        .expect("lower");
    let mut l = Method::parse("kivi:bits=4,group=32,residual=32")
        .expect("method")
        .layer(&ctx, H, D, *path)
        .expect("layer");
    l.append(
        Input::F32(&rows(&mut rng, 600)),
        Input::F32(&rows(&mut rng, 600)),
    )
    .expect("600 tokens in segments");
    let before = state(&*l);
    let out = answers(&*l, &q, "600 tokens");
    // 64 query rows of 8 heads: the queries alone exceed a binding; 12 rows: the queries
    // fit, their partials over the segments do not.
    for (tq, kernel) in [
        (64, AttendKernel::Prefill),
        (64, AttendKernel::Decode),
        (12, AttendKernel::Prefill),
        (12, AttendKernel::Decode),
    ] {
        let big_q: Vec<f32> = (0..tq * 8 * D)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let opts = AttendOptions::default().kernel(kernel);
        match l.attend(&big_q, 8, &opts) {
            Err(Error::Limit {
                what,
                needed,
                limit,
            }) => {
                assert!(
                    needed > limit && limit <= 16 * 1024,
                    "{what}: {needed} vs {limit}"
                );
                eprintln!(
                    "{} Tq={tq} {kernel:?}: Limit `{what}` ({needed} > {limit})",
                    t.name()
                );
            }
            other => panic!(
                "{} {kernel:?}: Tq = {tq} over 16 KiB bindings: {other:?}",
                t.name()
            ),
        }
    }
    let after = state(&*l);
    assert!(after.0 == before.0 && (after.1, after.2) == (before.1, before.2));
    let again = answers(&*l, &q, "after the refused attention");
    assert!(
        again
            .iter()
            .zip(&out)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    );
}
parity_tests!(@module small_bindings_are_a_typed_limit, wgsl_subgroup, wgsl_workgroup);

/// Splits as long as lavapipe runs correctly (`plan::LOOP_LIMITED_SPLIT`: its shader loops end
/// after 65,535 iterations in all, without an error): on both kernels a split of 65,536 tokens
/// attends over every token (values with a mean far from 0, so that a split cut short shows),
/// and one of 32 tokens more is the typed `Error::Limit` on lavapipe and correct elsewhere.
fn long_splits(t: &Target) {
    let Target::Wgsl(ctx, path) = t else {
        unreachable!("WGSL targets only");
    };
    let cap = kvpack::attention::plan::LOOP_LIMITED_SPLIT;
    let limited = kvpack::attention::plan::split_cap(ctx.adapter_info()).is_some();
    let mut rng = common::rng("long_splits");
    // D = 256: the prefill kernel's 8-token tiles, twice the iterations per token.
    for d in [64, 256] {
        let (tokens, tq) = (cap + 1000, 4);
        let (q, k, mut v) = common::random_qkv(&mut rng, tokens, tq, 1, 1, d);
        let late = v.len() * 9 / 10;
        v[late..].iter_mut().for_each(|x| *x += 3.0);
        let mut l = kvpack::Layer::f16(ctx, 1, d, *path).expect("layer");
        l.append(Input::F32(&k), Input::F32(&v)).expect("append");
        for kernel in [AttendKernel::Decode, AttendKernel::Prefill] {
            for chunk in [cap, cap + 32] {
                let opts = AttendOptions::default().kernel(kernel).chunk_tokens(chunk);
                match l.attend(&q, 1, &opts) {
                    Err(Error::Limit {
                        what,
                        needed,
                        limit,
                    }) if limited && chunk > cap && what.contains("lavapipe") => {
                        assert_eq!((needed, limit), (chunk as u64, cap as u64));
                        eprintln!(
                            "{} D={d} {kernel:?} split {chunk}: refused: {what}",
                            t.name()
                        );
                    }
                    Ok(out) => {
                        assert!(
                            !limited || chunk <= cap,
                            "{kernel:?}: a {chunk}-token split ran"
                        );
                        let r = l.attend_reference(&q, 1, &opts).expect("reference");
                        let err = common::rel_l2_rows(&out, &r, d);
                        assert!(err <= 1e-4, "{kernel:?} split {chunk}: worst row {err:e}");
                        eprintln!(
                            "{} D={d} {kernel:?} split {chunk}: worst row {err:e}",
                            t.name()
                        );
                    }
                    Err(e) => panic!("{kernel:?} split {chunk}: {e}"),
                }
            }
        }
    }
}
parity_tests!(@module long_splits, wgsl_subgroup, wgsl_workgroup);
