//! Parity harness: one test body per kernel, instantiated for every path and variant.
//!
//! Targets: `cpu` (the reference), `wgsl_subgroup` (a device with `SUBGROUP`),
//! `wgsl_workgroup` (a device created with `SUBGROUP` withheld, so the workgroup-memory WGSL
//! runs as it would on an adapter without subgroups), and `msl_emulated` (the MSL sources on
//! the CPU emulator of `msl-emu/`). A GPU target that cannot run prints a visible
//! `SKIP ... because ...` line; with `KVPACK_REQUIRE_GPU=1` the skip is a failure.
#![allow(dead_code)]

pub mod attend_plans;
pub mod compact;
pub mod kivi_plans;
pub mod kivi_spec;
pub mod mutate;
pub mod positions;
pub mod quality;
pub mod recon;
pub mod scores;
pub mod select;
pub mod st;
pub mod tc_decode;
pub mod tc_emulated;
pub mod vecinfer_calib;

use std::sync::OnceLock;

use kvpack::{Context, HeadlessOptions, PathChoice};
use rand::{Rng, SeedableRng};

/// Where a test body runs.
#[derive(Clone, Debug)]
pub enum Target {
    /// The CPU reference.
    Cpu(Context),
    /// WGSL on a GPU context with this path choice.
    Wgsl(Context, PathChoice),
    /// The MSL sources on the CPU emulator (`msl-emu/`), random lane order per dispatch.
    MslEmulated(Context),
}

impl Target {
    pub fn name(&self) -> String {
        match self {
            Target::Cpu(_) => "cpu".into(),
            Target::Wgsl(c, p) => match c.adapter_info().map(|i| i.backend) {
                Some(wgpu::Backend::Gl) => format!("{p} (gl)"),
                _ => p.to_string(),
            },
            Target::MslEmulated(_) => "msl-emulated".into(),
        }
    }

    pub fn ctx(&self) -> &Context {
        match self {
            Target::Cpu(c) | Target::Wgsl(c, _) | Target::MslEmulated(c) => c,
        }
    }

    pub fn path(&self) -> PathChoice {
        match self {
            Target::Cpu(_) => PathChoice::Cpu,
            Target::Wgsl(_, p) => *p,
            Target::MslEmulated(_) => PathChoice::Msl,
        }
    }

    /// True for targets that run WGSL on a device.
    pub fn is_gpu(&self) -> bool {
        matches!(self, Target::Wgsl(..))
    }
}

/// Reports a skip visibly; fails when `KVPACK_REQUIRE_GPU=1`.
pub fn skip(test: &str, reason: &str) {
    let msg = format!("SKIP {test} because {reason}");
    if std::env::var("KVPACK_REQUIRE_GPU").is_ok_and(|v| v == "1") {
        panic!("{msg} (KVPACK_REQUIRE_GPU=1 forbids skips)");
    }
    eprintln!("{msg}");
}

fn headless(withhold: wgpu::Features) -> Result<Context, String> {
    let opts = HeadlessOptions::default()
        .withhold_features(withhold)
        .require_gpu(true);
    Context::headless_with(&opts).map_err(|e| e.to_string())
}

/// A new command encoder on `ctx`'s device.
pub fn encoder(ctx: &Context) -> wgpu::CommandEncoder {
    ctx.device()
        .expect("device")
        .create_command_encoder(&Default::default())
}

/// Submits `enc` on `ctx`'s queue and waits for it.
pub fn submit(ctx: &Context, enc: wgpu::CommandEncoder) {
    let index = ctx.queue().expect("queue").submit([enc.finish()]);
    ctx.device()
        .expect("device")
        .poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        })
        .expect("poll");
}

/// The shared device with every feature kvpack wants.
pub fn gpu_context() -> Result<Context, String> {
    static CTX: OnceLock<Result<Context, String>> = OnceLock::new();
    CTX.get_or_init(|| headless(wgpu::Features::empty()))
        .clone()
}

/// The shared device when it runs the tensor-core kernels; else prints why (a failure under
/// `KVPACK_REQUIRE_TENSOR=1`, as the H200 runs set).
pub fn tensor_ctx(test: &str) -> Option<Context> {
    let why = match gpu_context() {
        Ok(c) => match c.tensor_cores() {
            Ok(()) => return Some(c),
            Err(e) => e,
        },
        Err(e) => e,
    };
    let msg = format!("NOT RUN {test}: no tensor-core kernel on this device: {why}");
    if std::env::var("KVPACK_REQUIRE_TENSOR").is_ok_and(|v| v == "1") {
        panic!("{msg} (KVPACK_REQUIRE_TENSOR=1)");
    }
    eprintln!("{msg}");
    None
}

