//! GPU benchmark of TurboQuant: the fused quantization kernel against the device's copy
//! roofline, and decode attention on TurboQuant caches against KIVI at about equal bits, timed
//! with timestamp queries. See `benches/README.md`; the issue's targets: quantize 8 heads ×
//! 32k tokens × D = 128 at ≥ 50 % of the same-size copy, attention within 1.2× of KIVI at
//! equal bits; VecInfer (issue 15): quantize at ≥ 30 % of the same-size copy, decode no slower
//! than KIVI-4 at 32k.
//!
//! ```text
//! cargo bench --bench gpu_turboquant                 # full sizes (a real GPU)
//! cargo bench --bench gpu_turboquant -- --quick      # small sizes (proves the code path, e.g. lavapipe)
//! options: --rounds N  --warmup N  --l2-mib N  --no-flush  --tokens T1,T2,...  --json PATH
//!          --only S (time only the arms named with S, beside the copies and the A-vs-A pair)
//! --json -   the JSON on stdout (the table then goes to stderr): the H200 command is
//!            `gpu_turboquant --tokens 32768 --json -` (benches/README.md)
//! ```
//!
//! The JSON: `adapter`, `rows` (every arm: name, bytes, median/min/max µs, GB/s),
//! `quantize_vs_copy` (each quantize arm's GB/s as % of the copy of matched size, `target_pct`
//! 50, VecInfer's 30), `attend_vs_kivi` (per T and pair: the method / KIVI time ratio,
//! `target_ratio` 1.2, VecInfer's 1.0), `aa` and `noise_floor_pct` (the A-vs-A twin), and with
//! the VecInfer arms `vecinfer` (the calibration file, its seconds and training tokens, each
//! decode arm's `describe()`, which names its GPU LUT's precision, and `skipped`: the decode
//! arms the device's workgroup storage cannot hold, with the reason).
//!
//! VecInfer needs a calibration of the bench's geometry (1 layer, Hkv = 8, D = 128, Hq = 32):
//! it is made at bench start through the library's calibration API
//! (`calib::train::calibrate_capture`, both presets; needs the `model` feature, else the
//! VecInfer arms are left out with a note) from 1024 tokens of synthetic normal q/k/v rounded
//! to f16, like the bench's inputs, and written to the temp directory (its path and the time
//! it took are printed; `F` in the arms' names). The codebooks are trained on synthetic data:
//! speed does not depend on a codebook's quality; quality rows come from `kvpack eval`. About
//! 40 s on a 2-core machine.
//!
//! Arms, all interleaved within every round (each submitted alone and waited for; the
//! starting arm rotates with the round):
//! - `copy S`: vec4<u32> copy of S bytes (`registry::COPY`); bytes moved = 2·S, S matched to
//!   the quantize arms' traffic.
//! - `quantize <spec> [path]`: `turboquant_quant` of T tokens × 8 heads × D = 128 read from an
//!   incoming buffer (the prefill case), both WGSL variants; bytes moved = the f16 input + the
//!   codes and norms written. A-vs-A: the first arm timed twice (` (A')`).
//! - `encode qjl:m=M [path]`: `qjl_encode` of the same T tokens × 8 heads × D = 128 (QJL keys,
//!   m = 128 and 256), both WGSL variants; bytes moved = the f16 input + the sign words and
//!   norms written; compared with the copy of matched size like the quantize arms (issue 14's
//!   "encode at ≥ 50 % of the same-size copy").
//! - `encode turboquant-prod:bits=4 [path]`: `turboquant_prod_quant` of the same tokens (3-bit
//!   MSE codes, the residual's m = 128 sign bits, norm and residual norm), both WGSL
//!   variants; bytes moved = the f16 input + the four streams written.
//! - `quantize vecinfer:bits=B [path]`: `vecinfer_quant` (keys: λ, Hadamard, the argmin over
//!   the head's 256 centroids per sub-vector) of the same tokens, B = 1 and 2, both WGSL
//!   variants; bytes moved = the f16 input + the indices written; target ≥ 30 % of the copy.
//! - `<method> T`: one decode `KvLayer::encode_attend` call (Hq = 32, Hkv = 8, D = 128, every
//!   pass and the merge) on a cache built by one prefill of T random tokens, for KIVI and
//!   TurboQuant at about equal bits (kivi-4 ≈ 5 bits held vs turboquant-mse:bits=4 4.125 and
//!   turboquant-rvq:bits=2 4.125; kivi-2 ≈ 3 vs turboquant-mse:bits=2 2.125 and bits=3 3.125;
//!   QJL keys m = 128 with KIVI-4 values against kivi-4: issue 14's "no slower than KIVI-4";
//!   TurboQuant-Prod keys at 4 bits (3-bit MSE + sketch) with KIVI-4 values against kivi-4;
//!   `vecinfer:bits=2,calib=F`, `vecinfer:bits=1,calib=F` and VecInfer-2 keys with KIVI-4
//!   values against kivi-4, target ≤ 1.0×: the layer's `describe()` is printed, as the GPU
//!   LUT is f32 or f16 by the device's workgroup storage; where not even the f16 LUT fits
//!   (`Error::Limit`), the arm is reported as not run, in the table's notes and the JSON);
//!   bytes = the cache payload + q.
//!
//! Every quantize arm rotates through distinct input and output buffers whose total exceeds
//! twice the assumed L2. Outputs are checked once before timing: quantize codes against the
//! CPU reference (the spec's ±1 allowance at boundaries: at most 0.1 % of codes may differ;
//! VecInfer's indices likewise, near-ties), attention against the CPU reference over the same
//! stored words (rel. L2 ≤ 1e-4 per row, 1e-3 with VecInfer's f16 LUT, vecinfer.md).

