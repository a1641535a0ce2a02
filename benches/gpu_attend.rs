//! GPU benchmark of decode attention (Tq = 1) on the f16 cache and on KIVI caches, against the
//! device's copy roofline, timed with timestamp queries. See `benches/README.md`.
//!
//! ```text
//! cargo bench --bench gpu_attend                 # full sizes (a real GPU)
//! cargo bench --bench gpu_attend -- --quick      # small sizes (proves the code path, e.g. lavapipe)
//! options: --rounds N  --warmup N  --l2-mib N  --no-flush  --spin-ms N  --tokens T1,T2,...  --chunk N
//! (tokens per flash-decoding chunk, a multiple of 32; default automatic)  --json PATH  --plot PATH
//! --decode-only (no prefill-chunk and append arms: a quicker A/B of decode kernels)
//! --prefill-only (prefill chunks only, the A-vs-A twins kept for the noise floor; the prefill
//! kernel beside the decode kernel at every method and T, and for KIVI-4 at the variant T also
//! at a quarter of its automatic split; chunks of 4, 8 and 16 rows on every kernel for f16 and
//! KIVI-4 at the variant T)
//! --short-every-t (with --prefill-only: the chunks of 4, 8 and 16 rows at every T, not only
//! at the variant T: where Auto's tensor-core pairs, `plan::TENSOR_AUTO`, should start)
//! --replot JSON PNG (no GPU: the figure drawn again from a run's JSON)
//! --unchecked (print the times even where arms fail their output check: for the measuring
//! knobs whose results are wrong by design, e.g. KVPACK_TC_FIXED)
//! --only P1,P2,... (attention arms whose name contains one of the patterns, and the A-vs-A
//! twins: a shorter run of a few arms; the copies follow the arms kept)
//! ```
//!
//! Arms, all interleaved within every round (each call submitted alone and waited for; the
//! starting arm rotates with the round):
//! - `copy S`: vec4<u32> copy of S bytes (`registry::COPY`); bytes moved = 2·S. One of 1 GiB,
//!   and one per attention case with 2·S ≈ the bytes that case reads.
//! - `f16` / `kivi-4` / `kivi-2` at T tokens: one whole `KvLayer::encode_attend` call (every
//!   partial pass and the merge) with Hq = 32, Hkv = 8, D = 128, on a cache built by one
//!   prefill of T random f16 tokens; bytes read = the cache payload + q.
//! - `... Tq=64`: a prefill chunk of 64 query rows against the same caches: one
//!   `encode_attend` call with q `[64, 32, 128]` (`AttendKernel::Decode`, tier 1);
//!   KIVI-4 at 32k also on the prefill kernel (`(prefill kernel)`).
//! - `append kivi-b T`: the cache update of one decode step, `KvLayer::encode_append` of one
//!   token recorded between the timestamps; every round appends G = 32 tokens one at a time,
//!   one of which triggers the flush that quantizes a block of 32 (timed apart). The per-token
//!   cost is ((G - 1) · median step + median flush step) / G, reported next to decode attention
//!   at the same T (the Amdahl share of the cache update). The f16 cache's appends
//!   (`F16Layer::append`) are blocking host writes, not encoder-recorded: not timed.
//!
//! Timing: one encoder holds an empty compute pass writing the begin timestamp, the work, and
//! an empty compute pass writing the end timestamp (wgpu-core records `begin_compute_pass` /
//! `end_compute_pass`, and so the timestamp writes, for a pass without dispatches; on Vulkan
//! both are `vkCmdWriteTimestamp(BOTTOM_OF_PIPE)`, the end one after all earlier commands).
//! wgpu's zero-initialisation of fresh buffers (the per-call partials) is recorded into a
//! command buffer pushed *in front of* the submission, so it is outside the timed span.
//! Before each timed call, unless `--no-flush`, a separate submission runs a bench-owned kernel
//! that reads 2× the assumed L2 (`common/l2_flush.rs`), so every timed call starts with an L2
//! full of someone else's clean lines, whatever the kernels under measurement do. Before each
//! round (warm-up rounds included), unless `--spin-ms 0` or `--no-flush`, one submission keeps
//! the GPU busy for about N ms (default 20) with that kernel back to back, so that a round of
//! short calls, each waited for, starts at the clock a busy GPU runs at (`ReadFlush::spin`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use half::f16;
use kvpack::attention::gpu::kernel_target;
use kvpack::attention::plan::{
    CacheShape, Call, SplitKernel, TENSOR_VECTORS, plan_kernel, split_target,
};
use kvpack::context::{Context, KernelPath, PathChoice};
use kvpack::gpu::{self, DispatchPlan, registry};
use kvpack::{AttendKernel, AttendOptions, Input, KvLayer, Method};

mod common;

use common::l2_flush::ReadFlush;
use common::report::{self, ArmRow, CPU_ADAPTER_NOTE, Report, Stamps};
use common::{AA_SUFFIX, MIB, Rng, fill_from, fmt_bytes, rotation, stats};
const HQ: usize = 32;
const HKV: usize = 8;
const DIM: usize = 128;
/// Query rows of a decode call.
const TQ: usize = 1;
/// Query rows of a prefill-chunk call.
const TQ_PREFILL: usize = 64;
/// KIVI key group: tokens appended per round by an append arm (one flush among them).
const G: usize = 32;
/// Distinct query (and output) buffers each attention arm rotates through.
const Q_ROTATION: usize = 4;
/// Design variants: (name suffix, description).
const LONG: (&str, &str) = (" (2x split)", "splits of twice the automatic tokens");
const SHORT: (&str, &str) = (" (1/2 split)", "splits of half the automatic tokens");

struct Opts {
    quick: bool,
    rounds: usize,
    warmup: usize,
    l2_bytes: u64,
    flush: bool,
    /// `--spin-ms N`: GPU busy for about N ms before each round (0: never).
    spin_ms: f64,
    /// `--decode-only`: decode attention and copies only.
    decode_only: bool,
    /// `--prefill-only`: prefill chunks (and the A-vs-A twins, for the noise floor) only.
    prefill_only: bool,
    /// `--short-every-t`: with `--prefill-only`, the 4-, 8- and 16-row chunks at every T.
    short_every_t: bool,
    /// `--chunk N`: tokens per flash-decoding chunk.
    chunk: Option<usize>,
    /// `--tokens 1024,4096`: overrides the T list.
    tokens: Option<Vec<usize>>,
    /// `--only P1,P2`: the attention arms whose name contains one of the patterns (and the
    /// A-vs-A twins) only.
    only: Option<Vec<String>>,
    /// `--unchecked`: times printed even where an arm fails its output check.
    unchecked: bool,
    json: Option<PathBuf>,
    plot: Option<PathBuf>,
}

static CHUNK: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();

/// The options every timed and checked call uses (`--chunk` sets the chunk size).
fn attend_opts() -> AttendOptions {
    AttendOptions::default().chunk_tokens(CHUNK.get().copied().flatten())
}