/// Appends `k`, `v` to a GPU layer of `method` and attends `q` with `o` on it and on the CPU
/// path over its words; returns the worst row's relative L2 error of the GPU output and the kernels the GPU
/// call dispatched.
#[allow(clippy::too_many_arguments)]
pub fn gpu_vs_cpu(
    ctx: &Context,
    method: &str,
    hkv: usize,
    d: usize,
    hq: usize,
    k: &[f32],
    v: &[f32],
    q: &[f32],
    o: &kvpack::AttendOptions,
) -> (f64, Vec<&'static str>) {
    let m = parse_method(method, hkv, d).expect("method");
    let logged = ctx.with_dispatch_log();
    let mut gpu = kvpack::Layer::new(&logged, hkv, d, &m, kvpack::PathChoice::WgslSubgroup)
        .expect("gpu layer");
    kvpack::KvLayer::append(&mut gpu, kvpack::Input::F32(k), kvpack::Input::F32(v))
        .expect("append");
    // The CPU path over the words the GPU stored (read back: a GPU quantizer may round a
    // boundary value differently; spec/attention.md compares over the GPU's own words).
    let reference = kvpack::KvLayer::attend_reference(&gpu, q, hq, o).expect("cpu attend");
    let got = kvpack::KvLayer::attend(&gpu, q, hq, o).expect("gpu attend");
    let kernels = logged.dispatches().into_iter().map(|(k, _, _)| k).collect();
    (rel_l2_rows(&got, &reference, d), kernels)
}

/// Inputs whose scores grow along the context (the tensor-core kernels' rescale path):
/// queries 2 on their first 8 channels, key t those channels at `top`·t / T (± 0.05 noise),
/// random values. Returns (q, k, v) for `tq` rows × `hq` heads over `t` tokens × `hkv`.
pub fn rising_scores_qkv(
    rng: &mut rand::rngs::StdRng,
    (hkv, d, hq, t, tq): (usize, usize, usize, usize, usize),
    top: f32,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    use rand::Rng;
    let q: Vec<f32> = (0..tq * hq * d)
        .map(|i| if i % d < 8 { 2.0 } else { 0.0 })
        .collect();
    let k: Vec<f32> = (0..t * hkv * d)
        .map(|i| {
            let tok = i / (hkv * d);
            let base = if i % d < 8 {
                tok as f32 / t as f32 * top
            } else {
                0.0
            };
            base + rng.random_range(-0.05f32..0.05)
        })
        .collect();
    let v: Vec<f32> = (0..t * hkv * d)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    (q, k, v)
}

/// A random-q/k/v attention case of the tensor-kernel tests: (method, hkv, d, hq, t, tq,
/// window, sinks, scale, chunk tokens).
pub type ShapeCase = (
    &'static str,
    usize,
    usize,
    usize,
    usize,
    usize,
    Option<usize>,
    usize,
    Option<f32>,
    Option<usize>,
);

/// A [`ShapeCase`]'s k, v (`[t][hkv][d]`) and q (`[tq][hq][d]`), uniform in [−1, 1) drawn in
/// that order, and its options on `kernel`.
pub fn shape_case_inputs(
    rng: &mut rand::rngs::StdRng,
    c: &ShapeCase,
    kernel: kvpack::AttendKernel,
) -> (Vec<f32>, Vec<f32>, Vec<f32>, kvpack::AttendOptions) {
    use rand::Rng;
    let &(_, hkv, d, hq, t, tq, window, sinks, scale, chunk) = c;
    let mut n = |x| {
        (0..x)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect::<Vec<f32>>()
    };
    let (k, v, q) = (n(t * hkv * d), n(t * hkv * d), n(tq * hq * d));
    let o = kvpack::AttendOptions::default()
        .window(window)
        .sinks(sinks)
        .scale(scale)
        .chunk_tokens(chunk)
        .kernel(kernel);
    (k, v, q, o)
}

/// A device created without `SUBGROUP`, as on adapters that lack it.
pub fn gpu_context_without_subgroups() -> Result<Context, String> {
    static CTX: OnceLock<Result<Context, String>> = OnceLock::new();
    CTX.get_or_init(|| headless(wgpu::Features::SUBGROUP))
        .clone()
}