use std::path::PathBuf;
use std::sync::Arc;

use half::f16;
use kvpack::codec::Codec;
use kvpack::codecs::qjl::plans::{EncodeFrom, plan_encode};
use kvpack::codecs::qjl::{QjlCodec, QjlSide};
use kvpack::codecs::turboquant::plans::{QuantSource, plan_prod_quant, plan_quant};
use kvpack::codecs::turboquant::prod::{ProdCodec, ProdSide};
use kvpack::codecs::turboquant::{TqSide, TurboQuantCodec, Variant};
use kvpack::codecs::vecinfer::{VecInferCodec, VecSide};
use kvpack::context::{Context, KernelPath, PathChoice};
use kvpack::gpu::{self, DispatchPlan, registry};
use kvpack::store::{Geometry, Side};
use kvpack::{AttendOptions, Input, KvLayer, Method};

mod common;

use common::report::{CPU_ADAPTER_NOTE, Stamps};
use common::{AA_SUFFIX, MIB, Rng, fill_from, fmt_bytes, rotation, stats};

const HQ: usize = 32;
const HKV: usize = 8;
const DIM: usize = 128;

struct Opts {
    quick: bool,
    rounds: usize,
    warmup: usize,
    l2_bytes: u64,
    /// An L2 flush (a 2×L2 copy) before every timed call.
    flush: bool,
    tokens: Vec<usize>,
    json: Option<PathBuf>,
    /// `--only S`: time only the arms whose name contains S (and the copies and the A-vs-A
    /// pair); every arm is still built and checked.
    only: Option<String>,
}