fn parse_args() -> Result<Opts, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let mut o = Opts {
        quick,
        rounds: if quick { 3 } else { 40 },
        warmup: if quick { 1 } else { 5 },
        // H200: 60 MB of L2 (docs/GPU.md); 64 MiB errs on the safe side.
        l2_bytes: if quick { MIB } else { 64 * MIB },
        flush: true,
        spin_ms: if quick { 0.0 } else { 20.0 },
        decode_only: false,
        prefill_only: false,
        tokens: None,
        only: None,
        unchecked: false,
        chunk: None,
        short_every_t: false,
        json: None,
        plot: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = |name: &str| -> Result<u64, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{name} needs a number"))
        };
        match a.as_str() {
            "--quick" | "--bench" => {}
            "--rounds" => o.rounds = num("--rounds")?.max(1) as usize,
            "--chunk" => o.chunk = Some(num("--chunk")? as usize),
            "--warmup" => o.warmup = num("--warmup")? as usize,
            "--l2-mib" => o.l2_bytes = num("--l2-mib")?.max(1) * MIB,
            "--no-flush" => o.flush = false,
            "--spin-ms" => o.spin_ms = num("--spin-ms")? as f64,
            "--decode-only" => o.decode_only = true,
            "--prefill-only" => o.prefill_only = true,
            "--short-every-t" => o.short_every_t = true,
            "--unchecked" => o.unchecked = true,
            "--json" => o.json = Some(it.next().ok_or("--json needs a path")?.into()),
            "--plot" => o.plot = Some(it.next().ok_or("--plot needs a path")?.into()),
            "--only" => {
                let list = it.next().ok_or("--only needs a list of patterns")?;
                o.only = Some(list.split(',').map(str::to_string).collect());
            }
            "--tokens" => {
                let list = it.next().ok_or("--tokens needs a list")?;
                let t: Result<Vec<usize>, _> = list.split(',').map(str::parse).collect();
                match t {
                    Ok(t) if !t.is_empty() && t.iter().all(|&x| x > 0) => o.tokens = Some(t),
                    _ => return Err(format!("--tokens needs positive numbers, got `{list}`")),
                }
            }
            other => eprintln!("gpu_attend: ignoring argument `{other}`"),
        }
    }
    Ok(o)
}

fn main() {
    if report::replotted("gpu_attend", replot) {
        return;
    }
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("gpu_attend: {e}");
            std::process::exit(2);
        }
    };
    if let Some(c) = opts.chunk {
        println!("  chunk_tokens forced to {c}");
    }
    let _ = CHUNK.set(opts.chunk);
    let ctx = match Context::headless() {
        Ok(c) => c,
        Err(e) => {
            println!("gpu_attend: skipped: no headless context: {e}");
            return;
        }
    };
    if ctx.device().is_none() {
        println!("gpu_attend: skipped: no GPU adapter\n{}", ctx.describe());
        return;
    }
    if let Err(e) = kvpack::gpu::timing::timestamp_period_ns(&ctx) {
        println!("gpu_attend: skipped: {e}");
        return;
    }
    if let Err(e) = run(&ctx, &opts) {
        eprintln!("gpu_attend: error: {e}");
        std::process::exit(1);
    }
}

fn fmt_tokens(t: usize) -> String {
    if t >= 1024 && t.is_multiple_of(1024) {
        format!("{}k", t / 1024)
    } else {
        t.to_string()
    }
}

/// What one arm runs.
enum Work {
    /// `registry::COPY` over (src, dst) pairs, rotated.
    Copy {
        plan: DispatchPlan,
        instances: Vec<(wgpu::Buffer, wgpu::Buffer)>,
    },
    /// One attention call on `layer`, rotating through `qs` / `outs`.
    Attend(Box<AttendArm>),
    /// G single-token appends per round (timed apart from the round's slots).
    Append(Box<AppendArm>),
}

/// What a timed append step did to the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StepKind {
    /// Rows written, nothing quantized, no storage grown.
    Step,
    /// A KIVI block of G tokens quantized and packed.
    Flush,
    /// A segment grown (its history copied on the device); may include a flush.
    Grow,
}

struct AppendArm {
    method: &'static str,
    /// Tokens of the prefill the appends start from.
    t0: usize,
    layer: Box<dyn KvLayer>,
    appended: usize,
    /// Every timed step (ns) and what it did.
    steps: Vec<(f64, StepKind)>,
}

impl AppendArm {
    fn ns(&self, kind: StepKind) -> Vec<f64> {
        self.steps
            .iter()
            .filter(|s| s.1 == kind)
            .map(|s| s.0)
            .collect()
    }
    /// Tokens in compressed form (an f16 layer: all of them).
    fn quantized_len(&self) -> usize {
        self.layer.memory().quantized
    }
}

struct AttendArm {
    method: &'static str,
    t: usize,
    tq: usize,
    layer: Box<dyn KvLayer>,
    q_host: Vec<Vec<f32>>,
    qs: Vec<wgpu::Buffer>,
    outs: Vec<wgpu::Buffer>,
    cache_bytes: u64,
    /// Partials written by the partial passes and read by the merge (≈, not counted).
    partial_bytes: u64,
    passes: usize,
    /// The kernel path of the KIVI or f16 partial pass.
    path: KernelPath,
    /// An A-vs-A twin (a second cache of an arm's case, for the noise floor).
    twin: bool,
    /// A design variant of the same method (`None`: the library's default on this device).
    variant: Option<&'static str>,
    /// The options of every call of this arm.
    opts: AttendOptions,
}

struct Arm {
    name: String,
    /// Attention: bytes read per call (cache payload + q). Copy: bytes read + written.
    bytes: u64,
    work: Work,
    times_ns: Vec<f64>,
}

impl Arm {
    fn instances(&self) -> usize {
        match &self.work {
            Work::Copy { instances, .. } => instances.len(),
            Work::Attend(a) => a.qs.len(),
            Work::Append(_) => 1,
        }
    }
    fn attend(&self) -> Option<&AttendArm> {
        match &self.work {
            Work::Attend(a) => Some(a),
            _ => None,
        }
    }
    fn is_copy(&self) -> bool {
        matches!(self.work, Work::Copy { .. })
    }
}

fn copy_arm(ctx: &Context, size: u64, l2: u64, rng: &mut Rng) -> kvpack::Result<Arm> {
    let n4 = size / 16;
    let def = &registry::COPY;
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
    let n = rotation(l2, 2 * size);
    let mut instances = Vec::with_capacity(n);
    for _ in 0..n {
        let src = gpu::storage_buffer(ctx, "bench copy src", size)?;
        let dst = gpu::storage_buffer(ctx, "bench copy dst", size)?;
        fill_from(ctx, &seed, &src)?;
        instances.push((src, dst));
    }
    Ok(Arm {
        name: format!("copy {}", fmt_bytes(size)),
        bytes: 2 * size,
        work: Work::Copy { plan, instances },
        times_ns: Vec::new(),
    })
}

/// A layer of `method` holding the first `t` tokens of `k` / `v` (one prefill).
fn build_layer(
    ctx: &Context,
    method: &str,
    choice: PathChoice,
    t: usize,
    k: &[f16],
    v: &[f16],
) -> kvpack::Result<Box<dyn KvLayer>> {
    let mut layer = Method::parse(method)?.layer(ctx, HKV, DIM, choice)?;
    let n = t * HKV * DIM;
    layer.append(Input::F16(&k[..n]), Input::F16(&v[..n]))?;
    Ok(layer)
}