/// A device on wgpu's GL backend (llvmpipe through EGL in CI): no subgroups, so the
/// workgroup-memory variants, compiled by naga's GLSL writer and the driver's GLSL compiler.
/// A new device (and EGL context) per call: wgpu's GL backend locks its adapter's one context
/// for every call and panics ("Could not lock adapter context") after waiting a second, which
/// parallel tests sharing one device exceed while llvmpipe compiles a kernel. Devices of their
/// own run in parallel (the GL layer bodies: 183 s cold on 2 cores, 327 s one at a time on one
/// shared device).
pub fn gl_context() -> Result<Context, String> {
    let opts = HeadlessOptions::default()
        .backends(Some(wgpu::Backends::GL))
        .require_gpu(true);
    Context::headless_with(&opts).map_err(|e| format!("no GL adapter (EGL): {e}"))
}

/// The target for `kind` (`cpu`, `wgsl_subgroup`, `wgsl_workgroup`, `wgsl_gl`,
/// `msl_emulated`), or `None` after a visible skip.
pub fn target(kind: &str, test: &str) -> Option<Target> {
    let made = match kind {
        "cpu" => Ok(Target::Cpu(Context::cpu())),
        "wgsl_subgroup" => gpu_context().and_then(|c| {
            if c.features().contains(wgpu::Features::SUBGROUP) {
                Ok(Target::Wgsl(c, PathChoice::WgslSubgroup))
            } else {
                Err(format!(
                    "adapter {:?} does not offer SUBGROUP",
                    c.adapter_info().map(|i| &i.name)
                ))
            }
        }),
        "wgsl_workgroup" => {
            gpu_context_without_subgroups().map(|c| Target::Wgsl(c, PathChoice::WgslWorkgroup))
        }
        "wgsl_gl" => gl_context().map(|c| Target::Wgsl(c, PathChoice::WgslWorkgroup)),
        "msl_emulated" => msl_emulator_available().map(|()| Target::MslEmulated(Context::cpu())),
        // The subgroup path on a device that runs the tensor-core kernel (the H200; never
        // lavapipe, whose wgpu offers no cooperative matrices): elsewhere a visible note, a
        // failure only under KVPACK_REQUIRE_TENSOR=1.
        "wgsl_tensor" => {
            let made = gpu_context().and_then(|c| {
                c.tensor_cores()?;
                Ok(Target::Wgsl(c, PathChoice::WgslSubgroup))
            });
            if let Err(why) = &made {
                let msg = format!("NOT RUN {test}[wgsl_tensor]: no tensor-core kernel here: {why}");
                if std::env::var("KVPACK_REQUIRE_TENSOR").is_ok_and(|v| v == "1") {
                    panic!("{msg} (KVPACK_REQUIRE_TENSOR=1)");
                }
                eprintln!("{msg}");
                return None;
            }
            made
        }
        // The subgroup path with the tensor-core prefill kernel's cooperative matrices
        // emulated (Context::with_emulated_tensor_cores): lavapipe in CI.
        "wgsl_tensor_emulated" => gpu_context().and_then(|c| {
            let c = c.with_emulated_tensor_cores();
            c.tensor_cores()?;
            Ok(Target::Wgsl(c, PathChoice::WgslSubgroup))
        }),
        other => Err(format!("unknown target {other}")),
    };
    match made {
        Ok(t) => Some(t),
        Err(reason) => {
            skip(&format!("{test}[{kind}]"), &reason);
            None
        }
    }
}

/// Instantiates `body(&Target)` as one `#[test]` per target: the CPU reference and both WGSL
/// variants on Vulkan; `parity_tests!(body, msl)` adds the `msl_emulated` target for bodies
/// that run kernels through [`run_plan`], and `gl` (`parity_tests!(body, gl)`,
/// `parity_tests!(body, msl, gl)`) the workgroup variants on wgpu's GL backend (`wgsl_gl`:
/// naga's GLSL writer and the driver's GLSL compiler, each test on a device of its own). llvmpipe's GL is
/// slow on the attention kernels: measured cold on this 2-core machine (2026-12-02),
/// `attend_kernels_match_reference` ran over 540 s and `mask_oracle` over 395 s before they
/// were stopped, `lut_attention_kernels_match_reference` over 240 s, `qjl_kernels_match_reference`
/// 350 s, `vecinfer_quant_matches_reference` 260 s; those stay on Vulkan, and GL covers
/// attention through `tests/gl_backend.rs` (every codec's layer: appends, attention,
/// reconstruction), `attend_bad_input` and `cache_device_appends`.
#[macro_export]
macro_rules! parity_tests {
    ($body:ident) => {
        $crate::parity_tests!(@module $body, cpu, wgsl_subgroup, wgsl_workgroup);
    };
    ($body:ident, gl) => {
        $crate::parity_tests!(@module $body, cpu, wgsl_subgroup, wgsl_workgroup, wgsl_gl);
    };
    ($body:ident, msl) => {
        $crate::parity_tests!(@module $body, cpu, wgsl_subgroup, wgsl_workgroup, msl_emulated);
    };
    ($body:ident, msl, gl) => {
        $crate::parity_tests!(@module $body, cpu, wgsl_subgroup, wgsl_workgroup, wgsl_gl, msl_emulated);
    };
    (@module $body:ident, $($kind:ident),*) => {
        mod $body {
            $(
                #[test]
                fn $kind() {
                    if let Some(t) = $crate::common::target(stringify!($kind), stringify!($body)) {
                        super::$body(&t);
                    }
                }
            )*
        }
    };
}

