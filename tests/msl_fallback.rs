//! Metal's driver rejecting an MSL kernel (issue 20, portability): under `PathChoice::Auto` the
//! kernel runs its WGSL workgroup-memory variant, says so in the context's and the layer's
//! `describe()` (and the log), and computes what the CPU reference computes; an explicit
//! `PathChoice::Msl` request fails with the driver's message (`Error::Shader`).
//!
//! The deliberately broken source comes from `Context::with_broken_msl` (every MSL source
//! starts with `#error`). On Metal the real driver rejects it; on every other device (CI's
//! lavapipe) the same handle stands in for a Metal driver that rejects it, so this one body
//! runs everywhere, and what it checks beyond the driver's verdict (the fallback's paths, plans
//! and results) runs on real pipelines.

mod common;

use kvpack::{AttendOptions, Context, Error, Input, PathChoice};

const H: usize = 2;
const D: usize = 64;
const HQ: usize = 4;
const T: usize = 150;

/// Methods whose kernels differ in dispatch geometry between WGSL variants (TurboQuant's
/// quantize: 8 head pairs per workgroup on the subgroup variant, 1 in MSL), plus QJL's sign
/// words and the f16 value side.
const METHODS: [&str; 3] = [
    "kivi:bits=4,residual=32",
    "turboquant-mse:bits=3/kivi:bits=2",
    "qjl:m=64/f16",
];

fn data(seed: u32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let x = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8;
            (x % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn gpu() -> Option<Context> {
    match common::gpu_context() {
        Ok(c) => Some(c),
        Err(e) => {
            common::skip("msl_fallback", &e);
            None
        }
    }
}

#[test]
fn auto_runs_wgsl_where_the_driver_rejects_msl() {
    let Some(gpu) = gpu() else { return };
    let (k, v) = (data(1, T * H * D), data(2, T * H * D));
    let q = data(3, 3 * HQ * D);
    let mut fallbacks = Vec::new();
    for spec in METHODS {
        // A handle of its own per method: its first build of each kernel meets the driver.
        let ctx = gpu.with_broken_msl();
        let method = common::parse_method(spec, H, D).expect("method");
        let mut layer = method
            .layer(&ctx, H, D, PathChoice::Auto)
            .unwrap_or_else(|e| panic!("{spec}: layer: {e}"));
        // Auto chose MSL (the stand-in or the real Metal driver offers it) ...
        assert_eq!(
            layer.paths(),
            [kvpack::KernelPath::Msl; 2],
            "{spec}: Auto must try MSL first on Metal"
        );
        layer
            .prepare()
            .unwrap_or_else(|e| panic!("{spec}: prepare: {e}"));
        layer
            .append(Input::F32(&k), Input::F32(&v))
            .unwrap_or_else(|e| panic!("{spec}: append: {e}"));
        // ... and every kernel it used fell back and still computes the reference's numbers.
        let opts = AttendOptions::new().window(100).sinks(2);
        let got = layer.attend(&q, HQ, &opts).expect("attend");
        let want = layer.attend_reference(&q, HQ, &opts).expect("reference");
        let worst = common::rel_l2_rows(&got, &want, D);
        assert!(
            worst <= 1e-4,
            "{spec}: attention {worst:e} from the CPU reference"
        );
        let mut cpu = method
            .layer(&Context::cpu(), H, D, PathChoice::Cpu)
            .expect("cpu layer");
        cpu.append(Input::F32(&k), Input::F32(&v))
            .expect("cpu append");
        assert!(
            layer.snapshot().expect("snapshot") == cpu.snapshot().expect("cpu snapshot"),
            "{spec}: stored words differ from the CPU path's"
        );
        let note = layer.describe();
        assert!(
            note.contains("the Metal driver rejected the MSL of"),
            "{spec}: layer describe() does not say it fell back: {note}"
        );
        let described = ctx.describe().to_string();
        assert!(
            described.contains("(the Metal driver rejected its MSL:"),
            "{described}"
        );
        // A layer made after the rejection goes to WGSL directly (the key side: every key
        // codec here has an encode kernel, which the first layer built and saw rejected).
        let later = method
            .layer(&ctx, H, D, PathChoice::Auto)
            .expect("later layer");
        assert!(
            later.paths()[0] != kvpack::KernelPath::Msl,
            "{spec}: {:?}",
            later.paths()
        );
        fallbacks.extend(ctx.msl_fallbacks());
    }
    assert!(
        fallbacks.iter().any(|(k, _)| k.starts_with("attend_"))
            && fallbacks.iter().any(|(k, _)| *k == "turboquant_quant"),
        "{fallbacks:?}"
    );
    for (kernel, message) in &fallbacks {
        assert!(
            message.contains("deliberately broken MSL"),
            "{kernel}: the driver's message is not kept: {message}"
        );
    }
}

#[test]
fn explicit_msl_fails_with_the_drivers_message() {
    let Some(ctx) = gpu() else { return };
    // On a fresh handle (the first build meets the rejection) and on one where Auto already
    // fell back (the rejection is known): both are the driver's error, never WGSL.
    let fresh = ctx.with_broken_msl();
    let seen = ctx.with_broken_msl();
    let mut auto = common::parse_method("kivi-4", H, D)
        .and_then(|m| m.layer(&seen, H, D, PathChoice::Auto))
        .expect("auto layer");
    let (k, v) = (data(4, 40 * H * D), data(5, 40 * H * D));
    auto.append(Input::F32(&k), Input::F32(&v))
        .expect("auto append falls back");
    for (what, c) in [("fresh", &fresh), ("after a fallback", &seen)] {
        let made =
            common::parse_method("kivi-4", H, D).and_then(|m| m.layer(c, H, D, PathChoice::Msl));
        let result = made.and_then(|mut l| {
            l.append(Input::F32(&k), Input::F32(&v))?;
            l.attend(&data(6, HQ * D), HQ, &AttendOptions::new())
                .map(|_| ())
        });
        match result {
            Err(Error::Shader { path, message, .. }) => {
                assert_eq!(path, kvpack::KernelPath::Msl, "{what}");
                assert!(
                    message.contains("deliberately broken MSL"),
                    "{what}: not the driver's message: {message}"
                );
            }
            other => panic!("{what}: an explicit MSL request must fail, got {other:?}"),
        }
    }
}