/// The bench's call shape (`HQ` query heads over `HKV` KV heads, `DIM` wide) with `tq` rows
/// over `t` cached tokens.
fn bench_call(t: usize, tq: usize, opts: AttendOptions) -> Call {
    Call {
        tq,
        hq: HQ,
        hkv: HKV,
        dim: DIM,
        tokens: t,
        opts,
    }
}

/// The partials traffic of one call (written and read back) and its dispatches, as
/// `attention::plan` plans it for an unsegmented cache of `method` (`opts`' split size).
fn partials_estimate(
    ctx: &Context,
    method: &Method,
    t: usize,
    tq: usize,
    opts: AttendOptions,
) -> (u64, usize) {
    let call = bench_call(t, tq, opts);
    let q = |g: usize| kvpack::store::quantized_len(t, method.residual(), g);
    let (qk, qv) = (
        q(method.key().block_tokens()),
        q(method.value().block_tokens()),
    );
    let shape = CacheShape {
        qk,
        qv,
        seg_tokens: usize::MAX / 2,
        ring_cap: [t - qk, t - qv].map(|c| c.max(1)),
        row_words: HKV * DIM / 2,
        value_dim: DIM,
        value_space_out: true,
        key_prep: false,
        ring: method.residual()
            + method
                .key()
                .block_tokens()
                .max(method.value().block_tokens())
            > 1,
        positions: None,
    };
    let wg_limit = ctx.max_workgroup_storage_size() as usize;
    let kernel = call
        // (the value groups only bound the tensor-core decode kernel's workgroup storage: KIVI's
        // 4 groups of 32 at D = 128, the most among the benched methods)
        .split_kernel(
            &shape,
            wg_limit,
            &ctx.tensor_cores(),
            &Ok(kvpack::attention::plan::Tiles {
                groups: 4,
                rows: false,
            }),
        )
        .unwrap_or(SplitKernel::Decode);
    let target = kvpack::attention::gpu::kernel_target(ctx, kernel);
    match plan_kernel(&call, &shape, target, u64::MAX, kernel) {
        Ok(p) => (
            2 * p.partial_bytes,
            p.dispatches.len() + usize::from(p.merge.is_some()),
        ),
        Err(_) => (0, 0),
    }
}

/// `a` on the tensor-core prefill kernel with its splits at twice the split target
/// ([`kvpack::attention::plan::Call::split_tokens`]; about two waves: 17 splits of 2,016
/// tokens at 32k and 64 rows), the rule before one wave ([`kernel_target`]).
fn two_waves(ctx: &Context, a: Arm, t: usize, tq: usize) -> kvpack::Result<Arm> {
    let call = bench_call(t, tq, attend_opts());
    let chunk = call.split_tokens(2 * split_target(ctx.adapter_info()), TENSOR_VECTORS);
    retarget(
        ctx,
        a,
        " (tensor cores, two waves)",
        Some("tensor cores, splits at twice the split target"),
        |o| {
            o.kernel = AttendKernel::Tensor;
            o.chunk_tokens = Some(chunk);
        },
    )
}

#[allow(clippy::too_many_arguments)]
fn attend_arm(
    ctx: &Context,
    method: &'static str,
    choice: PathChoice,
    t: usize,
    tq: usize,
    k: &[f16],
    v: &[f16],
    rng: &mut Rng,
) -> kvpack::Result<Arm> {
    let layer = build_layer(ctx, method, choice, t, k, v)?;
    let q_elems = tq * HQ * DIM;
    let q_host: Vec<Vec<f32>> = (0..Q_ROTATION).map(|_| rng.normals(q_elems)).collect();
    let mut qs = Vec::new();
    let mut outs = Vec::new();
    for q in &q_host {
        qs.push(gpu::upload(ctx, "bench attend q", bytemuck::cast_slice(q))?);
        outs.push(gpu::storage_buffer(
            ctx,
            "bench attend out",
            (q_elems * 4) as u64,
        )?);
    }
    let cache_bytes = layer.memory().payload.total();
    let (partial_bytes, passes) =
        partials_estimate(ctx, &Method::parse(method)?, t, tq, attend_opts());
    let path = layer
        .attend_kernels()?
        .first()
        .map_or(kvpack::KernelPath::Cpu, |k| k.1);
    Ok(Arm {
        name: if tq == TQ {
            format!("{method} T={} [{path}]", fmt_tokens(t))
        } else {
            format!("{method} T={} Tq={tq} [{path}]", fmt_tokens(t))
        },
        bytes: cache_bytes + (q_elems * 4) as u64,
        work: Work::Attend(Box::new(AttendArm {
            method,
            t,
            tq,
            layer,
            q_host,
            qs,
            outs,
            cache_bytes,
            partial_bytes,
            passes,
            path,
            twin: false,
            variant: None,
            opts: attend_opts(),
        })),
        times_ns: Vec::new(),
    })
}

/// Attention arm `a` as a variant of the default: `suffix` appended to its name, `what` as its
/// variant (`None`: left as it is), `set` applied to its options, and the partials estimate
/// that follows them.
fn retarget(
    ctx: &Context,
    mut a: Arm,
    suffix: &str,
    what: Option<&'static str>,
    set: impl FnOnce(&mut AttendOptions),
) -> kvpack::Result<Arm> {
    a.name += suffix;
    if let Work::Attend(x) = &mut a.work {
        if what.is_some() {
            x.variant = what;
        }
        set(&mut x.opts);
        let (pb, passes) = partials_estimate(ctx, &Method::parse(x.method)?, x.t, x.tq, x.opts);
        x.partial_bytes = pb;
        x.passes = passes;
    }
    Ok(a)
}

/// Records instance `k` of `arm`'s work (no timestamps).
fn encode_work(
    ctx: &Context,
    enc: &mut wgpu::CommandEncoder,
    arm: &Arm,
    k: usize,
) -> kvpack::Result<()> {
    match &arm.work {
        Work::Copy { plan, instances } => {
            let (src, dst) = &instances[k];
            gpu::encode_plan(ctx, enc, KernelPath::WgslWorkgroup, plan, &[src, dst])
        }
        Work::Attend(a) => a
            .layer
            .encode_attend(enc, &a.qs[k], a.tq, HQ, &a.opts, &a.outs[k]),
        Work::Append(_) => Err(kvpack::Error::Config(
            "append arms are timed step by step".into(),
        )),
    }
}

/// Submits instance `k` of `arm` alone between the timestamps of `slot` and waits for it.
fn time_arm(ctx: &Context, stamps: &Stamps, arm: &Arm, k: usize, slot: u32) -> kvpack::Result<()> {
    stamps.time(ctx, slot, |enc| encode_work(ctx, enc, arm, k))
}

fn read_f32(ctx: &Context, b: &wgpu::Buffer, n: usize) -> kvpack::Result<Vec<f32>> {
    Ok(bytemuck::pod_collect_to_vec(&gpu::readback(
        ctx,
        b,
        (n * 4) as u64,
    )?))
}

/// Worst relative L2 error over rows of `d`.
fn rel_l2_rows(a: &[f32], b: &[f32], d: usize) -> f64 {
    let mut worst = 0f64;
    for (x, y) in a.chunks(d).zip(b.chunks(d)) {
        let (mut num, mut den) = (0f64, 0f64);
        for (&p, &q) in x.iter().zip(y) {
            num += (f64::from(p) - f64::from(q)).powi(2);
            den += f64::from(q).powi(2);
        }
        worst = worst.max((num / den.max(1e-30)).sqrt());
    }
    worst
}