/// Instantiates `body(&Target, spec)` for every codec under test × every target: one
/// `#[test]` per (codec, target), named `body::codec::target`. **Adding a codec to every
/// generic body is one line here.** `codec_tests!(body, with_qjl)` adds one more QJL pairing
/// (f16 values) for bodies that never reconstruct; `codec_tests!(body, gl)` instantiates the
/// body on the GL backend only (`wgsl_gl`, each test on a device of its own).
#[macro_export]
macro_rules! codec_tests {
    ($body:ident) => {
        mod $body {
            $crate::codec_tests!(@specs $body [cpu, wgsl_subgroup, wgsl_workgroup]);
        }
    };
    // One more QJL pairing (f16 values, m not a power of two) for bodies that never reconstruct.
    ($body:ident, with_qjl) => {
        mod $body {
            $crate::codec_tests!(@specs $body [cpu, wgsl_subgroup, wgsl_workgroup]);
            $crate::codec_tests!(@codec $body, qjl_keys_f16_values, "qjl:m=96/f16:residual=8", [cpu, wgsl_subgroup, wgsl_workgroup]);
        }
    };
    // Only on wgpu's GL backend (tests/gl_backend.rs): every codec, one target. VecInfer's
    // is the slowest cold (measured alone, 2026-12-02: 154 s, of which its LUT attention's
    // first dispatch 130 s, llvmpipe compiling the kernel; the others 20-50 s each).
    ($body:ident, gl) => {
        mod $body {
            $crate::codec_tests!(@codec $body, f16, "f16", [wgsl_gl]);
            $crate::codec_tests!(@codec $body, kivi_2, "kivi:bits=2,group=32,residual=64", [wgsl_gl]);
            $crate::codec_tests!(@codec $body, kivi_4_3_f32, "kivi:kbits=4,vbits=3,group=16,vgroup=24,residual=32,params=f32", [wgsl_gl]);
            $crate::codec_tests!(@codec $body, kivi_1, "kivi:bits=1,group=32,residual=32", [wgsl_gl]);
            $crate::codec_tests!(@codec $body, kivi_keys_f16_values, "kivi:bits=4,group=32/f16:residual=32", [wgsl_gl]);
            $crate::codec_tests!(@codec $body, f16_keys_kivi_values, "f16/kivi:bits=3,group=8,vgroup=16,residual=16", [wgsl_gl]);
            $crate::codec_tests!(@codec $body, turboquant_mse_3, "turboquant-mse:bits=3,residual=24", [wgsl_gl]);
            $crate::codec_tests!(@codec $body, kivi_keys_turboquant_rvq_values, "kivi:bits=2,group=32/turboquant-rvq:bits=2,residual=32", [wgsl_gl]);
            $crate::codec_tests!(@codec $body, qjl_keys_kivi_values, "qjl:m=96/kivi:bits=4,group=32,residual=32", [wgsl_gl]);
            $crate::codec_tests!(@codec $body, qjl_keys_turboquant_values, "qjl/turboquant-mse:bits=3", [wgsl_gl]);
            $crate::codec_tests!(@codec $body, turboquant_prod_keys_mse_values, "turboquant-prod:bits=3,residual=24/turboquant-mse:bits=3", [wgsl_gl]);
            $crate::codec_tests!(@codec $body, vecinfer_1_2, "vecinfer:kbits=1,vbits=2,residual=16,calib=@synthetic", [wgsl_gl]);
        }
    };
    (@specs $body:ident [$($kind:ident),*]) => {
            $crate::codec_tests!(@codec $body, f16, "f16", [$($kind),*]);
            $crate::codec_tests!(@codec $body, kivi_2, "kivi:bits=2,group=32,residual=64", [$($kind),*]);
            $crate::codec_tests!(@codec $body, kivi_4_3_f32, "kivi:kbits=4,vbits=3,group=16,vgroup=24,residual=32,params=f32", [$($kind),*]);
            $crate::codec_tests!(@codec $body, kivi_1, "kivi:bits=1,group=32,residual=32", [$($kind),*]);
            $crate::codec_tests!(@codec $body, kivi_keys_f16_values, "kivi:bits=4,group=32/f16:residual=32", [$($kind),*]);
            $crate::codec_tests!(@codec $body, f16_keys_kivi_values, "f16/kivi:bits=3,group=8,vgroup=16,residual=16", [$($kind),*]);
            $crate::codec_tests!(@codec $body, turboquant_mse_3, "turboquant-mse:bits=3,residual=24", [$($kind),*]);
            $crate::codec_tests!(@codec $body, kivi_keys_turboquant_rvq_values, "kivi:bits=2,group=32/turboquant-rvq:bits=2,residual=32", [$($kind),*]);
            // QJL keys have no reconstruction: bodies that compare with one ask
            // `SideConfig::attends_on_reconstruction` and say what they check instead.
            $crate::codec_tests!(@codec $body, qjl_keys_kivi_values, "qjl:m=96/kivi:bits=4,group=32,residual=32", [$($kind),*]);
            $crate::codec_tests!(@codec $body, qjl_keys_turboquant_values, "qjl/turboquant-mse:bits=3", [$($kind),*]);
            $crate::codec_tests!(@codec $body, turboquant_prod_keys_mse_values, "turboquant-prod:bits=3,residual=24/turboquant-mse:bits=3", [$($kind),*]);
            // VecInfer needs a calibration of the body's geometry: `calib=@synthetic` is
            // expanded by `common::parse_method(spec, H, D)` (vecinfer_calib::expand); a body
            // that parses the spec as it is fails loudly. Keys use the 1-bit preset (d_s 8:
            // its f16 LUT fits lavapipe's 32 KiB of workgroup storage at P = 64; the 2-bit
            // one, n_sub 16, does not), values the 2-bit one.
            $crate::codec_tests!(@codec $body, vecinfer_1_2, "vecinfer:kbits=1,vbits=2,residual=16,calib=@synthetic", [$($kind),*]);
    };
    (@codec $body:ident, $name:ident, $spec:expr, [$($kind:ident),*]) => {
        mod $name {
            $( $crate::codec_tests!(@target $body, $spec, $kind); )*
        }
    };
    (@target $body:ident, $spec:expr, $kind:ident) => {
        #[test]
        fn $kind() {
            let test = concat!(stringify!($body), "[", $spec, "]");
            if let Some(t) = $crate::common::target(stringify!($kind), test) {
                super::super::$body(&t, $spec);
            }
        }
    };
}

