//! GPU benchmark of decode attention (Tq = 1) on the f16 cache and on KIVI caches, against the
//! device's copy roofline, timed with timestamp queries. See `benches/README.md`.
//!
//! ```text
//! cargo bench --bench gpu_attend                 # full sizes (a real GPU)
//! cargo bench --bench gpu_attend -- --quick      # small sizes (proves the code path, e.g. lavapipe)
//! options: --rounds N  --warmup N  --l2-mib N  --no-flush  --tokens T1,T2,...  --chunk N (tokens per
//! flash-decoding chunk, a multiple of 32; default automatic)
//! ```
//!
//! Arms, all interleaved within every round (each call submitted alone and waited for; the
//! starting arm rotates with the round):
//! - `copy S`: vec4<u32> copy of S bytes (`registry::COPY`); bytes moved = 2·S. One of 1 GiB,
//!   and one per attention case with 2·S ≈ the bytes that case reads.
//! - `f16` / `kivi-4` / `kivi-2` at T tokens: one whole `KvLayer::encode_attend` call (every
//!   partial pass and the merge) with Hq = 32, Hkv = 8, D = 128, on a cache built by one
//!   prefill of T random f16 tokens; bytes read = the cache payload + q.
//!
//! Timing: one encoder holds an empty compute pass writing the begin timestamp, the work, and
//! an empty compute pass writing the end timestamp (wgpu-core records `begin_compute_pass` /
//! `end_compute_pass`, and so the timestamp writes, for a pass without dispatches; on Vulkan
//! both are `vkCmdWriteTimestamp(BOTTOM_OF_PIPE)`, the end one after all earlier commands).
//! wgpu's zero-initialisation of fresh buffers (the per-call partials) is recorded into a
//! command buffer pushed *in front of* the submission, so it is outside the timed span.
//! Before each timed call, unless `--no-flush`, a separate submission runs an attention call
//! over an f16 cache of 2× the assumed L2 (read-mostly traffic), so every timed call starts
//! with an L2 full of someone else's clean lines.

use std::time::Instant;

use half::f16;
use kvpack::attention::gpu::{AttendPaths, Call};
use kvpack::context::{Context, KernelPath, PathChoice};
use kvpack::gpu::{self, DispatchPlan, registry};
use kvpack::{AttendOptions, Input, KvLayer, Method};

mod common;

use common::{MIB, Rng, fill_from, fmt_bytes, rotation, stats};
const HQ: usize = 32;
const HKV: usize = 8;
const DIM: usize = 128;
const TQ: usize = 1;
/// Distinct query (and output) buffers each attention arm rotates through.
const Q_ROTATION: usize = 4;

struct Opts {
    quick: bool,
    rounds: usize,
    warmup: usize,
    l2_bytes: u64,
    flush: bool,
    /// `--chunk N`: tokens per flash-decoding chunk.
    chunk: Option<usize>,
    /// `--tokens 1024,4096`: overrides the T list.
    tokens: Option<Vec<usize>>,
}

static CHUNK: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();

/// The options every timed and checked call uses (`--chunk` sets the chunk size).
fn attend_opts() -> AttendOptions {
    AttendOptions {
        chunk_tokens: CHUNK.get().copied().flatten(),
        ..Default::default()
    }
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
        tokens: None,
        chunk: None,
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
    if t >= 1024 && t % 1024 == 0 {
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
    /// One decode attention call on `layer`, rotating through `qs` / `outs`.
    Attend(Box<AttendArm>),
}

struct AttendArm {
    method: &'static str,
    t: usize,
    layer: Box<dyn KvLayer>,
    q_host: Vec<Vec<f32>>,
    qs: Vec<wgpu::Buffer>,
    outs: Vec<wgpu::Buffer>,
    cache_bytes: u64,
    /// Partials written by the partial passes and read by the merge (≈, not counted).
    partial_bytes: u64,
    passes: usize,
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
        }
    }
    fn attend(&self) -> Option<&AttendArm> {
        match &self.work {
            Work::Attend(a) => Some(a),
            Work::Copy { .. } => None,
        }
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

/// The chunk traffic of one call (partials written and read back), as `attention::gpu`
/// plans it for an unsegmented cache: one region (f16) or quantized + residual (KIVI).
fn partials_estimate(method: &Method, t: usize) -> (u64, usize) {
    let call = Call {
        tq: TQ,
        hq: HQ,
        hkv: HKV,
        dim: DIM,
        tokens: t,
        opts: attend_opts(),
    };
    let chunk = call.chunk_tokens();
    let regions: Vec<usize> = match method {
        Method::F16 => vec![t],
        Method::Kivi(cfg) => {
            let q = t.saturating_sub(cfg.residual) / cfg.key_group * cfg.key_group;
            vec![q, t - q]
        }
    };
    let nc: usize = regions.iter().map(|r| r.div_ceil(chunk)).sum();
    let passes = regions.iter().filter(|&&r| r > 0).count() + 1;
    ((2 * TQ * HQ * nc * (DIM + 2) * 4) as u64, passes)
}

fn attend_arm(
    ctx: &Context,
    method: &'static str,
    choice: PathChoice,
    t: usize,
    k: &[f16],
    v: &[f16],
    rng: &mut Rng,
) -> kvpack::Result<Arm> {
    let layer = build_layer(ctx, method, choice, t, k, v)?;
    let q_elems = TQ * HQ * DIM;
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
    let (partial_bytes, passes) = partials_estimate(&Method::parse(method)?, t);
    let paths = AttendPaths::resolve(ctx, choice)?;
    let path = if method == "f16" {
        paths.f16
    } else {
        paths.kivi
    };
    Ok(Arm {
        name: format!("{method} T={} [{path}]", fmt_tokens(t)),
        bytes: cache_bytes + (q_elems * 4) as u64,
        work: Work::Attend(Box::new(AttendArm {
            method,
            t,
            layer,
            q_host,
            qs,
            outs,
            cache_bytes,
            partial_bytes,
            passes,
        })),
        times_ns: Vec::new(),
    })
}

/// An empty compute pass that writes one timestamp (at its beginning or its end).
fn stamp(enc: &mut wgpu::CommandEncoder, set: &wgpu::QuerySet, index: u32, begin: bool) {
    let _pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: Some("bench timestamp"),
        timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
            query_set: set,
            beginning_of_pass_write_index: begin.then_some(index),
            end_of_pass_write_index: (!begin).then_some(index),
        }),
    });
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
            .encode_attend(enc, &a.qs[k], TQ, HQ, &attend_opts(), &a.outs[k]),
    }
}