/// Checks instance 0 of an arm: copy dst == src; attention: `attend()` equals the timed path
/// bit for bit and, for T ≤ `cpu_max`, the CPU path within 1e-3 relative L2 per row.
fn check_arm(
    ctx: &Context,
    arm: &Arm,
    k: &[f16],
    v: &[f16],
    cpu_max: usize,
) -> Result<String, String> {
    let e = |e: kvpack::Error| e.to_string();
    let a = match &arm.work {
        Work::Copy { instances, .. } => {
            let (src, dst) = &instances[0];
            let n = src.size().min(64 * MIB);
            let (x, y) = (
                gpu::readback(ctx, src, n).map_err(e)?,
                gpu::readback(ctx, dst, n).map_err(e)?,
            );
            return if x == y {
                Ok(format!("dst == src ({})", fmt_bytes(n)))
            } else {
                Err("copy: dst differs from src".into())
            };
        }
        Work::Attend(a) => a,
        Work::Append(a) => return check_append(a, k, v, cpu_max),
    };
    let opts = a.opts;
    let n = a.tq * HQ * DIM;
    gpu::submit_blocking(ctx, "bench check", |enc| encode_work(ctx, enc, arm, 0)).map_err(e)?;
    let timed = read_f32(ctx, &a.outs[0], n).map_err(e)?;
    let blocking = a.layer.attend(&a.q_host[0], HQ, &opts).map_err(e)?;
    if timed.iter().any(|x| !x.is_finite()) {
        return Err("non-finite output on the timed path".into());
    }
    let same = timed
        .iter()
        .zip(&blocking)
        .filter(|(x, y)| x.to_bits() == y.to_bits())
        .count();
    if same != n {
        return Err(format!(
            "timed path differs from attend(): {} of {n} values, rel L2 {:.1e}",
            n - same,
            rel_l2_rows(&timed, &blocking, DIM)
        ));
    }
    let mut msg = "timed == attend() (bitwise)".to_string();
    if a.t <= cpu_max {
        // The CPU reference on the same stored codes: a GPU may quantize a few codes one step
        // differently at half-integers (../shared/spec/kivi.md), so a separately built CPU
        // cache is not the same cache.
        let _ = (k, v);
        let reference = a
            .layer
            .attend_reference(&a.q_host[0], HQ, &opts)
            .map_err(e)?;
        let err = rel_l2_rows(&timed, &reference, DIM);
        msg += &format!(", vs CPU path: worst row rel L2 {err:.1e}");
        if err.is_nan() || err > 1e-3 {
            return Err(msg);
        }
    } else {
        msg += &format!(", CPU path not run (T > {})", fmt_tokens(cpu_max));
    }
    Ok(msg)
}

/// The size-matched copy: `2·S ≈ bytes`, S a multiple of 64 KiB (16 B in quick mode sizes).
fn matched_copy_size(bytes: u64) -> u64 {
    (bytes / 2).div_ceil(64 * 1024) * 64 * 1024
}