/// `spec` parsed for a layer of `heads` KV heads of width `dim`: a VecInfer placeholder
/// (`calib=@synthetic`) is replaced by a synthetic calibration of that shape
/// ([`vecinfer_calib::expand`]); every generic body parses its spec with this.
pub fn parse_method(spec: &str, heads: usize, dim: usize) -> kvpack::Result<kvpack::Method> {
    kvpack::Method::parse(&vecinfer_calib::expand(spec, heads, dim))
}

/// The bound on a GPU target's attention against the CPU reference, per row (rel L2):
/// attention.md's 1e-4, or 1e-3 where the layer's GPU LUT is f16 (vecinfer.md, "Cross-backend
/// agreement"; the layer's `describe()` names its LUT), printed when it is the wider one.
pub fn gpu_attend_bound(t: &Target, l: &dyn kvpack::KvLayer, what: &str) -> f64 {
    if t.is_gpu() && l.describe().contains("GPU LUT f16") {
        eprintln!(
            "NOTE {what}[{}]: the layer's GPU LUT is f16: bound 1e-3 (vecinfer.md)",
            t.name()
        );
        1e-3
    } else {
        1e-4
    }
}

/// A fresh seeded RNG; the seed is printed so that a failure can be replayed with
/// `KVPACK_SEED=<seed>`.
pub fn rng(test: &str) -> rand::rngs::StdRng {
    let seed = std::env::var("KVPACK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random::<u64>());
    eprintln!("{test}: seed {seed} (replay with KVPACK_SEED={seed})");
    rand::rngs::StdRng::seed_from_u64(seed)
}

/// The poison every output buffer is filled with before a kernel runs.
pub const POISON: u32 = 0xDEAD_BEEF;

/// `../shared/fixtures/smollm2-135m/<name>` relative to the repo root, or `None` after a
/// visible skip (a failure when `KVPACK_REQUIRE_SHARED=1`).
pub fn shared_fixture(name: &str, test: &str) -> Option<std::path::PathBuf> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/smollm2-135m")
        .join(name);
    if p.exists() {
        return Some(p);
    }
    let msg = format!(
        "SKIP {test} because {} is absent (it exists in CI)",
        p.display()
    );
    if std::env::var("KVPACK_REQUIRE_SHARED").is_ok_and(|v| v == "1") {
        panic!("{msg} (KVPACK_REQUIRE_SHARED=1 forbids skips)");
    }
    eprintln!("{msg}");
    None
}