/// Timestamp queries for one round: a (begin, end) pair per arm.
struct Stamps {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    period_ns: f64,
    pairs: u32,
}

impl Stamps {
    fn new(ctx: &Context, pairs: usize) -> kvpack::Result<Self> {
        let period_ns = kvpack::gpu::timing::timestamp_period_ns(ctx)?;
        let device = ctx.device().expect("checked in main");
        let pairs = pairs as u32;
        let set = device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("bench attend timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: 2 * pairs,
        });
        let resolve = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("bench attend timestamps resolve"),
            size: u64::from(2 * pairs) * u64::from(wgpu::QUERY_SIZE),
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        Ok(Self {
            set,
            resolve,
            period_ns,
            pairs,
        })
    }

    /// Submits instance `k` of `arm` alone between timestamps `2·slot` and `2·slot + 1` and
    /// waits for it.
    fn time(&self, ctx: &Context, arm: &Arm, k: usize, slot: u32) -> kvpack::Result<()> {
        gpu::submit_blocking(ctx, "bench timed call", |enc| {
            stamp(enc, &self.set, 2 * slot, true);
            encode_work(ctx, enc, arm, k)?;
            stamp(enc, &self.set, 2 * slot + 1, false);
            Ok(())
        })
    }

    /// ns of every (begin, end) pair.
    fn read(&self, ctx: &Context) -> kvpack::Result<Vec<f64>> {
        let queries = 2 * self.pairs;
        gpu::submit_blocking(ctx, "bench resolve", |enc| {
            enc.resolve_query_set(&self.set, 0..queries, &self.resolve, 0);
            Ok(())
        })?;
        let bytes = gpu::readback(
            ctx,
            &self.resolve,
            u64::from(queries) * u64::from(wgpu::QUERY_SIZE),
        )?;
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&bytes);
        ticks
            .chunks_exact(2)
            .enumerate()
            .map(|(i, t)| {
                if t[1] < t[0] {
                    return Err(kvpack::Error::Config(format!(
                        "timestamps of slot {i} went backwards ({} then {})",
                        t[0], t[1]
                    )));
                }
                Ok((t[1] - t[0]) as f64 * self.period_ns)
            })
            .collect()
    }
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
    };
    let opts = attend_opts();
    let n = TQ * HQ * DIM;
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
        let reference = match a.layer.as_any().downcast_ref::<kvpack::KiviLayer>() {
            Some(kivi) => {
                let raw = kivi.raw().map_err(e)?;
                let view = kvpack::kivi::view::KiviView::of_raw(kivi.layout(), kivi.len(), &raw);
                kvpack::cpu::attend::attend(&view, &a.q_host[0], HQ, &opts)
            }
            None => {
                let cpu = Context::cpu();
                let layer = build_layer(&cpu, a.method, PathChoice::Cpu, a.t, k, v).map_err(e)?;
                layer.attend(&a.q_host[0], HQ, &opts).map_err(e)?
            }
        };
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
    let desc = ctx.describe();
    let adapter = desc.gpu.as_ref().map_or("?".into(), |g| {
        format!("{} ({}, {})", g.adapter, g.backend, g.device_type)
    });
    println!("gpu_attend: {adapter}");
    println!(
        "  mode {}, {} warm-up + {} timed rounds, assumed L2 {}, L2 flush before each call: {}",
        if o.quick { "quick" } else { "full" },
        o.warmup,
        o.rounds,
        fmt_bytes(o.l2_bytes),
        if o.flush { "yes" } else { "no" }
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

    // Host K/V of the largest T; every case takes a prefix. The flush cache needs 2·L2 bytes.
    let flush_t = if o.flush {
        (2 * o.l2_bytes).div_ceil((2 * HKV * DIM * 2) as u64) as usize
    } else {
        0
    };
    let t_max = tokens.iter().copied().max().unwrap_or(0).max(flush_t);
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
            attend_arms.push(attend_arm(ctx, m, PathChoice::Wgsl, t, k, v, &mut rng)?);
            if m == "kivi-4" && t == variant_t {
                match attend_arm(ctx, m, PathChoice::WgslWorkgroup, t, k, v, &mut rng) {
                    Ok(a) => attend_arms.push(a),
                    Err(e) => println!("  skipping kivi-4 wgsl-workgroup: {e}"),
                }
            }
        }
    }
    let flush_layer = if o.flush {
        let layer = build_layer(ctx, "f16", PathChoice::Wgsl, flush_t, k, v)?;
        let q = gpu::upload(
            ctx,
            "bench flush q",
            bytemuck::cast_slice(&rng.normals(TQ * HQ * DIM)),
        )?;
        let out = gpu::storage_buffer(ctx, "bench flush out", (TQ * HQ * DIM * 4) as u64)?;
        Some((layer, q, out))
    } else {
        None
    };
    println!(
        "  caches built in {:.1} s; flush: f16 attention over {} tokens ({})",
        t0.elapsed().as_secs_f64(),
        flush_t,
        fmt_bytes((flush_t * HKV * DIM * 4) as u64)
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

    // Interleave: copy, attention, copy, attention, ... (the rest at the end).
    let mut arms: Vec<Arm> = Vec::new();
    let (mut ci, mut ai) = (copy_arms.into_iter(), attend_arms.into_iter());
    loop {
        let (c, a) = (ci.next(), ai.next());
        if c.is_none() && a.is_none() {
            break;
        }
        arms.extend(c);
        arms.extend(a);
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
    let t0 = Instant::now();
    let total = o.warmup + o.rounds;
    for round in 0..total {
        let order: Vec<usize> = (0..arms.len()).map(|i| (i + round) % arms.len()).collect();
        for (slot, &a) in order.iter().enumerate() {
            if let Some((layer, q, out)) = &flush_layer {
                gpu::submit_blocking(ctx, "bench L2 flush", |enc| {
                    layer.encode_attend(enc, q, TQ, HQ, &attend_opts(), out)
                })?;
            }
            let k = round % arms[a].instances();
            stamps.time(ctx, &arms[a], k, slot as u32)?;
        }
        let ns = stamps.read(ctx)?;
        if round >= o.warmup {
            for (&a, t) in order.iter().zip(ns) {
                arms[a].times_ns.push(t);
            }
        }
    }
    println!(
        "  timing: {total} rounds in {:.1} s",
        t0.elapsed().as_secs_f64()
    );

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

    println!(
        "\nper arm, µs over {} rounds (median / min / max):",
        o.rounds
    );
    let rows: Vec<(f64, f64, f64)> = arms.iter().map(|a| stats(&a.times_ns)).collect();
    // Display order: the copies (by size), then the attention arms (by T, as built).
    let display: Vec<usize> = (0..arms.len())
        .filter(|&i| arms[i].attend().is_none())
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
    println!("\nnoise floor (copy arms, (max - min) / median):");
    for (arm, r) in arms.iter().zip(&rows) {
        if arm.attend().is_none() {
            println!("  {:<34} {:>6.1} %", arm.name, 100.0 * (r.2 - r.1) / r.0);
        }
    }
    let copy_gbs = |size: u64| -> Option<f64> {
        arms.iter().zip(&rows).find_map(|(a, r)| {
            (a.attend().is_none() && a.bytes == 2 * size).then(|| a.bytes as f64 / r.0)
        })
    };
    let big_gbs = copy_gbs(big_copy);
    if !o.quick {
        println!(
            "\nH200 references (docs/GPU.md, µs per call at 4k / 32k / 128k): PyTorch SDPA fp16 \
             31.7 / 54.8 / 144.1; llama.cpp Vulkan FA f16 17.5 / 97.7 / 348.4, q4_0 17.8 / \
             104.8 / 359.5; kvpack goal kivi-4 at 32k < 20"
        );
    }
    println!(
        "\ntotal {:.1} s{}",
        started.elapsed().as_secs_f64(),
        if o.quick {
            " (quick mode: sizes too small to mean anything)"
        } else {
            ""
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
                        .filter(|b| b.method == "f16" && b.t == a.t)
                        .map(|_| rb.0)
                });
                (
                    fmt_tokens(a.t),
                    pct(copy_gbs(matched_copy_size(arm.bytes))),
                    pct(big_gbs),
                    f16_med.map_or("-".into(), |f| format!("{:.2}", f / r.0)),
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
    if bad > 0 {
        return Err(kvpack::Error::Config(format!(
            "{bad} arm(s) failed their output check"
        )));
    }
    Ok(())
}
