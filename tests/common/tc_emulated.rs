//! The tensor-core prefill kernel's cases on a handle that emulates cooperative matrices
//! (`Context::with_emulated_tensor_cores`; tests/tensor_emulated.rs and the mutants'
//! `wgsl_tensor_emulated` target): random q/k/v at head widths lavapipe's 32 KiB of workgroup
//! storage holds (16, 32), with windows, sinks, a custom scale, rings, a part-empty vector
//! block and several splits, against the CPU path on the same stored words (relative L2 ≤
//! 1e-3 per row, spec/attention.md's f16-product bound; f16 caches 1e-5: [`bound`]).

use kvpack::AttendKernel;

/// (method, hkv, d, hq, t, tq, window, sinks, scale, chunk tokens).
pub fn cases() -> Vec<super::ShapeCase> {
    vec![
        ("kivi-4", 2, 32, 8, 333, 16, None, 0, None, None),
        (
            "kivi:bits=2,group=32,residual=32",
            2,
            32,
            6,
            300,
            20,
            Some(100),
            4,
            None,
            Some(128),
        ),
        (
            "f16:residual=16",
            2,
            32,
            4,
            131,
            50,
            Some(40),
            2,
            None,
            None,
        ),
        ("kivi-4", 1, 32, 4, 200, 70, None, 0, Some(0.05), Some(64)),
        ("kivi-2", 1, 16, 2, 150, 24, None, 0, None, None),
        ("f16", 1, 16, 4, 97, 9, None, 0, None, None),
        // 8-bit codes: the key quads (no oct: eight codes span two words) and the value quads.
        (
            "kivi:bits=8,group=32,residual=32",
            1,
            32,
            4,
            160,
            12,
            None,
            0,
            None,
            None,
        ),
    ]
}

/// The bound of a tensor-core kernel's rows: spec/attention.md's f16-product rule (1e-3),
/// except for f16 caches on an emulating handle: there keys and values are exact in f16 and
/// the emulation's products are exact, so the only differences from the CPU path are the
/// remainders of the queries' and weights' hi / lo splits (2^-22 relative) and the order of
/// f32 sums; such rows agree within ~1e-6 (4e-7 to 9e-7 measured). 1e-5 there catches a
/// dropped low part (~1e-4), which the f16-product bound cannot.
pub fn bound(ctx: &kvpack::Context, method: &str) -> f64 {
    if ctx.tensor_cores_emulated() && method.split(':').next() == Some("f16") {
        1e-5
    } else {
        1e-3
    }
}

/// Runs every case on `ctx` (an emulating handle) with `seed`; panics on the first row past
/// the bound or a call that did not run the tensor-core kernel.
pub fn check(ctx: &kvpack::Context, seed: u64, verbose: bool) {
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for c in cases() {
        let (method, hkv, d, hq, t, tq, window, sinks, _, _) = c;
        let (k, v, q, o) = super::shape_case_inputs(&mut rng, &c, AttendKernel::Tensor);
        let (err, ran) = super::gpu_vs_cpu(ctx, method, hkv, d, hq, &k, &v, &q, &o);
        if verbose {
            eprintln!(
                "emulated tensor kernel {method} hkv {hkv} D {d} hq {hq} T {t} Tq {tq} window {window:?} sinks {sinks}: worst row rel L2 {err:e}, {} dispatches",
                ran.len()
            );
        }
        assert!(
            ran.iter().any(|k| k.starts_with("attend_prefill_tc")),
            "{method} D {d}: {ran:?}"
        );
        let tol = bound(ctx, method);
        assert!(
            err <= tol,
            "{method} D {d}: worst row rel L2 {err:e} (bound {tol:e})"
        );
    }
}

/// The kernel-level cases (tests/common/attend_plans.rs) of the mutants' emulated target: a
/// window with sinks over two segments, a wrapped ring with several splits, a part-empty
/// vector block, one long split whose keys rise along the cache (`what` says "keys rising":
/// the mutants scale them, tests/common/tc_decode.rs `rising_past`, so that the scores pass the
/// kernel's reference max by more than TC_TAU tile after tile and its rescale runs), all at
/// D = 32.
pub fn plan_cases() -> Vec<super::attend_plans::Case> {
    use super::attend_plans::Case;
    use kvpack::AttendOptions;
    let base = Case {
        what: "mutants: emulated tensor prefill kivi-4, D = 32, window 70 sinks 3, two segments",
        method: "kivi-4",
        t: 300,
        tq: 20,
        hq: 4,
        hkv: 2,
        d: 32,
        opts: AttendOptions::default().window(Some(70)).sinks(3),
        seg_tokens: 256,
        ring_extra: 0,
        target: 8,
    };
    vec![
        base,
        Case {
            what: "mutants: emulated tensor prefill kivi-2 G=32 residual 32, D = 32, wrapped ring, splits",
            method: "kivi:bits=2,group=32,residual=32",
            t: 250,
            tq: 24,
            hq: 6,
            hkv: 2,
            opts: AttendOptions::default(),
            seg_tokens: 1 << 20,
            ring_extra: 7,
            target: 16,
            ..base
        },
        Case {
            what: "mutants: emulated tensor prefill f16, D = 32, 70 rows (a part-empty block)",
            method: "f16:residual=16",
            t: 140,
            tq: 70,
            hq: 2,
            hkv: 1,
            opts: AttendOptions::default(),
            seg_tokens: 1 << 20,
            ring_extra: 3,
            target: 4,
            ..base
        },
        Case {
            what: "mutants: emulated tensor prefill f16, D = 32, 64-token splits (every split's last tile whole)",
            method: "f16:residual=16",
            t: 210,
            tq: 16,
            hq: 4,
            hkv: 1,
            opts: AttendOptions::default().chunk_tokens(Some(64)),
            seg_tokens: 1 << 20,
            ring_extra: 0,
            target: 4,
            ..base
        },
        Case {
            what: "mutants: emulated tensor prefill kivi-4, D = 32, one long split, keys rising",
            method: "kivi-4",
            t: 480,
            tq: 8,
            hq: 4,
            hkv: 1,
            opts: AttendOptions::default(),
            seg_tokens: 1 << 20,
            ring_extra: 0,
            target: 1,
            ..base
        },
        Case {
            what: "mutants: emulated tensor prefill kivi-8 G=32, D = 32 (key and value quads)",
            method: "kivi:bits=8,group=32,residual=32",
            t: 200,
            tq: 16,
            hq: 4,
            hkv: 1,
            opts: AttendOptions::default(),
            seg_tokens: 1 << 20,
            ring_extra: 0,
            target: 4,
            ..base
        },
    ]
}