/// A real tensor from a fixture: (shape, f16 values).
pub fn load_f16(path: &std::path::Path, name: &str) -> (Vec<usize>, Vec<half::f16>) {
    let bytes = std::fs::read(path).expect("read fixture");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("parse fixture");
    let t = st.tensor(name).expect("tensor in fixture");
    assert_eq!(
        t.dtype(),
        safetensors::Dtype::F16,
        "{name} is f16 in the fixtures"
    );
    (t.shape().to_vec(), bytemuck::pod_collect_to_vec(t.data()))
}

/// Whether the MSL emulator can compile here (it needs clang >= 15).
pub fn msl_emulator_available() -> Result<(), String> {
    static OK: OnceLock<Result<(), String>> = OnceLock::new();
    OK.get_or_init(|| {
        let src = "#include <metal_stdlib>\nusing namespace metal;\n\
                   kernel void probe(device uint* out [[buffer(0)]], uint i [[thread_position_in_grid]]) { out[i] = i; }\n";
        kvpack_msl_emu::MslKernel::compile(src, "probe").map(|_| ()).map_err(|e| format!("the MSL emulator cannot compile: {e}"))
    })
    .clone()
}

/// Runs `plan` on `t`. `storage[i]` is binding i + 1 (binding 0 is the plan's uniform); the
/// buffers are read back into `storage` afterwards. GPU targets upload, dispatch and read
/// back; `msl_emulated` compiles the kernel's composed MSL and runs it on the emulator in a
/// random lane order (a missing barrier shows as a wrong result).
pub fn run_plan(
    t: &Target,
    plan: &kvpack::gpu::DispatchPlan,
    storage: &mut [Vec<u8>],
) -> kvpack::Result<()> {
    use kvpack::gpu;
    match t {
        Target::Cpu(_) => {
            panic!("run_plan is for kernel targets; the CPU reference is called directly")
        }
        Target::Wgsl(ctx, choice) => {
            let path = ctx.resolve(plan.kernel, *choice)?;
            // Bindings the kernel declares as uniforms get uniform buffers (not read back).
            let uniform = |i: usize| {
                plan.kernel.bindings.get(i + 1) == Some(&kvpack::gpu::registry::Binding::Uniform)
            };
            let bufs: Vec<wgpu::Buffer> = storage
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    if uniform(i) {
                        gpu::uniform_buffer(ctx, "test uniform", b)
                    } else {
                        gpu::upload(ctx, "test storage", b)
                    }
                })
                .collect::<kvpack::Result<_>>()?;
            let refs: Vec<&wgpu::Buffer> = bufs.iter().collect();
            if let Some(m) = mutate::active_for(plan.kernel.name, mutate::Lang::Wgsl) {
                // The mutation harness: this kernel from its mutated composed source.
                let emulated = ctx.tensor_cores_emulated()
                    && kvpack::gpu::registry::needs_cooperative_matrix(plan.kernel);
                let composed = if emulated {
                    kvpack::gpu::registry::compose_wgsl_pieces(plan.kernel, path, &plan.spec)
                } else {
                    kvpack::gpu::registry::compose_wgsl(plan.kernel, path, &plan.spec)
                };
                let (src, n) = m.apply(&composed);
                mutate::record(n);
                // On an emulating handle the mutated kernel is emulated like the real one.
                let src = if emulated {
                    kvpack::gpu::coop_emulation::emulate(&src).map_err(|message| {
                        kvpack::Error::Shader {
                            kernel: plan.kernel.name,
                            path,
                            message,
                        }
                    })?
                } else {
                    src
                };
                let pipeline = mutate::wgsl_pipeline(ctx, plan.kernel, &src)?;
                let uni = gpu::uniform_buffer(ctx, "mutant uniform", &plan.uniform)?;
                let all: Vec<&wgpu::Buffer> = std::iter::once(&uni).chain(refs).collect();
                gpu::submit_blocking(ctx, "mutant dispatch", |enc| {
                    gpu::encode_dispatch(ctx, enc, &pipeline, "mutant", &all, plan.workgroups)
                })?;
            } else {
                gpu::submit_blocking(ctx, "test dispatch", |enc| {
                    gpu::encode_plan(ctx, enc, path, plan, &refs)
                })?;
            }
            for (i, (b, out)) in bufs.iter().zip(storage.iter_mut()).enumerate() {
                if !uniform(i) {
                    let n = out.len();
                    *out = gpu::readback(ctx, b, n as u64)?;
                }
            }
            Ok(())
        }
        Target::MslEmulated(_) => {
            let src =
                kvpack::gpu::registry::compose_msl(plan.kernel, &plan.spec).ok_or_else(|| {
                    kvpack::Error::PathUnavailable {
                        kernel: plan.kernel.name,
                        requested: "msl-emulated".into(),
                        reason: "kernel has no MSL source".into(),
                    }
                })?;
            let src = match mutate::active_for(plan.kernel.name, mutate::Lang::Msl) {
                Some(m) => {
                    let (src, n) = m.apply(&src);
                    mutate::record(n);
                    src
                }
                None => src,
            };
            let kernel = compiled(plan.kernel.name, &src);
            // The context's per-dimension limit (65,535 on a CPU context; tests lower it with
            // `Context::with_max_workgroups_per_dimension` to split every kernel over x and y).
            let (x, y) = gpu::split_workgroups(t.ctx(), plan.workgroups)?;
            if x == 0 {
                return Ok(());
            }
            // Word-aligned copies: the emulator checks every access against these lengths.
            let mut uniform = plan.uniform.clone();
            // Binding i (0 = the uniform) goes to [[buffer(msl_buffer_index(i))]]: the same
            // table the library documents for wgpu's Metal backend.
            let mut slots: Vec<Option<&mut [u8]>> = (0..=storage.len()).map(|_| None).collect();
            let all = std::iter::once(uniform.as_mut_slice())
                .chain(storage.iter_mut().map(|b| b.as_mut_slice()));
            for (binding, buf) in all.enumerate() {
                let index = kvpack::gpu::registry::msl_buffer_index(plan.kernel, 0, binding as u32)
                    .expect("every binding of a kvpack kernel has a buffer index")
                    as usize;
                slots[index] = Some(buf);
            }
            let mut bufs: Vec<&mut [u8]> = slots
                .into_iter()
                .map(|b| b.expect("buffer indices are a permutation"))
                .collect();
            let seed: u64 = rand::random();
            let opts = kvpack_msl_emu::DispatchOptions {
                lane_order: kvpack_msl_emu::LaneOrder::Random(seed),
            };
            kernel
                .dispatch(
                    &mut bufs,
                    [x, y, 1],
                    [plan.kernel.workgroup_size, 1, 1],
                    &opts,
                )
                .map_err(|e| kvpack::Error::Shader {
                    kernel: plan.kernel.name,
                    path: kvpack::KernelPath::Msl,
                    message: format!("{e} (lane seed {seed})"),
                })
        }
    }
}