fn parse_args() -> Result<Opts, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let mut o = Opts {
        quick,
        rounds: if quick { 3 } else { 40 },
        warmup: if quick { 1 } else { 5 },
        l2_bytes: if quick { MIB } else { 64 * MIB },
        flush: true,
        tokens: if quick { vec![512] } else { vec![4096, 32768] },
        json: None,
        only: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().cloned().ok_or(format!("{name} needs a value"));
        let num = |s: String, name: &str| s.parse::<u64>().map_err(|_| format!("{name}: {s}"));
        match a.as_str() {
            "--quick" | "--bench" => {}
            "--no-flush" => o.flush = false,
            "--rounds" => o.rounds = num(val("--rounds")?, "--rounds")?.max(1) as usize,
            "--warmup" => o.warmup = num(val("--warmup")?, "--warmup")? as usize,
            "--l2-mib" => o.l2_bytes = num(val("--l2-mib")?, "--l2-mib")?.max(1) * MIB,
            "--tokens" => {
                o.tokens = val("--tokens")?
                    .split(',')
                    .map(|t| num(t.to_string(), "--tokens").map(|x| x as usize))
                    .collect::<Result<_, _>>()?
            }
            "--json" => o.json = Some(PathBuf::from(val("--json")?)),
            "--only" => o.only = Some(val("--only")?),
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(o)
}

enum Work {
    Copy {
        plan: DispatchPlan,
        bufs: Vec<(wgpu::Buffer, wgpu::Buffer)>,
    },
    Quant {
        path: KernelPath,
        plan: DispatchPlan,
        /// [incoming, the kernel's output streams...] per rotation instance.
        bufs: Vec<Vec<wgpu::Buffer>>,
        ring: wgpu::Buffer,
        tables: wgpu::Buffer,
    },
    Attend {
        layer: Box<dyn KvLayer>,
        q: wgpu::Buffer,
        out: wgpu::Buffer,
    },
}

struct Arm {
    name: String,
    bytes: u64,
    work: Work,
    ns: Vec<f64>,
}

fn record(
    ctx: &Context,
    arm: &Arm,
    round: usize,
    enc: &mut wgpu::CommandEncoder,
) -> kvpack::Result<()> {
    match &arm.work {
        Work::Copy { plan, bufs } => {
            let (s, d) = &bufs[round % bufs.len()];
            gpu::encode_plan(ctx, enc, KernelPath::WgslWorkgroup, plan, &[s, d])
        }
        Work::Quant {
            path,
            plan,
            bufs,
            ring,
            tables,
        } => {
            let b = &bufs[round % bufs.len()];
            let binds: Vec<&wgpu::Buffer> = std::iter::once(ring)
                .chain(b)
                .chain(std::iter::once(tables))
                .collect();
            gpu::encode_plan(ctx, enc, *path, plan, &binds)
        }
        Work::Attend { layer, q, out } => {
            let opts = AttendOptions::default();
            layer.encode_attend(enc, q, 1, HQ, &opts, out)
        }
    }
}

fn copy_arm(ctx: &Context, size: u64, l2: u64, rng: &mut Rng) -> kvpack::Result<Arm> {
    let def = &registry::COPY;
    let n4 = size / 16;
    let plan = DispatchPlan {
        kernel: def,
        spec: registry::Specialization::default(),
        uniform: bytemuck::cast_slice(&[n4 as u32, 0, 0, 0]).to_vec(),
        workgroups: n4.div_ceil(u64::from(def.workgroup_size)).min(65_535),
    };
    let seed_words: Vec<u32> = (0..(size.min(16 * MIB) / 4))
        .map(|_| rng.next_u32())
        .collect();
    let seed = gpu::upload(ctx, "bench copy seed", bytemuck::cast_slice(&seed_words))?;
    let mut bufs = Vec::new();
    for _ in 0..rotation(l2, 2 * size) {
        let s = gpu::storage_buffer(ctx, "bench copy src", size)?;
        let d = gpu::storage_buffer(ctx, "bench copy dst", size)?;
        fill_from(ctx, &seed, &s)?;
        bufs.push((s, d));
    }
    Ok(Arm {
        name: format!("copy {}", fmt_bytes(size)),
        bytes: 2 * size,
        work: Work::Copy { plan, bufs },
        ns: Vec::new(),
    })
}

/// An encode arm's GPU side: per rotation instance the incoming rows (a copy of `rows`) and one
/// buffer per output stream (`streams` bytes each), the placeholder ring and the codec's
/// `tables`; the plan run once on the first instance, whose streams are read back (each arm
/// checks them against the CPU reference).
fn encode_work(
    ctx: &Context,
    path: KernelPath,
    plan: DispatchPlan,
    rows: &[u32],
    streams: &[u64],
    tables: &[u32],
    l2: u64,
) -> kvpack::Result<(Work, Vec<Vec<u32>>)> {
    let in_bytes = (rows.len() * 4) as u64;
    let out_bytes: u64 = streams.iter().sum();
    let seed = gpu::upload(ctx, "bench encode rows", bytemuck::cast_slice(rows))?;
    let mut bufs = Vec::new();
    for _ in 0..rotation(l2, in_bytes + out_bytes) {
        let i = gpu::storage_buffer(ctx, "bench encode incoming", in_bytes)?;
        fill_from(ctx, &seed, &i)?;
        let mut b = vec![i];
        for &n in streams {
            b.push(gpu::storage_buffer(ctx, "bench encode stream", n)?);
        }
        bufs.push(b);
    }
    let ring = gpu::storage_buffer(ctx, "bench encode ring", 4)?;
    let tables = gpu::upload(ctx, "bench encode tables", bytemuck::cast_slice(tables))?;
    gpu::submit_blocking(ctx, "bench encode check", |enc| {
        let binds: Vec<&wgpu::Buffer> = std::iter::once(&ring)
            .chain(&bufs[0])
            .chain(std::iter::once(&tables))
            .collect();
        gpu::encode_plan(ctx, enc, path, &plan, &binds)
    })?;
    let mut first = Vec::new();
    for (b, &n) in bufs[0][1..].iter().zip(streams) {
        first.push(bytemuck::pod_collect_to_vec(&gpu::readback(ctx, b, n)?));
    }
    Ok((
        Work::Quant {
            path,
            plan,
            bufs,
            ring,
            tables,
        },
        first,
    ))
}

/// A quantize arm of `variant`/`bits` over `t` tokens on `choice`, checked once.
#[allow(clippy::too_many_arguments)]
fn quant_arm(
    ctx: &Context,
    variant: Variant,
    bits: u32,
    choice: PathChoice,
    t: usize,
    x: &[f16],
    l2: u64,
) -> kvpack::Result<Arm> {
    let cfg = TqSide::new(variant, Side::Keys, bits);
    let g = Geometry::new(HKV, DIM)?;
    let codec = TurboQuantCodec::new(ctx, cfg, g, 0, choice)?;
    let path = codec.path();
    let l = *codec.layout();
    let rows = kvpack::store::input::f16_rows_to_words(HKV * DIM, &x[..t * HKV * DIM]);
    let plan = plan_quant(
        &l,
        path,
        t,
        QuantSource {
            start: 0,
            t_old: 0,
            inc_start: 0,
            ring_tokens: 1,
        },
        0,
    );
    let in_bytes = (rows.len() * 4) as u64;
    let streams = [t * l.code_words() * 4, t * l.norm_words() * 4].map(|b| b as u64);
    let out_bytes: u64 = streams.iter().sum();
    let (work, first) = encode_work(ctx, path, plan, &rows, &streams, codec.tables(), l2)?;
    let got = &first[0];
    let cpu = TurboQuantCodec::new(&Context::cpu(), cfg, g, 0, PathChoice::Cpu)?;
    let f = |tok: usize, h: usize, d: usize| x[(tok * HKV + h) * DIM + d].to_f32();
    let mut want = vec![Vec::new(), Vec::new()];
    cpu.encode(0, t, &f, &mut want)?;
    let mut differ = 0usize;
    let rw = l.row_words();
    for row in 0..t * HKV * l.stages {
        for i in 0..l.padded {
            let c =
                |w: &[u32]| kvpack::codecs::turboquant::layout::code_at(&w[row * rw..], i, l.bits);
            differ += usize::from(c(&want[0]) != c(got));
        }
    }
    let total = t * HKV * l.stages * l.padded;
    if differ * 1000 > total {
        return Err(kvpack::Error::Config(format!(
            "quantize check: {differ} of {total} codes differ from the CPU reference"
        )));
    }
    Ok(Arm {
        name: format!("quantize {}:bits={bits} T={t} [{path}]", variant.name()),
        bytes: in_bytes + out_bytes,
        work,
        ns: Vec::new(),
    })
}

/// A QJL encode arm (`qjl_encode`, keys: norm + m sign bits per token and head) over `t`
/// tokens on `choice`, checked once: at most 0.1 % of sign bits may differ from the CPU
/// reference (qjl.md lets a sign flip only where the projection is ~0; tests/qjl.rs checks
/// that rule exactly). Bytes moved = the f16 input + the sign words and norms written.
fn qjl_arm(
    ctx: &Context,
    m: usize,
    choice: PathChoice,
    t: usize,
    x: &[f16],
    l2: u64,
) -> kvpack::Result<Arm> {
    let cfg = QjlSide::new().m(m);
    let g = Geometry::new(HKV, DIM)?;
    let codec = QjlCodec::new(ctx, cfg, g, 0, choice)?;
    let path = codec.path();
    let l = *codec.layout();
    let rows = kvpack::store::input::f16_rows_to_words(HKV * DIM, &x[..t * HKV * DIM]);
    let from = EncodeFrom {
        start: 0,
        t_old: 0,
        inc_start: 0,
        ring_tokens: 1,
    };
    let plan = plan_encode(&l, t, from, 0);
    let streams = [t * HKV * l.sign_words() * 4, t * HKV.div_ceil(2) * 4].map(|b| b as u64);
    let in_bytes = (rows.len() * 4) as u64;
    let out_bytes: u64 = streams.iter().sum();
    let (work, first) = encode_work(ctx, path, plan, &rows, &streams, codec.tables(), l2)?;
    let got = &first[0];
    let cpu = QjlCodec::new(&Context::cpu(), cfg, g, 0, PathChoice::Cpu)?;
    let f = |tok: usize, h: usize, d: usize| x[(tok * HKV + h) * DIM + d].to_f32();
    let mut want = vec![Vec::new(), Vec::new()];
    cpu.encode(0, t, &f, &mut want)?;
    let differ: u32 = want[0]
        .iter()
        .zip(got)
        .map(|(a, b)| (a ^ b).count_ones())
        .sum();
    let total = t * HKV * m;
    if differ as usize * 1000 > total {
        return Err(kvpack::Error::Config(format!(
            "qjl encode check: {differ} of {total} sign bits differ from the CPU reference"
        )));
    }
    Ok(Arm {
        name: format!("encode qjl:m={m} T={t} [{path}]"),
        bytes: in_bytes + out_bytes,
        work,
        ns: Vec::new(),
    })
}

/// A TurboQuant-Prod encode arm (`turboquant_prod_quant`, keys: the (b − 1)-bit MSE codes,
/// the residual's m sign bits, the norm and the residual norm per token and head) over `t`
/// tokens on `choice`, checked once: at most 0.1 % of codes and of sign bits may differ from
/// the CPU reference (summation order on the GPU; tests/turboquant_prod.rs checks the spec's
/// rule exactly). Bytes moved = the f16 input + the four streams written.
fn prod_arm(
    ctx: &Context,
    bits: u32,
    choice: PathChoice,
    t: usize,
    x: &[f16],
    l2: u64,
) -> kvpack::Result<Arm> {
    let cfg = ProdSide::new(bits);
    let g = Geometry::new(HKV, DIM)?;
    let codec = ProdCodec::new(ctx, cfg, g, 0, choice)?;
    let path = codec.path();
    let (l, m) = (*codec.stage1_layout(), codec.layout().m);
    let rows = kvpack::store::input::f16_rows_to_words(HKV * DIM, &x[..t * HKV * DIM]);
    let from = QuantSource {
        start: 0,
        t_old: 0,
        inc_start: 0,
        ring_tokens: 1,
    };
    let plan = plan_prod_quant(&l, m, t, from, 0);
    let stream_bytes = [
        t * l.code_words() * 4,
        t * HKV * (m / 32) * 4,
        t * l.norm_words() * 4,
        t * l.norm_words() * 4,
    ]
    .map(|b| b as u64);
    let in_bytes = (rows.len() * 4) as u64;
    let out_bytes: u64 = stream_bytes.iter().sum();
    let (work, first) = encode_work(ctx, path, plan, &rows, &stream_bytes, codec.tables(), l2)?;
    let cpu = ProdCodec::new(&Context::cpu(), cfg, g, 0, PathChoice::Cpu)?;
    let f = |tok: usize, h: usize, d: usize| x[(tok * HKV + h) * DIM + d].to_f32();
    let mut want = vec![Vec::new(); 4];
    cpu.encode(0, t, &f, &mut want)?;
    let (codes, signs) = (&first[0], &first[1]);
    let rw = l.row_words();
    let mut code_differ = 0usize;
    for row in 0..t * HKV {
        for i in 0..l.padded {
            let c =
                |w: &[u32]| kvpack::codecs::turboquant::layout::code_at(&w[row * rw..], i, l.bits);
            code_differ += usize::from(c(&want[0]) != c(codes));
        }
    }
    let sign_differ: u32 = want[1]
        .iter()
        .zip(signs)
        .map(|(a, b)| (a ^ b).count_ones())
        .sum();
    let (nc, ns) = (t * HKV * l.padded, t * HKV * m);
    if code_differ * 1000 > nc || sign_differ as usize * 1000 > ns {
        return Err(kvpack::Error::Config(format!(
            "prod encode check: {code_differ} of {nc} codes and {sign_differ} of {ns} sign bits differ from the CPU reference"
        )));
    }
    Ok(Arm {
        name: format!("encode turboquant-prod:bits={bits} T={t} [{path}]"),
        bytes: in_bytes + out_bytes,
        work,
        ns: Vec::new(),
    })
}

/// Tokens the bench's VecInfer codebooks are trained on (k-means of 8 heads × 2 sides × 2
/// presets, C = 256, on the CPU at bench start).
#[cfg_attr(not(feature = "model"), allow(dead_code))]
const CALIB_TOKENS: usize = 1024;

/// The VecInfer calibration the arms use: made at bench start from synthetic data (see
/// [`vecinfer_calibration`]), written to a temp file.
#[cfg_attr(not(feature = "model"), allow(dead_code))]
struct VecCalib {
    path: PathBuf,
    calib: Arc<kvpack::calib::Calibration>,
    /// Wall time of the calibration (k-means) and of writing the file, seconds.
    secs: f64,
    /// Training tokens.
    tokens: usize,
}

impl VecCalib {
    /// `spec` with its calibration placeholder `calib=F` replaced by the file's path.
    fn spec(&self, spec: &str) -> String {
        spec.replace("calib=F", &format!("calib={}", self.path.display()))
    }
}

/// A VecInfer calibration of the bench's geometry (1 layer, Hkv = 8, D = 128, Hq = 32) through
/// the library's calibration API: `tokens` tokens of standard normal keys and values rounded
/// to f16 (as the bench's inputs) and normal queries, both presets, no Q-Filters; written to
/// the temp directory. The codebooks fit synthetic data, not a model's: speed does not depend
/// on them (quality rows come from `kvpack eval`).
#[cfg(feature = "model")]
fn vecinfer_calibration(tokens: usize) -> kvpack::Result<VecCalib> {
    use kvpack::calib::ModelIdentity;
    use kvpack::calib::train::{CalibOptions, calibrate_capture};
    let started = std::time::Instant::now();
    // Its own generator: the arms' k and v draws stay as they were without VecInfer.
    let mut rng = Rng(0x7665_6369_6e66_6572);
    let mut f16_normals =
        |n: usize| -> Vec<f32> { rng.normals_f16(n).iter().map(|x| x.to_f32()).collect() };
    let k = f16_normals(tokens * HKV * DIM);
    let v = f16_normals(tokens * HKV * DIM);
    let q = f16_normals(tokens * HQ * DIM);
    let cap = kvpack::model::QkvCapture {
        tokens,
        q: vec![q],
        k: vec![k],
        v: vec![v],
    };
    let id = ModelIdentity {
        name: format!("gpu_turboquant-synthetic-h{HKV}-d{DIM}"),
        arch: "llama".into(),
        layers: 1,
        q_heads: HQ,
        kv_heads: HKV,
        head_dim: DIM,
    };
    let opts = CalibOptions {
        qfilters: false,
        ..Default::default()
    };
    let text = "gpu_turboquant synthetic normal q/k/v";
    let cal = calibrate_capture(&cap, id, text, "synthetic", &opts, &|_| {})?;
    let path = std::env::temp_dir().join(format!(
        "kvpack-gpu_turboquant-{}-vecinfer-h{HKV}-d{DIM}.safetensors",
        std::process::id()
    ));
    cal.write(&path)?;
    Ok(VecCalib {
        path,
        calib: Arc::new(cal),
        secs: started.elapsed().as_secs_f64(),
        tokens,
    })
}

/// A VecInfer quantize arm (`vecinfer_quant`, keys: λ smoothing, Hadamard and the argmin over
/// the head's codebook, one packed row of n_sub indices per token and head) of preset `bits`
/// over `t` tokens on `choice`, checked once: at most 0.1 % of indices may differ from the
/// CPU reference (near-ties: the GPU's distance sums round differently; `cpu_ref` keeps the
/// reference's words for the other path's arm of the same preset and T). Bytes moved = the
/// f16 input + the indices written.
#[allow(clippy::too_many_arguments)]
fn vecinfer_arm(
    ctx: &Context,
    vc: &VecCalib,
    bits: u32,
    choice: PathChoice,
    t: usize,
    x: &[f16],
    l2: u64,
    cpu_ref: &mut Option<Vec<u32>>,
) -> kvpack::Result<Arm> {
    let preset = kvpack::cpu::vecinfer::Preset::for_bits(bits)?;
    let cfg = VecSide::new(Side::Keys, bits, preset, vc.path.clone(), vc.calib.clone());
    let g = Geometry::new(HKV, DIM)?;
    let codec = VecInferCodec::new(ctx, cfg.clone(), g, 0, choice)?;
    let path = codec.path();
    let l = *codec.quant_layout();
    let rw = l.row_words();
    let rows = kvpack::store::input::f16_rows_to_words(HKV * DIM, &x[..t * HKV * DIM]);
    let from = EncodeFrom {
        start: 0,
        t_old: 0,
        inc_start: 0,
        ring_tokens: 1,
    };
    let plan = kvpack::codecs::vecinfer::plans::plan_quant(&l, t, from, 0);
    let in_bytes = (rows.len() * 4) as u64;
    let out_bytes = (t * HKV * rw * 4) as u64;
    let (work, first) = encode_work(ctx, path, plan, &rows, &[out_bytes], codec.tables(), l2)?;
    let got = &first[0];
    if cpu_ref.is_none() {
        let cpu = VecInferCodec::new(&Context::cpu(), cfg, g, 0, PathChoice::Cpu)?;
        let f = |tok: usize, h: usize, d: usize| x[(tok * HKV + h) * DIM + d].to_f32();
        let mut want = vec![Vec::new()];
        cpu.encode(0, t, &f, &mut want)?;
        *cpu_ref = want.pop();
    }
    let want = cpu_ref.as_deref().unwrap_or_default();
    let ib = preset.index_bits();
    let mut differ = 0usize;
    for (a, b) in want.chunks(rw).zip(got.chunks(rw)) {
        for s in 0..l.n_sub() {
            use kvpack::cpu::vecinfer::vecinfer_quant::index_at;
            differ += usize::from(index_at(a, s, ib) != index_at(b, s, ib));
        }
    }
    let total = t * HKV * l.n_sub();
    if differ * 1000 > total {
        return Err(kvpack::Error::Config(format!(
            "vecinfer quantize check: {differ} of {total} indices differ from the CPU reference"
        )));
    }
    Ok(Arm {
        name: format!("quantize vecinfer:bits={bits} T={t} [{path}]"),
        bytes: in_bytes + out_bytes,
        work,
        ns: Vec::new(),
    })
}

/// The `quantize_vs_copy` target (% of the same-size copy) of a quantize/encode arm: issue
/// 15's 30 for VecInfer (an argmin over 256 centroids per sub-vector), 50 for the others.
fn copy_target_pct(arm: &str) -> u32 {
    if arm.starts_with("quantize vecinfer") {
        30
    } else {
        50
    }
}

/// VecInfer's decode arms (`calib=F`: the bench's calibration), each against kivi-4 with issue
/// 15's target: no slower than KIVI-4 (ratio ≤ 1.0).
const VECINFER_DECODE: [&str; 4] = [
    "vecinfer:bits=2,calib=F",
    "vecinfer:bits=1,calib=F",
    "vecinfer:kbits=2,calib=F/kivi:bits=4,group=32,residual=128",
    // bits=1 with its keys scored from the codebook (the layer built on a context lowered to
    // CODEBOOK_LIMIT bytes of workgroup storage, where its f16 LUT does not fit): A/B against
    // the f16 LUT the device's own limit gives it.
    "vecinfer:bits=1,calib=F [codebook form]",
];

/// The workgroup storage (bytes) the `[codebook form]` arm's layer is planned for: below what
/// bits=1's f16 LUT needs at D = 128 (47.7 KiB with the kernel's own), above the codebook
/// form's (22.6 KiB).
const CODEBOOK_LIMIT: u32 = 40 << 10;
const CODEBOOK_SUFFIX: &str = " [codebook form]";

/// A decode arm of `spec` (its name written as `label`: a VecInfer spec's calibration path
/// reads `F`), checked once against the CPU reference: rel. L2 ≤ 1e-4 per row, 1e-3 where
/// VecInfer's GPU LUT is f16 (vecinfer.md).
fn attend_arm(
    ctx: &Context,
    label: &str,
    spec: &str,
    t: usize,
    k: &[f16],
    v: &[f16],
    rng: &mut Rng,
) -> kvpack::Result<Arm> {
    let mut layer = Method::parse(spec)?.layer(ctx, HKV, DIM, PathChoice::Wgsl)?;
    let n = t * HKV * DIM;
    layer.append(Input::F16(&k[..n]), Input::F16(&v[..n]))?;
    let qh = rng.normals(HQ * DIM);
    let opts = AttendOptions::default();
    let got = layer.attend(&qh, HQ, &opts)?;
    let want = layer.attend_reference(&qh, HQ, &opts)?;
    let tol = if layer.describe().contains("GPU LUT f16") {
        1e-3
    } else {
        1e-4
    };
    for (r, (a, b)) in got.chunks(DIM).zip(want.chunks(DIM)).enumerate() {
        let num: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
        let den: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum();
        if (num / den.max(1e-30)).sqrt() > tol {
            return Err(kvpack::Error::Config(format!(
                "{label} T={t}: row {r} disagrees with the reference"
            )));
        }
    }
    let q = gpu::upload(ctx, "bench attend q", bytemuck::cast_slice(&qh))?;
    let out = gpu::storage_buffer(ctx, "bench attend out", (HQ * DIM * 4) as u64)?;
    let bytes = layer.memory().payload.total() + (HQ * DIM * 4) as u64;
    let held = layer.memory().bits_per_value().unwrap_or(0.0);
    Ok(Arm {
        name: format!("{label} T={t} ({held:.2} bits held)"),
        bytes,
        work: Work::Attend { layer, q, out },
        ns: Vec::new(),
    })
}

fn main() {
    if let Err(e) = run() {
        eprintln!("gpu_turboquant: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let o = parse_args()?;
    // With `--json -` stdout carries the JSON alone: the table goes to stderr.
    let to_stdout = o.json.as_deref() != Some(std::path::Path::new("-"));
    macro_rules! say {
        ($($a:tt)*) => {
            if to_stdout {
                println!($($a)*)
            } else {
                eprintln!($($a)*)
            }
        };
    }
    let ctx = Context::headless().map_err(|e| e.to_string())?;
    let (adapter, _, is_cpu) = common::report::adapter(&ctx);
    say!(
        "gpu_turboquant on {adapter}{}{}, T = {:?}, {} rounds",
        if is_cpu {
            format!(" ({CPU_ADAPTER_NOTE})")
        } else {
            String::new()
        },
        if o.quick { ", quick" } else { "" },
        o.tokens,
        o.rounds
    );
    let e = |x: kvpack::Error| x.to_string();
    let mut rng = Rng(0x0074_6271_7561_6e74);
    let t_max = o.tokens.iter().copied().max().unwrap_or(0);
    let kv = rng.normals_f16(2 * t_max * HKV * DIM);
    let (k, v) = kv.split_at(t_max * HKV * DIM);
    #[cfg(feature = "model")]
    let vc = {
        let vc =
            vecinfer_calibration(CALIB_TOKENS).map_err(|x| format!("vecinfer calibration: {x}"))?;
        say!(
            "VecInfer calibration F (synthetic normal q/k/v, {} tokens, Hkv = {HKV}, D = {DIM}, presets bits=1 and 2): {} ({:.1} s)",
            vc.tokens,
            vc.path.display(),
            vc.secs
        );
        Some(vc)
    };
    #[cfg(not(feature = "model"))]
    let vc: Option<VecCalib> = {
        say!("VecInfer arms left out: its calibration needs the `model` feature (--all-features)");
        None
    };
    // VecInfer's decode queries: their own draws, so the other arms' stay as they were.
    let mut vrng = Rng(0x7665_6364_6563_6f64);
    let mut vecinfer_layers = Vec::new();
    let mut skipped = Vec::new();
    let mut arms = Vec::new();
    for &t in &o.tokens {
        for (variant, bits) in [
            (Variant::Mse, 2),
            (Variant::Mse, 3),
            (Variant::Mse, 4),
            (Variant::Rvq, 2),
        ] {
            for choice in [PathChoice::WgslSubgroup, PathChoice::WgslWorkgroup] {
                // A failed check (or a path the adapter lacks) ends the run: no arm is
                // left out silently.
                arms.push(
                    quant_arm(&ctx, variant, bits, choice, t, k, o.l2_bytes).map_err(|err| {
                        format!("quantize {}:bits={bits} [{choice}]: {err}", variant.name())
                    })?,
                );
            }
        }
        for m in [128, 256] {
            for choice in [PathChoice::WgslSubgroup, PathChoice::WgslWorkgroup] {
                arms.push(
                    qjl_arm(&ctx, m, choice, t, k, o.l2_bytes)
                        .map_err(|err| format!("encode qjl:m={m} [{choice}]: {err}"))?,
                );
            }
        }
        for choice in [PathChoice::WgslSubgroup, PathChoice::WgslWorkgroup] {
            arms.push(
                prod_arm(&ctx, 4, choice, t, k, o.l2_bytes)
                    .map_err(|err| format!("encode turboquant-prod:bits=4 [{choice}]: {err}"))?,
            );
        }
        if let Some(vc) = &vc {
            for bits in [1, 2] {
                // The CPU reference (an argmin over 256 centroids per sub-vector: seconds at
                // 32k tokens) made once for both paths.
                let mut cpu_ref = None;
                for choice in [PathChoice::WgslSubgroup, PathChoice::WgslWorkgroup] {
                    arms.push(
                        vecinfer_arm(&ctx, vc, bits, choice, t, k, o.l2_bytes, &mut cpu_ref)
                            .map_err(|err| {
                                format!("quantize vecinfer:bits={bits} [{choice}]: {err}")
                            })?,
                    );
                }
            }
        }
        if t == t_max {
            let mut twin =
                quant_arm(&ctx, Variant::Mse, 4, PathChoice::Wgsl, t, k, o.l2_bytes).map_err(e)?;
            twin.name += AA_SUFFIX;
            arms.push(twin);
        }
        for m in [
            "kivi-4",
            "turboquant-mse:bits=4",
            "turboquant-rvq:bits=2",
            "kivi-2",
            "turboquant-mse:bits=3",
            "turboquant-mse:bits=2",
            "qjl:m=128/kivi:bits=4,group=32,residual=128",
            "turboquant-prod:bits=4/kivi:bits=4,group=32,residual=128",
        ] {
            arms.push(attend_arm(&ctx, m, m, t, k, v, &mut rng).map_err(e)?);
        }
        for label in vc.as_ref().map_or(&[][..], |_| &VECINFER_DECODE[..]) {
            let forced = label.strip_suffix(CODEBOOK_SUFFIX);
            let spec = vc
                .as_ref()
                .map_or(String::new(), |c| c.spec(forced.unwrap_or(label)));
            let actx = match forced {
                Some(_) => ctx
                    .with_max_workgroup_storage_size(CODEBOOK_LIMIT)
                    .map_err(e)?,
                None => ctx.clone(),
            };
            match attend_arm(&actx, label, &spec, t, k, v, &mut vrng) {
                Ok(a) => {
                    if let Work::Attend { layer, .. } = &a.work {
                        // Records which LUT (f32 or f16) the device's workgroup storage allowed.
                        let d = layer.describe();
                        if forced.is_some() && !d.contains("from the codebook") {
                            return Err(format!("{label} T={t}: not the codebook form: {d}"));
                        }
                        say!("{label} T={t}: {d}");
                        vecinfer_layers.push(serde_json::json!({
                            "method": label, "tokens": t, "describe": d,
                        }));
                    }
                    arms.push(a);
                }
                // The device's workgroup storage holds not even the f16 LUT: stated, not
                // silently left out (the JSON's `skipped`).
                Err(err @ kvpack::Error::Limit { .. }) => {
                    say!("{label} T={t}: NOT RUN on this device: {err}");
                    skipped.push(serde_json::json!({
                        "method": label, "tokens": t, "reason": err.to_string(),
                    }));
                }
                Err(err) => return Err(format!("{label} T={t}: {err}")),
            }
        }
    }
    if let Some(only) = &o.only {
        let pairs: Vec<String> = arms
            .iter()
            .filter_map(|a| a.name.strip_suffix(AA_SUFFIX).map(str::to_string))
            .collect();
        arms.retain(|a| {
            a.name.contains(only.as_str()) || a.name.ends_with(AA_SUFFIX) || pairs.contains(&a.name)
        });
        say!("--only {only}: timing {} arms", arms.len());
    }
    let mut sizes: Vec<u64> = arms
        .iter()
        .filter(|a| matches!(a.work, Work::Quant { .. }))
        .map(|a| (a.bytes / 2).div_ceil(16) * 16)
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    for s in sizes {
        arms.push(copy_arm(&ctx, s, o.l2_bytes, &mut rng).map_err(e)?);
    }
    // Before every timed call, unless --no-flush: a separate submission copying 2x the assumed
    // L2 (as gpu_kivi does), so the L2 holds someone else's lines and the GPU is busy right
    // before the timed work instead of idling between submissions (its clocks then drop).
    let flush = if o.flush {
        let mut one = Rng(0x0f1a_5eed);
        Some(copy_arm(&ctx, 2 * o.l2_bytes, 0, &mut one).map_err(e)?)
    } else {
        None
    };
    let stamps = Stamps::new(&ctx, 1).map_err(e)?;
    for round in 0..o.warmup + o.rounds {
        let n = arms.len();
        for i in 0..n {
            if let Some(f) = &flush {
                gpu::submit_blocking(&ctx, "bench L2 flush", |enc| record(&ctx, f, 0, enc))
                    .map_err(e)?;
            }
            let a = &mut arms[(i + round) % n];
            stamps
                .time(&ctx, 0, |enc| record(&ctx, a, round, enc))
                .map_err(e)?;
            let ns = stamps.read(&ctx, 1).map_err(e)?[0];
            if round >= o.warmup {
                a.ns.push(ns);
            }
        }
    }
    let copy_gbs = |bytes: u64| -> Option<f64> {
        arms.iter()
            .filter(|a| matches!(a.work, Work::Copy { .. }))
            .min_by_key(|a| a.bytes.abs_diff(bytes))
            .map(|a| a.bytes as f64 / stats(&a.ns).0)
    };
    say!("\n| arm | median µs | min | max | GB/s | % of copy |");
    say!("|---|---:|---:|---:|---:|---:|");
    let mut vs_copy = Vec::new();
    let mut rows = Vec::new();
    for a in &arms {
        let (med, lo, hi) = stats(&a.ns);
        let gbs = a.bytes as f64 / med;
        let pct = copy_gbs(a.bytes)
            .map(|c| 100.0 * gbs / c)
            .unwrap_or(f64::NAN);
        if matches!(a.work, Work::Quant { .. }) {
            vs_copy.push(serde_json::json!({
                "arm": a.name, "pct_of_copy": pct, "target_pct": copy_target_pct(&a.name),
            }));
        }
        say!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.1} | {} |",
            a.name,
            med / 1e3,
            lo / 1e3,
            hi / 1e3,
            gbs,
            if matches!(a.work, Work::Quant { .. }) {
                format!("{pct:.0} %")
            } else {
                "".into()
            }
        );
        rows.push(serde_json::json!({
            "arm": a.name, "bytes": a.bytes, "median_us": med / 1e3, "min_us": lo / 1e3,
            "max_us": hi / 1e3, "gbs": gbs, "samples_ns": a.ns,
        }));
    }
    let names: Vec<(&str, &[f64], f64)> = arms
        .iter()
        .map(|a| (a.name.as_str(), a.ns.as_slice(), stats(&a.ns).0))
        .collect();
    let (_, aa, floor) = if to_stdout {
        common::aa_floor(&names)
    } else {
        common::aa_floor_to(&mut std::io::stderr(), &names)
    };
    let mut vs_kivi = Vec::new();
    for &t in &o.tokens {
        let med = |m: &str| {
            arms.iter()
                .find(|a| a.name.starts_with(&format!("{m} T={t} ")))
                .map(|a| stats(&a.ns).0)
        };
        let pairs = [
            ("kivi-4", "turboquant-mse:bits=4"),
            ("kivi-4", "turboquant-rvq:bits=2"),
            ("kivi-2", "turboquant-mse:bits=3"),
            ("kivi-2", "turboquant-mse:bits=2"),
            ("kivi-4", "qjl:m=128/kivi:bits=4,group=32,residual=128"),
            (
                "kivi-4",
                "turboquant-prod:bits=4/kivi:bits=4,group=32,residual=128",
            ),
        ]
        .map(|(kivi, m)| (kivi, m, 1.2))
        .into_iter()
        .chain(VECINFER_DECODE.map(|m| ("kivi-4", m, 1.0)));
        for (kivi, tq, target) in pairs {
            if let Some(k) = skipped
                .iter()
                .find(|k| k["method"] == tq && k["tokens"] == t)
            {
                say!(
                    "  T={t}: {tq} / {kivi}: not run ({})",
                    k["reason"].as_str().unwrap_or("?")
                );
            }
            if let (Some(a), Some(b)) = (med(kivi), med(tq)) {
                say!(
                    "  T={t}: {tq} / {kivi} = {:.2}× (target ≤ {target:.1}×)",
                    b / a
                );
                vs_kivi.push(serde_json::json!({
                    "tokens": t, "method": tq, "kivi": kivi, "method_us": b / 1e3,
                    "kivi_us": a / 1e3, "ratio": b / a, "target_ratio": target,
                }));
            }
        }
    }
    if let Some(p) = &o.json {
        let mut doc = serde_json::json!({
            "adapter": adapter, "tokens": o.tokens, "rows": rows, "quantize_vs_copy": vs_copy,
            "attend_vs_kivi": vs_kivi, "aa": aa, "noise_floor_pct": floor,
        });
        if let Some(vc) = &vc {
            doc["vecinfer"] = serde_json::json!({
                "calibration": vc.path.display().to_string(),
                "calibration_s": vc.secs,
                "training_tokens": vc.tokens,
                "codebooks": "synthetic (normal q/k/v rounded to f16): speed only",
                "layers": vecinfer_layers,
                "skipped": skipped,
            });
        }
        let text = serde_json::to_string_pretty(&doc).map_err(|x| x.to_string())?;
        if to_stdout {
            std::fs::write(p, text).map_err(|x| format!("{}: {x}", p.display()))?;
        } else {
            println!("{text}");
        }
    }
    Ok(())
}