fn run(ctx: &Context, o: &Opts) -> kvpack::Result<()> {
    let started = Instant::now();
    let (adapter, device_type, cpu_adapter) = report::adapter(ctx);
    println!("gpu_attend: {adapter}");
    if std::env::var("KVPACK_NO_UNROLL").is_ok_and(|v| v == "1") {
        println!("  KVPACK_NO_UNROLL=1: marked WGSL loops stay loops");
    }
    if cpu_adapter {
        println!("  NOTE: {CPU_ADAPTER_NOTE}");
    }
    println!(
        "  mode {}, {} warm-up + {} timed rounds, assumed L2 {}, L2 flush before each call: {}, GPU kept busy before each round: {}",
        if o.quick { "quick" } else { "full" },
        o.warmup,
        o.rounds,
        fmt_bytes(o.l2_bytes),
        if o.flush { "yes" } else { "no" },
        if o.flush && o.spin_ms > 0.0 {
            format!("~{} ms", o.spin_ms)
        } else {
            "no".to_string()
        }
    );
    println!(
        "  decode: Tq = {TQ}, Hq = {HQ}, Hkv = {HKV}, D = {DIM}; KIVI G = 32, R = 128; one prefill of random N(0,1) f16 K/V"
    );
    let (big_copy, mut tokens) = if o.quick {
        (4 * MIB, vec![256, 1024])
    } else {
        (1 << 30, vec![1024, 4096, 32768, 131072])
    };
    if let Some(t) = &o.tokens {
        tokens = t.clone();
    }
    let cpu_max = 4096;
    // kivi-4 also runs on the workgroup-memory variant at 32k (else at the largest T).
    let variant_t = if tokens.contains(&32768) {
        32768
    } else {
        tokens.iter().copied().max().unwrap_or(0)
    };
    let methods: [&'static str; 3] = ["f16", "kivi-4", "kivi-2"];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);

    // Host K/V of the largest T; every case takes a prefix.
    let t_max = tokens.iter().copied().max().unwrap_or(0);
    let t0 = Instant::now();
    let kv = rng.normals_f16(2 * t_max * HKV * DIM);
    let (k, v) = kv.split_at(t_max * HKV * DIM);
    println!(
        "  host K/V: {} tokens ({} each) generated in {:.1} s",
        t_max,
        fmt_bytes((t_max * HKV * DIM * 2) as u64),
        t0.elapsed().as_secs_f64()
    );

    // Attention arms.
    let t0 = Instant::now();
    let mut attend_arms = Vec::new();
    for &t in &tokens {
        for &m in &methods {
            if !o.prefill_only {
                attend_arms.push(attend_arm(ctx, m, PathChoice::Wgsl, t, TQ, k, v, &mut rng)?);
            }
            // Tier 3 decode: the tensor-core decode kernel, where the device has tensor cores.
            if ctx.tensor_cores().is_ok() && !o.prefill_only {
                let a = attend_arm(ctx, m, PathChoice::Wgsl, t, TQ, k, v, &mut rng)?;
                attend_arms.push(retarget(
                    ctx,
                    a,
                    " (tensor cores)",
                    Some("tensor cores"),
                    |o| o.kernel = AttendKernel::TensorDecode,
                )?);
            }
            if m == "kivi-4" && t == variant_t && !o.prefill_only {
                match attend_arm(ctx, m, PathChoice::WgslWorkgroup, t, TQ, k, v, &mut rng) {
                    Ok(a) => attend_arms.push(a),
                    Err(e) => println!("  skipping kivi-4 wgsl-workgroup: {e}"),
                }
            }
            // A-vs-A: a second, separately built cache of the same case, timed as its own
            // arm; the difference of the two medians is the noise floor.
            if (m == "kivi-4" && t == variant_t) || (m == "f16" && Some(&t) == tokens.iter().min())
            {
                let mut twin = attend_arm(ctx, m, PathChoice::Wgsl, t, TQ, k, v, &mut rng)?;
                twin.name += AA_SUFFIX;
                if let Work::Attend(a) = &mut twin.work {
                    a.twin = true;
                }
                attend_arms.push(twin);
            }
            // Prefill chunks at every T (quick: the smallest T).
            let prefill = !o.decode_only && (!o.quick || Some(&t) == tokens.iter().min());
            if prefill && t >= TQ_PREFILL {
                // Tier 1: the decode kernel (what Auto runs where the device has no tensor
                // cores).
                let a = attend_arm(ctx, m, PathChoice::Wgsl, t, TQ_PREFILL, k, v, &mut rng)?;
                attend_arms.push(retarget(ctx, a, "", None, |o| {
                    o.kernel = AttendKernel::Decode
                })?);
                // Tier 3: the tensor-core kernel (what Auto runs where the device has it).
                if ctx.tensor_cores().is_ok() {
                    let a = attend_arm(ctx, m, PathChoice::Wgsl, t, TQ_PREFILL, k, v, &mut rng)?;
                    attend_arms.push(retarget(
                        ctx,
                        a,
                        " (tensor cores)",
                        Some("tensor cores"),
                        |o| o.kernel = AttendKernel::Tensor,
                    )?);
                    // With --prefill-only at the variant T (KIVI-4, f16): the same kernel with
                    // its splits at twice the split target (the rule before one wave).
                    if o.prefill_only && t == variant_t && (m == "kivi-4" || m == "f16") {
                        let a =
                            attend_arm(ctx, m, PathChoice::Wgsl, t, TQ_PREFILL, k, v, &mut rng)?;
                        attend_arms.push(two_waves(ctx, a, t, TQ_PREFILL)?);
                    }
                }
                // A/B: the same chunk on the prefill kernel (GEMM form, tiles in workgroup
                // memory).
                // With --prefill-only at every method and T, and (KIVI-4 at the variant T)
                // also at a quarter of its automatic split (four times the workgroups: the
                // kernel's occupancy).
                let variant_case = m == "kivi-4" && t == variant_t;
                if variant_case || o.prefill_only {
                    let call = bench_call(t, TQ_PREFILL, attend_opts());
                    let per_wg = kvpack::attention::plan::prefill_vectors(DIM);
                    let target = kernel_target(ctx, SplitKernel::Prefill);
                    let auto = call.split_tokens(target, per_wg);
                    let quarter = (auto / 4).div_ceil(32).max(1) * 32;
                    let splits: &[(Option<usize>, &str, &'static str)] =
                        if o.prefill_only && variant_case {
                            &[
                                (None, " (prefill kernel)", "prefill kernel"),
                                (
                                    Some(quarter),
                                    " (prefill kernel, 1/4 split)",
                                    "prefill kernel, a quarter of the automatic split",
                                ),
                            ]
                        } else {
                            &[(None, " (prefill kernel)", "prefill kernel")]
                        };
                    for &(chunk, suffix, what) in splits {
                        let a =
                            attend_arm(ctx, m, PathChoice::Wgsl, t, TQ_PREFILL, k, v, &mut rng)?;
                        attend_arms.push(retarget(ctx, a, suffix, Some(what), |o| {
                            o.kernel = AttendKernel::Prefill;
                            if chunk.is_some() {
                                o.chunk_tokens = chunk;
                            }
                        })?);
                    }
                }
            }
            // With --prefill-only: shorter chunks (4, 8 and 16 rows) on every kernel at the
            // variant T, or at every T with --short-every-t (the tensor-core one where the
            // device has it), for where Auto should switch from the decode kernel.
            let short_t = t == variant_t || o.short_every_t;
            if o.prefill_only && short_t && (m == "kivi-4" || m == "f16") {
                let tensor = ctx.tensor_cores().is_ok();
                for tq in [4, 8, 16] {
                    for (kernel, what) in [
                        (AttendKernel::Decode, "decode kernel"),
                        (AttendKernel::Prefill, "prefill kernel"),
                        (AttendKernel::Tensor, "tensor cores"),
                    ] {
                        if kernel == AttendKernel::Tensor && !tensor {
                            continue;
                        }
                        let a = attend_arm(ctx, m, PathChoice::Wgsl, t, tq, k, v, &mut rng)?;
                        let suffix = format!(" ({what})");
                        attend_arms.push(retarget(ctx, a, &suffix, Some(what), |o| {
                            o.kernel = kernel
                        })?);
                        if kernel == AttendKernel::Tensor && tq == 16 {
                            let a = attend_arm(ctx, m, PathChoice::Wgsl, t, tq, k, v, &mut rng)?;
                            attend_arms.push(two_waves(ctx, a, t, tq)?);
                        }
                    }
                }
            }
            // A/B of the split size (decode, kivi-4): twice and half the automatic tokens per
            // split (the work of one workgroup; `chunk_tokens`).
            if m == "kivi-4" && !o.prefill_only {
                let call = bench_call(t, TQ, attend_opts());
                let auto = call.split_tokens(split_target(ctx.adapter_info()), 4);
                for (tokens_per_split, (suffix, what)) in
                    [(auto * 2, LONG), ((auto / 2).div_ceil(32) * 32, SHORT)]
                {
                    let a = attend_arm(ctx, m, PathChoice::Wgsl, t, TQ, k, v, &mut rng)?;
                    attend_arms.push(retarget(ctx, a, suffix, Some(what), |o| {
                        o.chunk_tokens = Some(tokens_per_split.max(32))
                    })?);
                }
            }
            // With --decode-only (KIVI-4, f16): the decode kernel's splits in one wave of the
            // split target (`Call::wave_tokens`: no short last wave), where that differs from
            // the automatic split.
            if o.decode_only && (m == "kivi-4" || m == "f16") {
                let call = bench_call(t, TQ, attend_opts());
                let target = kernel_target(ctx, SplitKernel::Decode);
                let (auto, wave) = (call.split_tokens(target, 4), call.wave_tokens(target, 4));
                if wave != auto {
                    let a = attend_arm(ctx, m, PathChoice::Wgsl, t, TQ, k, v, &mut rng)?;
                    attend_arms.push(retarget(
                        ctx,
                        a,
                        " (one-wave split)",
                        Some("decode kernel, splits in one wave of the split target"),
                        |o| o.chunk_tokens = Some(wave),
                    )?);
                }
            }
        }
    }
    if let Some(only) = &o.only {
        attend_arms.retain(|a| {
            a.name.ends_with(AA_SUFFIX) || only.iter().any(|p| a.name.contains(p.as_str()))
        });
        println!(
            "  --only {}: {} attention arms kept",
            only.join(","),
            attend_arms.len()
        );
    }
    // Append arms: every method, recorded into the bench's encoder.
    let mut append_arms = Vec::new();
    for &t in tokens.iter().filter(|_| !o.decode_only && !o.prefill_only) {
        for m in methods {
            append_arms.push(append_arm(ctx, m, t, k, v)?);
        }
    }
    let flush = if o.flush {
        Some(ReadFlush::new(ctx, 2 * o.l2_bytes)?)
    } else {
        None
    };
    println!(
        "  caches built in {:.1} s; flush: a bench kernel reading {}",
        t0.elapsed().as_secs_f64(),
        flush
            .as_ref()
            .map_or("nothing (--no-flush)".to_string(), |f| fmt_bytes(f.bytes))
    );

    // Copy arms: the big roofline plus one size-matched copy per attention case.
    let mut sizes = vec![big_copy];
    for a in &attend_arms {
        sizes.push(matched_copy_size(a.bytes));
    }
    sizes.sort_unstable();
    sizes.dedup();
    let mut copy_arms = Vec::new();
    for &s in &sizes {
        let check = gpu::check_storage_size(ctx, "copy buffer", s);
        match check.and_then(|_| copy_arm(ctx, s, o.l2_bytes, &mut rng)) {
            Ok(a) => copy_arms.push(a),
            Err(e) => println!("  skipping copy {}: {e}", fmt_bytes(s)),
        }
    }

    println!("\nattention arms (bytes read = cache payload + q; partials ≈ not counted):");
    for arm in &attend_arms {
        let a = arm.attend().expect("attention arm");
        let m = a.layer.memory();
        println!(
            "  {:<34} cache {:>9} (held {:>9}) {} | {} passes, partials ≈ {} written + read",
            arm.name,
            fmt_bytes(a.cache_bytes),
            fmt_bytes(m.held.total()),
            if a.cache_bytes > o.l2_bytes {
                "> L2"
            } else {
                "< L2"
            },
            a.passes,
            fmt_bytes(a.partial_bytes / 2),
        );
    }

    println!(
        "append arms: {G} single-token KvLayer::encode_append steps per round each (KIVI: one \
         flushes a block of {G}); steps that grow a segment are counted apart"
    );

    // Interleave: copy, attention, append, copy, attention, ... (the rest at the end).
    let mut arms: Vec<Arm> = Vec::new();
    let (mut ci, mut ai, mut pi) = (
        copy_arms.into_iter(),
        attend_arms.into_iter(),
        append_arms.into_iter(),
    );
    loop {
        let (c, a, p) = (ci.next(), ai.next(), pi.next());
        if c.is_none() && a.is_none() && p.is_none() {
            break;
        }
        arms.extend(c);
        arms.extend(a);
        arms.extend(p);
    }
    println!(
        "  {} arms; rotation buffers per arm: {}",
        arms.len(),
        arms.iter()
            .map(|a| a.instances().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );

    let stamps = Stamps::new(ctx, arms.len())?;
    let append_stamps = Stamps::new(ctx, G)?;
    let t0 = Instant::now();
    let total = o.warmup + o.rounds;
    let mut spun = 0u32;
    for round in 0..total {
        if let Some(f) = &flush {
            spun = f.spin(ctx, o.spin_ms)?;
        }
        let keep = round >= o.warmup;
        let order: Vec<usize> = (0..arms.len()).map(|i| (i + round) % arms.len()).collect();
        let mut slots = Vec::with_capacity(arms.len());
        for &a in &order {
            if matches!(arms[a].work, Work::Append(_)) {
                time_appends(ctx, &append_stamps, &mut arms[a], k, v, &flush, keep)?;
                continue;
            }
            l2_flush(ctx, &flush)?;
            let kk = round % arms[a].instances();
            time_arm(ctx, &stamps, &arms[a], kk, slots.len() as u32)?;
            slots.push(a);
        }
        let ns = stamps.read(ctx, slots.len())?;
        if keep {
            for (&a, t) in slots.iter().zip(ns) {
                arms[a].times_ns.push(t);
            }
        }
    }
    println!(
        "  timing: {total} rounds in {:.1} s ({spun} flushes before each round)",
        t0.elapsed().as_secs_f64()
    );
    for arm in &mut arms {
        if let Work::Append(a) = &arm.work {
            arm.times_ns = a.steps.iter().map(|s| s.0).collect();
        }
    }

    // Correctness of what was timed.
    let mut bad = 0;
    println!("\nchecks (instance 0 of each arm):");
    for arm in &arms {
        match check_arm(ctx, arm, k, v, cpu_max) {
            Ok(m) => println!("  ok   {:<34} {m}", arm.name),
            Err(m) => {
                bad += 1;
                println!("  FAIL {:<34} {m}", arm.name);
            }
        }
    }
    if bad > 0 && !o.unchecked {
        return Err(kvpack::Error::Config(format!(
            "{bad} arm(s) failed their output check; no numbers printed"
        )));
    }
    if bad > 0 {
        println!(
            "\nUNCHECKED (--unchecked): {bad} arm(s) failed their output check; their times are of wrong results (a measuring knob's floors only)"
        );
    }

    println!(
        "\nper arm, µs over {} rounds (median / min / max):",
        o.rounds
    );
    let rows: Vec<(f64, f64, f64)> = arms.iter().map(|a| stats(&a.times_ns)).collect();
    // Display order: the copies (by size), then the attention arms (by T, as built).
    let display: Vec<usize> = (0..arms.len())
        .filter(|&i| arms[i].is_copy())
        .chain((0..arms.len()).filter(|&i| arms[i].attend().is_some()))
        .collect();
    for (arm, r) in display.iter().map(|&i| (&arms[i], &rows[i])) {
        println!(
            "  {:<34} {:>10.2} {:>10.2} {:>10.2}",
            arm.name,
            r.0 / 1e3,
            r.1 / 1e3,
            r.2 / 1e3
        );
    }
    // Noise floor: A-vs-A pairs (the same case built twice, timed as two arms).
    let named: Vec<(&str, &[f64], f64)> = arms
        .iter()
        .zip(&rows)
        .map(|(a, r)| (a.name.as_str(), a.times_ns.as_slice(), r.0))
        .collect();
    let (noise, aa, floor) = common::aa_floor(&named);
    println!("  (for scale, the spread (max - min) / median of the copy arms:)");
    for (arm, r) in arms.iter().zip(&rows) {
        if arm.is_copy() {
            println!("  {:<34} {:>6.1} %", arm.name, 100.0 * (r.2 - r.1) / r.0);
        }
    }
    let copy_gbs = |size: u64| -> Option<f64> {
        arms.iter()
            .zip(&rows)
            .find_map(|(a, r)| (a.is_copy() && a.bytes == 2 * size).then(|| a.bytes as f64 / r.0))
    };
    let big_gbs = copy_gbs(big_copy);

    // The cache update against attention, per decode step.
    println!(
        "\nappend vs decode attention (µs; per token = mean of every timed step, i.e. flushes and \
         segment growths amortized):"
    );
    println!(
        "  {:<8} {:>5} {:>9} {:>9} {:>9} {:>10} {:>11} {:>13}",
        "method",
        "T",
        "step med",
        "flush med",
        "grow med",
        "per token",
        "attend Tq=1",
        "append share"
    );
    let mut shares = Vec::new();
    let mut append_rows = Vec::new();
    for arm in &arms {
        let Work::Append(a) = &arm.work else { continue };
        let all: Vec<f64> = a.steps.iter().map(|s| s.0).collect();
        let per_token = all.iter().sum::<f64>() / all.len().max(1) as f64;
        let att = arms.iter().zip(&rows).find_map(|(b, rb)| {
            b.attend()
                .filter(|b| {
                    b.method == a.method
                        && b.t == a.t0
                        && b.tq == TQ
                        && !b.twin
                        && b.variant.is_none()
                })
                .map(|_| rb.0)
        });
        let share = att.map(|x| per_token / (per_token + x));
        let med = |kind| {
            let v = a.ns(kind);
            (!v.is_empty()).then(|| stats(&v))
        };
        let show =
            |m: Option<(f64, f64, f64)>| m.map_or("-".into(), |m| format!("{:.2}", m.0 / 1e3));
        println!(
            "  {:<8} {:>5} {:>9} {:>9} {:>9} {:>10.2} {:>11} {:>13}",
            a.method,
            fmt_tokens(a.t0),
            show(med(StepKind::Step)),
            show(med(StepKind::Flush)),
            show(med(StepKind::Grow)),
            per_token / 1e3,
            att.map_or("-".into(), |x| format!("{:.2}", x / 1e3)),
            share.map_or("-".into(), |x| format!("{:.1} %", 100.0 * x))
        );
        let us = |m: Option<(f64, f64, f64)>| m.map(|m| m.0 / 1e3);
        shares.push(serde_json::json!({
            "method": a.method, "T": a.t0, "G": G,
            "step_median_us": us(med(StepKind::Step)),
            "flush_median_us": us(med(StepKind::Flush)),
            "grow_median_us": us(med(StepKind::Grow)),
            "append_per_token_us": per_token / 1e3,
            "attend_decode_median_us": att.map(|x| x / 1e3),
            "append_share_of_step": share,
            "steps_timed": a.ns(StepKind::Step).len(),
            "flushes_timed": a.ns(StepKind::Flush).len(),
            "growths_timed": a.ns(StepKind::Grow).len(),
        }));
        for (kind, name) in [
            (StepKind::Step, "append_step"),
            (StepKind::Flush, "append_flush"),
            (StepKind::Grow, "append_grow"),
        ] {
            let Some((m, mn, mx)) = med(kind) else {
                continue;
            };
            append_rows.push(ArmRow {
                name: format!("{} ({name})", arm.name),
                kind: name.into(),
                method: Some(a.method.into()),
                t: Some(a.t0),
                bytes: arm.bytes,
                median_us: m / 1e3,
                min_us: mn / 1e3,
                max_us: mx / 1e3,
                samples: a.ns(kind).len(),
                samples_ns: a.ns(kind),
                ..Default::default()
            });
        }
    }
    let total_s = started.elapsed().as_secs_f64();
    println!(
        "\ntotal {:.1} s{}{}",
        total_s,
        if o.quick {
            " (quick mode: sizes too small to mean anything)"
        } else {
            ""
        },
        if cpu_adapter {
            format!("; {CPU_ADAPTER_NOTE}")
        } else {
            String::new()
        }
    );

    // The compact table, last.
    println!(
        "\n{:<34} {:>5} {:>10} {:>9} {:>9} {:>9} {:>8} {:>7} {:>7} {:>6}",
        "arm",
        "T",
        "bytes",
        "med µs",
        "min µs",
        "max µs",
        "GB/s",
        "% copy~",
        format!("% {}", fmt_bytes(big_copy).replace(' ', "")),
        "× f16"
    );
    for (arm, r) in display.iter().map(|&i| (&arms[i], &rows[i])) {
        let gbs = arm.bytes as f64 / r.0;
        let pct = |c: Option<f64>| c.map_or("-".into(), |c| format!("{:.0}%", 100.0 * gbs / c));
        let (t, matched, big, speedup) = match arm.attend() {
            None => (
                "-".to_string(),
                "-".to_string(),
                pct(big_gbs),
                "-".to_string(),
            ),
            Some(a) => {
                let f16_med = arms.iter().zip(&rows).find_map(|(b, rb)| {
                    b.attend()
                        .filter(|b| b.method == "f16" && b.t == a.t && b.tq == a.tq && !b.twin)
                        .map(|_| rb.0)
                });
                (
                    fmt_tokens(a.t),
                    pct(copy_gbs(matched_copy_size(arm.bytes))),
                    pct(big_gbs),
                    f16_med.map_or("-".into(), |f| {
                        let x = f / r.0;
                        if 100.0 * (x - 1.0).abs() <= floor {
                            format!("{x:.2} (noise)")
                        } else {
                            format!("{x:.2}")
                        }
                    }),
                )
            }
        };
        println!(
            "{:<34} {:>5} {:>10} {:>9.2} {:>9.2} {:>9.2} {:>8.1} {:>7} {:>7} {:>6}",
            arm.name,
            t,
            fmt_bytes(arm.bytes),
            r.0 / 1e3,
            r.1 / 1e3,
            r.2 / 1e3,
            gbs,
            matched,
            big,
            speedup
        );
    }
    if cpu_adapter {
        println!("({CPU_ADAPTER_NOTE})");
    }

    // JSON and plot.
    let big_name = arms
        .iter()
        .find(|a| a.is_copy() && a.bytes == 2 * big_copy)
        .map(|a| a.name.clone());
    let mut out_rows = Vec::new();
    for (arm, r) in display.iter().map(|&i| (&arms[i], &rows[i])) {
        let gbs = arm.bytes as f64 / r.0;
        let a = arm.attend();
        out_rows.push(ArmRow {
            name: arm.name.clone(),
            kind: if a.is_some() { "attend" } else { "copy" }.into(),
            method: a.map(|a| a.method.to_string()),
            path: a.map(|a| a.path.to_string()),
            twin: a.is_some_and(|a| a.twin),
            variant: a.and_then(|a| a.variant).map(str::to_string),
            t: a.map(|a| a.t),
            tq: a.map(|a| a.tq),
            bytes: arm.bytes,
            median_us: r.0 / 1e3,
            min_us: r.1 / 1e3,
            max_us: r.2 / 1e3,
            samples: arm.times_ns.len(),
            samples_ns: arm.times_ns.clone(),
            roofline: big_name.clone(),
            pct_roofline: big_gbs.map(|c| 100.0 * gbs / c),
        });
    }
    out_rows.extend(append_rows);
    let rep = Report {
        bench: "gpu_attend",
        adapter,
        device_type,
        cpu_adapter,
        quick: o.quick,
        rounds: o.rounds,
        warmup: o.warmup,
        l2_bytes: o.l2_bytes,
        arms: out_rows,
        noise_floor: noise,
        extra: serde_json::json!({
            "append_vs_attend": shares,
            "l2_flush": o.flush,
            "spin_ms": if o.flush { o.spin_ms } else { 0.0 },
            "spin_flushes": spun,
            "noise_floor_pct": floor,
            "aa_pairs": aa,
            "roofline_copy_bytes": big_copy,
        }),
        total_s,
    };
    if let Some(p) = &o.json {
        rep.write_json(p).map_err(kvpack::Error::Config)?;
        println!("wrote {}", p.display());
    }
    if let Some(p) = &o.plot {
        draw(p, &rep.arms, big_copy, &rep.adapter, cpu_adapter).map_err(kvpack::Error::Config)?;
        println!("wrote {}", p.display());
    }
    Ok(())
}

/// The figure of a run's attention arms (`--plot`, or `--replot` from its JSON).
fn draw(
    png: &Path,
    rows: &[ArmRow],
    big_copy: u64,
    adapter: &str,
    cpu_adapter: bool,
) -> Result<(), String> {
    report::plot(
        png,
        &format!(
            "gpu_attend: Hq={HQ}, Hkv={HKV}, D={DIM}, roofline = {} copy; {adapter}",
            fmt_bytes(big_copy)
        ),
        "T (context tokens)",
        &report::attend_series(rows),
        cpu_adapter.then_some(CPU_ADAPTER_NOTE),
    )
}

/// `--replot JSON PNG`: the figure drawn again from a run's JSON (no GPU needed), e.g. after a
/// change to the figure's drawing.
fn replot(json: &Path, png: &Path) -> Result<(), String> {
    let (v, rows) = report::read_rows(json)?;
    let big_copy = v["summary"]["roofline_copy_bytes"]
        .as_u64()
        .ok_or_else(|| format!("{}: no summary.roofline_copy_bytes", json.display()))?;
    let adapter = v["adapter"].as_str().unwrap_or("unknown adapter");
    let cpu_adapter = v["device_type"].as_str() == Some("Cpu");
    draw(png, &rows, big_copy, adapter, cpu_adapter)
}

/// One prefill of `t` tokens into a layer of `method` whose appends are then timed.
fn append_arm(
    ctx: &Context,
    method: &'static str,
    t: usize,
    k: &[f16],
    v: &[f16],
) -> kvpack::Result<Arm> {
    let layer = build_layer(ctx, method, PathChoice::Wgsl, t, k, v)?;
    Ok(Arm {
        name: format!("append {method} T={}", fmt_tokens(t)),
        // One token's K and V rows (f16) enter the cache per step.
        bytes: (2 * HKV * DIM * 2) as u64,
        work: Work::Append(Box::new(AppendArm {
            method,
            t0: t,
            layer,
            appended: 0,
            steps: Vec::new(),
        })),
        times_ns: Vec::new(),
    })
}

/// The bench-owned L2 flush (none with `--no-flush`).
type Flush = Option<ReadFlush>;

/// The L2 flush before a timed call (none with `--no-flush`).
fn l2_flush(ctx: &Context, flush: &Flush) -> kvpack::Result<()> {
    match flush {
        Some(f) => f.run(ctx),
        None => Ok(()),
    }
}

/// Host row `i` of the appended stream: the token after the prefill's last, wrapping over the
/// host K/V.
fn append_row(x: &[f16], t0: usize, i: usize) -> &[f16] {
    let row = HKV * DIM;
    let idx = (t0 + i) % (x.len() / row);
    &x[idx * row..(idx + 1) * row]
}

/// G single-token appends, each recorded alone between timestamps (`KvLayer::encode_append`)
/// and submitted alone (after an L2 flush); each step is classified by what it did.
fn time_appends(
    ctx: &Context,
    stamps: &Stamps,
    arm: &mut Arm,
    k: &[f16],
    v: &[f16],
    flush: &Flush,
    keep: bool,
) -> kvpack::Result<()> {
    let Work::Append(a) = &mut arm.work else {
        return Ok(());
    };
    let mut kinds = Vec::with_capacity(G);
    for s in 0..G {
        l2_flush(ctx, flush)?;
        let (kr, vr) = (
            append_row(k, a.t0, a.appended),
            append_row(v, a.t0, a.appended),
        );
        let (q0, held0) = (a.quantized_len(), a.layer.memory().held.total());
        let layer = &mut a.layer;
        stamps.time(ctx, s as u32, |enc| {
            layer.encode_append(enc, Input::F16(kr), Input::F16(vr))
        })?;
        a.appended += 1;
        kinds.push(if a.layer.memory().held.total() != held0 {
            StepKind::Grow
        } else if a.method != "f16" && a.quantized_len() != q0 {
            // (the f16 codec stores every token as it comes: no flush)
            StepKind::Flush
        } else {
            StepKind::Step
        });
    }
    let ns = stamps.read(ctx, G)?;
    if keep {
        a.steps.extend(ns.into_iter().zip(kinds));
    }
    Ok(())
}

/// After the timed appends: the token counts, and for T ≤ `cpu_max` the layer against a CPU
/// layer built from the same tokens: KIVI reconstructions (codes may differ by one step at
/// half-integers: at most 1e-3 of the values may differ), f16 attention (≤ 1e-4 per row).
fn check_append(a: &AppendArm, k: &[f16], v: &[f16], cpu_max: usize) -> Result<String, String> {
    let e = |e: kvpack::Error| e.to_string();
    let t = a.t0 + a.appended;
    let method = Method::parse(a.method).map_err(e)?;
    let kivi = !method.is_f16();
    let expect_q = kvpack::store::quantized_len(t, method.residual(), method.key().block_tokens());
    if a.layer.len() != t || a.quantized_len() != expect_q {
        return Err(format!(
            "holds {} tokens ({} quantized) after {t} were appended",
            a.layer.len(),
            a.quantized_len(),
        ));
    }
    let count = |kind| a.steps.iter().filter(|s| s.1 == kind).count();
    let (steps, flushes, grows) = (
        count(StepKind::Step),
        count(StepKind::Flush),
        count(StepKind::Grow),
    );
    if steps == 0 || (kivi && flushes + grows == 0) {
        return Err("no plain step, or no KIVI flush, was timed".into());
    }
    let mut msg = format!(
        "{t} tokens, {} quantized; {steps} steps + {flushes} flushes + {grows} growths timed",
        a.quantized_len()
    );
    if a.t0 > cpu_max {
        msg += &format!(", not compared with the CPU (T > {})", fmt_tokens(cpu_max));
        return Ok(msg);
    }
    let row = HKV * DIM;
    let (mut kh, mut vh) = (k[..a.t0 * row].to_vec(), v[..a.t0 * row].to_vec());
    for i in 0..a.appended {
        kh.extend_from_slice(append_row(k, a.t0, i));
        vh.extend_from_slice(append_row(v, a.t0, i));
    }
    let cpu = Context::cpu();
    let mut reference = Method::parse(a.method)
        .and_then(|m| m.layer(&cpu, HKV, DIM, PathChoice::Cpu))
        .map_err(e)?;
    reference
        .append(Input::F16(&kh), Input::F16(&vh))
        .map_err(e)?;
    if !kivi {
        let mut rng = Rng(7);
        let q = rng.normals(2 * HQ * DIM);
        let opts = attend_opts();
        let got = a.layer.attend(&q, HQ, &opts).map_err(e)?;
        let want = reference.attend(&q, HQ, &opts).map_err(e)?;
        let err = rel_l2_rows(&got, &want, DIM);
        msg +=
            &format!(", attention vs a CPU layer of the same tokens: worst row rel L2 {err:.1e}");
        return if err.is_nan() || err > 1e-4 {
            Err(msg)
        } else {
            Ok(msg)
        };
    }
    let (gk, gv) = a.layer.reconstruct().map_err(e)?;
    let (ck, cv) = reference.reconstruct().map_err(e)?;
    let differ = gk
        .iter()
        .chain(&gv)
        .zip(ck.iter().chain(&cv))
        .filter(|(x, y)| (*x - *y).abs() > 1e-6 + 1e-3 * y.abs())
        .count();
    let n = gk.len() + gv.len();
    msg += &format!(", vs a CPU layer of the same tokens: {differ}/{n} values differ");
    if differ as f64 > 1e-3 * n as f64 || gk.len() != ck.len() {
        Err(msg)
    } else {
        Ok(msg)
    }
}