fn compiled(name: &str, src: &str) -> std::sync::Arc<kvpack_msl_emu::MslKernel> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<kvpack_msl_emu::MslKernel>>>> =
        OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(k) = cache.lock().expect("cache").get(src) {
        return k.clone();
    }
    let k = Arc::new(
        kvpack_msl_emu::MslKernel::compile(src, name)
            .unwrap_or_else(|e| panic!("compiling msl/{name}.metal: {e}")),
    );
    cache
        .lock()
        .expect("cache")
        .insert(src.to_string(), k.clone());
    k
}

/// Mean over rows of the per-row relative L2 error of `a` against `b` (rows of `d`): the
/// typical row, where [`rel_l2_rows`] gives the worst. A NaN row counts as infinitely wrong
/// there, so the mean is infinite and fails every `<` bound.
pub fn rel_l2_rows_mean(a: &[f32], b: &[f32], d: usize) -> f64 {
    assert_eq!(a.len(), b.len(), "rel_l2_rows_mean: lengths differ");
    assert!(
        d > 0 && a.len().is_multiple_of(d) && !a.is_empty(),
        "rel_l2_rows_mean: {} values are not rows of {d}",
        a.len()
    );
    let rows = a.len() / d;
    let sum: f64 = a
        .chunks(d)
        .zip(b.chunks(d))
        .map(|(ra, rb)| rel_l2_rows(ra, rb, d))
        .sum();
    sum / rows as f64
}

/// Worst per-row relative L2 error of `a` against `b` (rows of `d`); a NaN row (an unwritten
/// output) counts as infinitely wrong.
pub fn rel_l2_rows(a: &[f32], b: &[f32], d: usize) -> f64 {
    // A short output must not pass by comparing only the rows both have.
    assert_eq!(a.len(), b.len(), "rel_l2_rows: lengths differ");
    assert!(
        d > 0 && a.len().is_multiple_of(d),
        "rel_l2_rows: {} values are not rows of {d}",
        a.len()
    );
    let mut worst = 0f64;
    for (ra, rb) in a.chunks(d).zip(b.chunks(d)) {
        let num: f64 = ra
            .iter()
            .zip(rb)
            .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
            .sum();
        let den: f64 = rb.iter().map(|y| f64::from(*y).powi(2)).sum();
        let e = (num / den.max(1e-30)).sqrt();
        worst = if e.is_nan() {
            f64::INFINITY
        } else {
            worst.max(e)
        };
    }
    worst
}

/// Random attention inputs with per-channel key offsets (as real keys have):
/// q `[tq, hq, d]`, k and v `[t, hkv, d]`.
pub fn random_qkv(
    rng: &mut impl Rng,
    t: usize,
    tq: usize,
    hq: usize,
    hkv: usize,
    d: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let offs: Vec<f32> = (0..hkv * d).map(|_| rng.random_range(-2.0..2.0)).collect();
    let k = (0..t * hkv * d)
        .map(|i| offs[i % (hkv * d)] + rng.random_range(-1.0f32..1.0))
        .collect();
    let v = (0..t * hkv * d)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    let q = (0..tq * hq * d)
        .map(|_| rng.random_range(-1.5f32..1.5))
        .collect();
    (q, k, v)
}

/// The stored words of a KIVI/KIVI layer in KIVI's terms (read back on GPU paths).
pub fn raw(l: &dyn kvpack::KvLayer) -> kvpack::Result<kvpack::codecs::kivi::RawKivi> {
    Ok(kvpack::codecs::kivi::RawKivi::from_snapshot(&l.snapshot()?))
}

/// The KIVI layout of a configuration (what the layer's codecs use).
pub fn kivi_layout(h: usize, d: usize, cfg: &kvpack::KiviConfig) -> kvpack::codecs::kivi::Layout {
    kvpack::codecs::kivi::Layout::new(h, d, cfg).expect("layout")
}

/// A calibration file of one layer of `h` KV heads (and query heads) of width `d` holding
/// only these tables: Q-Filters filters `[h][d]` and/or key means `[h][d]` (tests of the
/// policies and of centering), written to a per-process temporary file named after `name`.
pub fn tiny_calibration(
    name: &str,
    h: usize,
    d: usize,
    filters: Option<Vec<f32>>,
    key_means: Option<Vec<f32>>,
) -> std::path::PathBuf {
    use kvpack::calib::{Calibration, Meta, ModelIdentity, QfilterTables};
    let cal = Calibration {
        meta: Meta {
            model: ModelIdentity {
                name: format!("test-{name}"),
                arch: "llama".into(),
                layers: 1,
                q_heads: h,
                kv_heads: h,
                head_dim: d,
            },
            seed: 0,
            text_name: "none".into(),
            text_bytes: 0,
            text_fnv1a64: 0,
            tokens: 0,
        },
        vecinfer: None,
        qfilters: filters.map(|f| QfilterTables {
            query_filters: f.clone(),
            filters: f,
            rows: 0,
            report: Vec::new(),
        }),
        key_means,
    };
    let p = std::env::temp_dir().join(format!(
        "kvpack-test-{}-{name}.safetensors",
        std::process::id()
    ));
    cal.write(&p).unwrap();
    p
}

/// Deterministic rows `[tokens, heads, dim]` f32 in [-1, 1) from `seed` (the counter tests:
/// tests/uniform_reuse.rs, tests/attend_scratch.rs).
pub fn ramp_rows(seed: usize, tokens: usize, heads: usize, dim: usize) -> Vec<f32> {
    (0..tokens * heads * dim)
        .map(|i| (((i + seed) * 7919 % 2003) as f32 / 1001.0) - 1.0)
        .collect()
}
