//! GPU benchmark of KIVI quantization (fused, and an unfused array-library baseline) and of bit
//! packing against the device's copy roofline, timed with timestamp queries
//! (`src/gpu/timing.rs`). See `benches/README.md`.
//!
//! ```text
//! cargo bench --bench gpu_kivi                 # full sizes (a real GPU)
//! cargo bench --bench gpu_kivi -- --quick      # small sizes (proves the code path, e.g. lavapipe)
//! options: --rounds N  --warmup N  --l2-mib N  --no-flush  --json PATH  --plot PATH  --replot JSON PNG (no GPU: the figure drawn again from a run's JSON)
//! ```
//!
//! Arms, all interleaved within every round (each arm submitted alone and waited for, so no
//! two timed arms overlap; the starting arm rotates with the round):
//! - `copy S`: vec4<u32> copy of S bytes; bytes moved = 2·S (read + written).
//! - `keys` / `values`: `kivi_quant_keys` / `kivi_quant_values` of a prefill of T tokens read
//!   from `incoming` (t_old = 0); bytes moved = f16 input + codes + params written.
//! - `keys unfused` / `values unfused`: the same quantization as 8 passes (min, max, scale,
//!   subtract, divide, round+clamp to u8 codes, bitpack, params to f16; `wgsl/kivi/kivi_unfused.wgsl`
//!   and the bitpack kernel), timed as one span (empty timestamped passes around the first and
//!   last); bytes counted as for the fused arm (the useful traffic), so GB/s compares directly.
//! - A-vs-A: the 2-bit key arm at the largest T timed twice (` (A')`); the difference of the
//!   two medians and its bootstrap 95th percentile are the noise floor.
//! - `bitpack` / `bitunpack` b: `bitpack::plan_pack` / `plan_unpack` of n codes whose packed
//!   stream is ~64 MiB; bytes moved = codes (one byte each) + stream.
//!
//! Every arm rotates through at least 4 distinct input (and output) buffers whose total exceeds
//! twice the assumed L2, so no measured dispatch finds its input in cache; before each timed
//! dispatch (unless `--no-flush`) a separate submission copies 2× the assumed L2, so the L2
//! holds other data and the GPU is busy right before the timed work. Outputs are checked
//! once (copy: dst == src; KIVI: against the CPU reference; unfused: codes against the fused
//! arm's within ±1; bitpack: against the CPU packer) before any number is printed.

use std::path::{Path, PathBuf};
use std::time::Instant;

use half::f16;
use kvpack::codecs::kivi::plans::{plan_quant_keys, plan_quant_values};
use kvpack::codecs::kivi::{KiviConfig, Layout};
use kvpack::context::{Context, KernelPath, PathChoice};
use kvpack::cpu::kivi::kivi_quant_keys::kivi_quant_keys as cpu_quant_keys;
use kvpack::cpu::kivi::kivi_quant_values::kivi_quant_values as cpu_quant_values;
use kvpack::gpu::registry::{self, Binding, KernelDef};
use kvpack::gpu::timing::encode_plan_timed;
use kvpack::gpu::{self, DispatchPlan};

mod common;

use common::report::{self, ArmRow, CPU_ADAPTER_NOTE, Report, Stamps};
use common::{AA_SUFFIX, MIB, Rng, fill_from, fmt_bytes, rotation, stats, storage};
const HEADS: usize = 8;
const DIM: usize = 128;
const GROUP: usize = 32;

/// The unfused baseline's elementwise/reduction passes (a measuring tool, not in `KERNELS`).
static KIVI_UNFUSED: KernelDef = KernelDef {
    folder: "kivi",
    name: "kivi_unfused",
    wgsl_common: &[include_str!("../wgsl/common/dispatch.wgsl")],
    wgsl_subgroup: None,
    wgsl: include_str!("../wgsl/kivi/kivi_unfused.wgsl"),
    msl_common: &[],
    msl: None,
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageRead,
        Binding::StorageReadWrite,
    ],
    workgroup_size: 256,
};

struct Opts {
    quick: bool,
    rounds: usize,
    warmup: usize,
    l2_bytes: u64,
    /// An L2 flush (a 2×L2 copy) before every timed dispatch.
    flush: bool,
    json: Option<PathBuf>,
    plot: Option<PathBuf>,
}

fn parse_args() -> Result<Opts, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let mut o = Opts {
        quick,
        rounds: if quick { 3 } else { 50 },
        warmup: if quick { 1 } else { 5 },
        // H200: 60 MB of L2; 64 MiB errs on the safe side.
        l2_bytes: if quick { MIB } else { 64 * MIB },
        flush: true,
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
            "--warmup" => o.warmup = num("--warmup")? as usize,
            "--l2-mib" => o.l2_bytes = num("--l2-mib")?.max(1) * MIB,
            "--no-flush" => o.flush = false,
            "--json" => o.json = Some(it.next().ok_or("--json needs a path")?.into()),
            "--plot" => o.plot = Some(it.next().ok_or("--plot needs a path")?.into()),
            other => eprintln!("gpu_kivi: ignoring argument `{other}`"),
        }
    }
    Ok(o)
}

fn main() {
    if report::replotted("gpu_kivi", replot) {
        return;
    }
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("gpu_kivi: {e}");
            std::process::exit(2);
        }
    };
    let ctx = match Context::headless() {
        Ok(c) => c,
        Err(e) => {
            println!("gpu_kivi: skipped: no headless context: {e}");
            return;
        }
    };
    if ctx.device().is_none() {
        println!("gpu_kivi: skipped: no GPU adapter\n{}", ctx.describe());
        return;
    }
    if let Err(e) = kvpack::gpu::timing::timestamp_period_ns(&ctx) {
        println!("gpu_kivi: skipped: {e}");
        return;
    }
    if let Err(e) = run(&ctx, &opts) {
        eprintln!("gpu_kivi: error: {e}");
        std::process::exit(1);
    }
}

/// One dispatch of an arm: bindings 1.. are the instance's buffers at `binds`.
struct Pass {
    path: KernelPath,
    plan: DispatchPlan,
    binds: Vec<usize>,
}

/// What an arm's output is checked against.
#[derive(Clone, Copy, PartialEq)]
enum Check {
    Copy,
    /// Fused KIVI against the CPU reference (instance buffers: ring, input, codes, params, status).
    Kivi {
        keys: bool,
    },
    /// The unfused baseline against the fused key arm `fused` (codes within ±1).
    Unfused {
        fused: usize,
    },
    /// Bit packing of pool `pool` (instance buffers: codes, words).
    Pack {
        pool: usize,
        unpack: bool,
    },
}

/// One measured arm: its passes, and the storage buffers of each rotation instance.
struct Arm {
    name: String,
    kind: &'static str,
    bits: u32,
    t: Option<usize>,
    passes: Vec<Pass>,
    /// Bytes read + written (for the unfused arm: the fused arm's, the useful traffic).
    bytes: u64,
    /// Bytes every pass actually reads and writes (differs from `bytes` for the unfused arm).
    traffic: u64,
    /// Input bytes (which T's pool, for KIVI checks).
    input_bytes: u64,
    instances: Vec<Vec<wgpu::Buffer>>,
    cursor: Cursor,
    check: Check,
    times_ns: Vec<f64>,
}

impl Arm {
    /// What distinguishes arms of one kind: the kernel variant.
    fn variant(&self) -> &'static str {
        match (self.kind, self.passes.len()) {
            (_, 8) => "unfused 8 passes",
            ("values", _) if self.name.contains("G=128") => "G=128",
            ("keys" | "values", _) => "fused",
            _ => "",
        }
    }
}

/// How an arm picks its rotation instance: its own round counter, or a counter shared by every
/// arm reading the same input pool (so consecutive arms never read the same input).
#[derive(Clone, Copy)]
enum Cursor {
    Own,
    Shared(usize),
}

fn single(path: KernelPath, plan: DispatchPlan, n: usize) -> Vec<Pass> {
    vec![Pass {
        path,
        plan,
        binds: (0..n).collect(),
    }]
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
        let src = storage(ctx, "bench copy src", size)?;
        let dst = storage(ctx, "bench copy dst", size)?;
        fill_from(ctx, &seed, &src)?;
        instances.push(vec![src, dst]);
    }
    Ok(Arm {
        name: format!("copy {}", fmt_bytes(size)),
        kind: "copy",
        bits: 0,
        t: None,
        passes: single(KernelPath::WgslWorkgroup, plan, 2),
        bytes: 2 * size,
        traffic: 2 * size,
        input_bytes: size,
        instances,
        cursor: Cursor::Own,
        check: Check::Copy,
        times_ns: Vec::new(),
    })
}

/// The input pool of one T: f16 rows `[T][H·D]` (as u32 words), rotated by every KIVI arm.
struct InputPool {
    buffers: Vec<wgpu::Buffer>,
    /// The host data (for the CPU reference check).
    host: Vec<f16>,
}

#[derive(Clone, Copy, PartialEq)]
enum Which {
    Keys,
    Values,
}

fn layout(bits: u32, vgroup: usize) -> kvpack::Result<Layout> {
    let cfg = KiviConfig::uniform(bits, GROUP, 128).value_group(vgroup);
    Layout::new(HEADS, DIM, &cfg)
}

#[allow(clippy::too_many_arguments)]
fn kivi_arm(
    ctx: &Context,
    which: Which,
    bits: u32,
    vgroup: usize,
    t: usize,
    path: KernelPath,
    pool_id: usize,
    pool: &InputPool,
) -> kvpack::Result<Arm> {
    let l = layout(bits, vgroup)?;
    let (plan, codes_bytes, params_bytes, name) = match which {
        Which::Keys => {
            let blocks = t / l.key_group;
            (
                plan_quant_keys(&l, blocks, 0, 0, 0),
                (blocks * l.key_block_words() * 4) as u64,
                (blocks * l.key_block_param_words() * 4) as u64,
                "keys",
            )
        }
        Which::Values => (
            plan_quant_values(&l, t, 0, 0, 0),
            (t * l.value_token_words() * 4) as u64,
            (t * l.value_token_param_words() * 4) as u64,
            "values",
        ),
    };
    let name = match which {
        Which::Keys => format!("{name} G={GROUP}"),
        Which::Values => format!(
            "{name} G={vgroup} {}",
            plan.kernel.name.trim_start_matches("kivi_quant_")
        ),
    };
    let input_bytes = (t * l.token_elems() * 2) as u64;
    let ring = storage(ctx, "bench kivi ring (unused: t_old = 0)", 4)?;
    let status = storage(ctx, "bench kivi status", 4)?;
    let mut instances = Vec::new();
    for input in &pool.buffers {
        instances.push(vec![
            ring.clone(),
            input.clone(),
            storage(ctx, "bench kivi codes", codes_bytes)?,
            storage(ctx, "bench kivi params", params_bytes)?,
            status.clone(),
        ]);
    }
    let bytes = input_bytes + codes_bytes + params_bytes;
    Ok(Arm {
        name: format!("{name} {bits}b T={t} [{path}]"),
        kind: if which == Which::Keys {
            "keys"
        } else {
            "values"
        },
        bits,
        t: Some(t),
        passes: single(path, plan, 5),
        bytes,
        traffic: bytes,
        input_bytes,
        instances,
        cursor: Cursor::Shared(pool_id),
        check: Check::Kivi {
            keys: which == Which::Keys,
        },
        times_ns: Vec::new(),
    })
}

/// Uniform of one unfused pass (keep in sync with `UnfusedParams` in the WGSL).
fn unfused_plan(mode: u32, n: usize, bits: u32, which: Which) -> DispatchPlan {
    let levels = (1u32 << bits) - 1;
    let words: [u32; 8] = [
        mode,
        n as u32,
        (HEADS * DIM) as u32,
        GROUP as u32,
        levels,
        (1.0f32 / levels as f32).to_bits(),
        u32::from(which == Which::Values),
        0,
    ];
    DispatchPlan {
        kernel: &KIVI_UNFUSED,
        spec: registry::Specialization::default(),
        uniform: bytemuck::cast_slice(&words).to_vec(),
        workgroups: (n as u64).div_ceil(u64::from(KIVI_UNFUSED.workgroup_size)),
    }
}

/// The unfused baseline of key or value quantization at `bits` over pool `pool_id` (8 passes).
/// Intermediates are one set per arm (an array library's caching allocator reuses its blocks);
/// inputs rotate with the pool, outputs with the instance.
#[allow(clippy::too_many_arguments)]
fn unfused_arm(
    ctx: &Context,
    which: Which,
    bits: u32,
    t: usize,
    path: KernelPath,
    pool_id: usize,
    pool: &InputPool,
    fused: usize,
    fused_bytes: u64,
) -> kvpack::Result<Arm> {
    let l = layout(bits, GROUP)?;
    let hd = HEADS * DIM;
    let elems = t * hd;
    let (groups, codes_bytes, params_bytes) = match which {
        Which::Keys => {
            let blocks = t / GROUP;
            (
                blocks * hd,
                (blocks * l.key_block_words() * 4) as u64,
                (blocks * l.key_block_param_words() * 4) as u64,
            )
        }
        Which::Values => (
            t * hd / GROUP,
            (t * l.value_token_words() * 4) as u64,
            (t * l.value_token_param_words() * 4) as u64,
        ),
    };
    let g4 = (groups * 4) as u64;
    let e4 = (elems * 4) as u64;
    // Buffers: 0 input, 1 lo, 2 hi, 3 scale, 4 y, 5 z, 6 u8 codes, 7 words, 8 params, 9 dummy.
    let lo = storage(ctx, "bench unfused lo", g4)?;
    let hi = storage(ctx, "bench unfused hi", g4)?;
    let scale = storage(ctx, "bench unfused scale", g4)?;
    let y = storage(ctx, "bench unfused x - lo", e4)?;
    let z = storage(ctx, "bench unfused (x - lo) / scale", e4)?;
    let u8codes = storage(ctx, "bench unfused u8 codes", elems as u64)?;
    let dummy = storage(ctx, "bench unfused unused", 4)?;
    let mut instances = Vec::new();
    for input in &pool.buffers {
        instances.push(vec![
            input.clone(),
            lo.clone(),
            hi.clone(),
            scale.clone(),
            y.clone(),
            z.clone(),
            u8codes.clone(),
            storage(ctx, "bench unfused words", codes_bytes)?,
            storage(ctx, "bench unfused params", params_bytes)?,
            dummy.clone(),
        ]);
    }
    let pack_path = ctx.resolve(&kvpack::bitpack::BITPACK, PathChoice::Wgsl)?;
    let p = |mode, n, binds: [usize; 3]| Pass {
        path,
        plan: unfused_plan(mode, n, bits, which),
        binds: binds.to_vec(),
    };
    let passes = vec![
        p(0, groups, [0, 9, 1]),
        p(1, groups, [0, 9, 2]),
        p(2, groups, [1, 2, 3]),
        p(3, elems, [0, 1, 4]),
        p(4, elems, [4, 3, 5]),
        p(5, elems / 4, [5, 9, 6]),
        Pass {
            path: pack_path,
            plan: kvpack::bitpack::plan_pack(elems, bits)?,
            binds: vec![6, 7],
        },
        p(6, groups, [3, 1, 8]),
    ];
    let x = (elems * 2) as u64;
    // Bytes each pass reads + writes.
    let traffic = (x + g4) * 2
        + 3 * g4
        + (x + g4 + e4)
        + (e4 + g4 + e4)
        + (e4 + elems as u64)
        + (elems as u64 + codes_bytes)
        + (2 * g4 + params_bytes);
    let kind = match which {
        Which::Keys => "keys",
        Which::Values => "values",
    };
    Ok(Arm {
        name: format!("{kind} G={GROUP} {bits}b T={t} unfused 8 passes"),
        kind: if which == Which::Keys {
            "keys_unfused"
        } else {
            "values_unfused"
        },
        bits,
        t: Some(t),
        passes,
        bytes: fused_bytes,
        traffic,
        input_bytes: x,
        instances,
        cursor: Cursor::Shared(pool_id),
        check: Check::Unfused { fused },
        times_ns: Vec::new(),
    })
}

/// Host codes of one bit-packing pool (for the checks).
struct PackPool {
    bits: u32,
    n: usize,
    host: Vec<u8>,
}

/// bitpack and bitunpack arms of `bits` over one pool of (codes, words) pairs; the stream is
/// about `stream` bytes.
fn pack_arms(
    ctx: &Context,
    bits: u32,
    stream: u64,
    l2: u64,
    pool_id: usize,
    rng: &mut Rng,
) -> kvpack::Result<(Arm, Arm, PackPool)> {
    let n = ((stream * 8 / u64::from(bits)) / 4 * 4) as usize;
    let pack = kvpack::bitpack::plan_pack(n, bits)?;
    let unpack = kvpack::bitpack::plan_unpack(n, bits)?;
    let params = kvpack::bitpack::BitpackParams::new(n, bits)?;
    let (cb, wb) = (params.code_bytes(), params.word_bytes());
    gpu::check_storage_size(ctx, "bitpack codes", cb)?;
    let seed_len = cb.min(16 * MIB) as usize;
    let mask = ((1u32 << bits) - 1) as u8;
    let seed: Vec<u8> = (0..seed_len).map(|_| rng.next_u32() as u8 & mask).collect();
    let host: Vec<u8> = seed.iter().copied().cycle().take(n).collect();
    let seed_buf = gpu::upload(ctx, "bench bitpack seed", &seed)?;
    let count = rotation(l2, cb + wb);
    let mut instances = Vec::with_capacity(count);
    for _ in 0..count {
        let codes = storage(ctx, "bench bitpack codes", cb)?;
        let words = storage(ctx, "bench bitpack words", wb)?;
        fill_from(ctx, &seed_buf, &codes)?;
        instances.push(vec![codes, words]);
    }
    let path = ctx.resolve(&kvpack::bitpack::BITPACK, PathChoice::Wgsl)?;
    let upath = ctx.resolve(&kvpack::bitpack::BITUNPACK, PathChoice::Wgsl)?;
    // Pack every instance once, so no unpack ever reads a stream that was not written.
    for inst in &instances {
        gpu::submit_blocking(ctx, "bench bitpack init", |enc| {
            gpu::encode_plan(ctx, enc, path, &pack, &[&inst[0], &inst[1]])
        })?;
    }
    let arm = |name: &str, kind, passes| Arm {
        name: format!("{name} b={bits} n={} [{path}]", fmt_count(n)),
        kind,
        bits,
        t: None,
        passes,
        bytes: cb + wb,
        traffic: cb + wb,
        input_bytes: cb,
        instances: instances.clone(),
        cursor: Cursor::Shared(pool_id),
        check: Check::Pack {
            pool: pool_id,
            unpack: kind == "bitunpack",
        },
        times_ns: Vec::new(),
    };
    let a = arm("bitpack", "bitpack", single(path, pack, 2));
    let b = arm(
        "bitunpack",
        "bitunpack",
        vec![Pass {
            path: upath,
            plan: unpack,
            binds: vec![1, 0],
        }],
    );
    Ok((a, b, PackPool { bits, n, host }))
}

/// 1234567 → "1.2M", 699048 → "699k".
fn fmt_count(n: usize) -> String {
    if n >= 1 << 20 {
        format!("{:.1}M", n as f64 / f64::from(1 << 20))
    } else {
        format!("{}k", n >> 10)
    }
}

fn read_u32(ctx: &Context, b: &wgpu::Buffer, bytes: u64) -> kvpack::Result<Vec<u32>> {
    Ok(bytemuck::pod_collect_to_vec(&gpu::readback(ctx, b, bytes)?))
}

/// Max relative difference of the (scale, lo) f16 pairs.
fn param_err(a: &[u32], b: &[u32]) -> f32 {
    let mut err = 0f32;
    for (a, b) in a.iter().zip(b) {
        for s in [0, 16] {
            let (x, y) = (
                f16::from_bits((a >> s) as u16).to_f32(),
                f16::from_bits((b >> s) as u16).to_f32(),
            );
            err = err.max((x - y).abs() / x.abs().max(1e-3));
        }
    }
    err
}

/// Checks one instance's outputs (after the timed rounds, instance 0 run once more).
fn check_arm(
    ctx: &Context,
    arms: &[Arm],
    arm: &Arm,
    host: Option<&[f16]>,
    packs: &[Option<PackPool>],
) -> Result<String, String> {
    let e = |e: kvpack::Error| e.to_string();
    let inst = &arm.instances[0];
    match arm.check {
        Check::Copy => {
            let n = arm.input_bytes.min(64 * MIB);
            let (a, b) = (
                gpu::readback(ctx, &inst[0], n).map_err(e)?,
                gpu::readback(ctx, &inst[1], n).map_err(e)?,
            );
            if a == b {
                Ok(format!("dst == src ({})", fmt_bytes(n)))
            } else {
                Err("copy: dst differs from src".into())
            }
        }
        Check::Pack { pool, unpack } => {
            let p = packs[pool].as_ref().ok_or("no pool")?;
            let params = kvpack::bitpack::BitpackParams::new(p.n, p.bits).map_err(e)?;
            let mut want = vec![0u32; params.n_words as usize];
            kvpack::cpu::bitpack::bitpack(&p.host, p.bits, &mut want).map_err(e)?;
            if unpack {
                let got = gpu::readback(ctx, &inst[0], p.n as u64).map_err(e)?;
                let bad = got.iter().zip(&p.host).filter(|(a, b)| a != b).count();
                return if bad == 0 {
                    Ok(format!("{} codes == CPU input", p.n))
                } else {
                    Err(format!("{bad} of {} codes differ", p.n))
                };
            }
            let got = read_u32(ctx, &inst[1], params.word_bytes()).map_err(e)?;
            let bad = got.iter().zip(&want).filter(|(a, b)| a != b).count();
            if bad == 0 {
                Ok(format!("{} words == CPU bitpack", want.len()))
            } else {
                Err(format!(
                    "{bad} of {} words differ from CPU bitpack",
                    want.len()
                ))
            }
        }
        Check::Unfused { fused } => {
            let f = &arms[fused];
            let b = arm.bits as usize;
            let (fc, fp) = (&f.instances[0][2], &f.instances[0][3]);
            let fcodes = read_u32(ctx, fc, fc.size()).map_err(e)?;
            let fparams = read_u32(ctx, fp, fp.size()).map_err(e)?;
            let ucodes = read_u32(ctx, &inst[7], inst[7].size()).map_err(e)?;
            let uparams = read_u32(ctx, &inst[8], inst[8].size()).map_err(e)?;
            // Both are dense streams of b-bit codes in [block][HD][G] order (G·b is a whole
            // number of words, so group streams concatenate).
            let n = fcodes.len() * 32 / b;
            let code = |w: &[u32], i: usize| -> i32 {
                let bit = i * b;
                let mut v = u64::from(w[bit / 32]) >> (bit % 32);
                if bit % 32 + b > 32 {
                    v |= u64::from(w[bit / 32 + 1]) << (32 - bit % 32);
                }
                (v & ((1 << b) - 1)) as i32
            };
            let (mut off1, mut worse) = (0usize, 0usize);
            for i in 0..n {
                match (code(&fcodes, i) - code(&ucodes, i)).abs() {
                    0 => {}
                    1 => off1 += 1,
                    _ => worse += 1,
                }
            }
            let pe = param_err(&fparams, &uparams);
            let msg = format!(
                "vs fused: {off1}/{n} codes differ by 1, {worse} by more; params rel err {pe:.1e}"
            );
            if worse > 0 || off1 as f64 > 1e-3 * n as f64 || pe > 1e-2 {
                Err(msg)
            } else {
                Ok(msg)
            }
        }
        Check::Kivi { keys } => {
            let host = host.ok_or("no host input")?;
            let t = arm.t.ok_or("no T")?;
            let status = read_u32(ctx, &inst[4], 4).map_err(e)?;
            if status[0] != 0 {
                return Err(format!("status = {:#x} (parameter overflow)", status[0]));
            }
            let plan = &arm.passes[0].plan;
            let p: kvpack::codecs::kivi::plans::KiviParams =
                bytemuck::pod_read_unaligned(&plan.uniform);
            // KiviParams.group is the key group of a key plan and the value group of a value plan.
            let vgroup = if keys { GROUP } else { p.group as usize };
            let l = layout(p.bits, vgroup).map_err(e)?;
            let gpu_codes = read_u32(ctx, &inst[2], inst[2].size()).map_err(e)?;
            let gpu_params = read_u32(ctx, &inst[3], inst[3].size()).map_err(e)?;
            let mut codes = vec![0u32; gpu_codes.len()];
            let mut params = vec![0u32; gpu_params.len()];
            let row = l.token_elems();
            let x = |t: usize, h: usize, d: usize| host[t * row + h * DIM + d].to_f32();
            let r = if keys {
                cpu_quant_keys(&l, t / l.key_group, x, &mut codes, &mut params)
            } else {
                cpu_quant_values(&l, t, x, &mut codes, &mut params)
            };
            r.map_err(|o| format!("CPU reference overflowed: {o:?}"))?;
            let code_diff = codes.iter().zip(&gpu_codes).filter(|(a, b)| a != b).count();
            let pe = param_err(&params, &gpu_params);
            let frac = code_diff as f64 / codes.len() as f64;
            let msg = format!(
                "{code_diff}/{} code words differ, params rel err {pe:.1e}",
                codes.len()
            );
            if frac > 1e-3 || pe > 1e-2 {
                Err(msg)
            } else {
                Ok(msg)
            }
        }
    }
}

/// Records instance `k` of `arm` between the timestamps of `slot`: a single dispatch in its own
/// timestamped pass; several passes between empty timestamped passes.
fn time_arm(ctx: &Context, stamps: &Stamps, arm: &Arm, k: usize, slot: u32) -> kvpack::Result<()> {
    let inst = &arm.instances[k];
    let bound = |p: &Pass| -> Vec<&wgpu::Buffer> { p.binds.iter().map(|&i| &inst[i]).collect() };
    if let [p] = arm.passes.as_slice() {
        return gpu::submit_blocking(ctx, "bench timed dispatch", |enc| {
            encode_plan_timed(
                ctx,
                enc,
                p.path,
                &p.plan,
                &bound(p),
                &stamps.set,
                2 * slot,
                2 * slot + 1,
            )
        });
    }
    stamps.time(ctx, slot, |enc| {
        for p in &arm.passes {
            gpu::encode_plan(ctx, enc, p.path, &p.plan, &bound(p))?;
        }
        Ok(())
    })
}

fn run(ctx: &Context, o: &Opts) -> kvpack::Result<()> {
    let started = Instant::now();
    let (adapter, device_type, cpu_adapter) = report::adapter(ctx);
    println!("gpu_kivi: {adapter}");
    if cpu_adapter {
        println!("  NOTE: {CPU_ADAPTER_NOTE}");
    }
    println!(
        "  mode {}, {} warm-up + {} timed rounds, assumed L2 {} (rotation: total inputs > 2x L2, >= 4 buffers)",
        if o.quick { "quick" } else { "full" },
        o.warmup,
        o.rounds,
        fmt_bytes(o.l2_bytes)
    );
    let (copy_sizes, tokens, stream): (Vec<u64>, Vec<usize>, u64) = if o.quick {
        (vec![MIB, 4 * MIB], vec![256, 1024], 256 * 1024)
    } else {
        (vec![64 * MIB, 1 << 30], vec![4096, 32768], 64 * MIB)
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);

    // Copy arms: the two roofline sizes plus one per T at the KIVI input size.
    let mut sizes = copy_sizes.clone();
    for &t in &tokens {
        sizes.push((t * HEADS * DIM * 2) as u64);
    }
    sizes.sort_unstable();
    sizes.dedup();
    let mut arms: Vec<Arm> = Vec::new();
    for &s in &sizes {
        let check = gpu::check_storage_size(ctx, "copy buffer", s);
        match check.and_then(|_| copy_arm(ctx, s, o.l2_bytes, &mut rng)) {
            Ok(a) => arms.push(a),
            Err(e) => println!("  skipping copy {}: {e}", fmt_bytes(s)),
        }
    }

    // KIVI arms: one input pool per T, shared by keys and values at 2 and 4 bits.
    let keys_path = ctx.resolve(
        &kvpack::codecs::kivi::kernels::KIVI_QUANT_KEYS,
        PathChoice::Wgsl,
    )?;
    let values_thread_path = ctx.resolve(
        &kvpack::codecs::kivi::kernels::KIVI_QUANT_VALUES_THREAD,
        PathChoice::Wgsl,
    )?;
    let unfused_path = ctx.resolve(&KIVI_UNFUSED, PathChoice::Wgsl)?;
    let mut value_paths = Vec::new();
    for choice in [PathChoice::WgslSubgroup, PathChoice::WgslWorkgroup] {
        match ctx.resolve(&kvpack::codecs::kivi::kernels::KIVI_QUANT_VALUES, choice) {
            Ok(p) => value_paths.push(p),
            Err(e) => println!("  skipping kivi_quant_values {choice}: {e}"),
        }
    }
    println!(
        "  kivi_quant_keys and kivi_quant_values_thread (value groups <= 64) have one WGSL source (run as {keys_path}); \
         kivi_quant_values (groups of 65..=256, G=128 here): {}",
        value_paths
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  unfused key baseline ({unfused_path}): min, max, scale, x - lo, / scale (f32 intermediates), \
         round+clamp to u8 (group-major), bitpack, params to f16: 8 dispatches timed as one span"
    );
    let mut pools = Vec::new();
    for (pool_id, &t) in tokens.iter().enumerate() {
        let elems = t * HEADS * DIM;
        let host: Vec<f16> = (0..elems).map(|_| f16::from_f64(rng.normal())).collect();
        let bytes = (elems * 2) as u64;
        let n = rotation(o.l2_bytes, bytes);
        let seed = gpu::upload(ctx, "bench kivi seed", bytemuck::cast_slice(&host))?;
        let mut buffers = Vec::with_capacity(n);
        for _ in 0..n {
            let b = storage(ctx, "bench kivi incoming", bytes)?;
            fill_from(ctx, &seed, &b)?;
            buffers.push(b);
        }
        let pool = InputPool { buffers, host };
        for bits in [2, 4] {
            // Fused keys and values (G = 32), each followed by its unfused baseline.
            for (which, path) in [
                (Which::Keys, keys_path),
                (Which::Values, values_thread_path),
            ] {
                let fused = arms.len();
                arms.push(kivi_arm(ctx, which, bits, GROUP, t, path, pool_id, &pool)?);
                let fused_bytes = arms[fused].bytes;
                arms.push(unfused_arm(
                    ctx,
                    which,
                    bits,
                    t,
                    unfused_path,
                    pool_id,
                    &pool,
                    fused,
                    fused_bytes,
                )?);
                // A-vs-A: the 2-bit key arm at the largest T timed twice (own outputs, same
                // pool).
                if which == Which::Keys && bits == 2 && Some(&t) == tokens.iter().max() {
                    let mut twin = kivi_arm(ctx, which, bits, GROUP, t, path, pool_id, &pool)?;
                    twin.name += AA_SUFFIX;
                    arms.push(twin);
                }
            }
            for &p in &value_paths {
                arms.push(kivi_arm(
                    ctx,
                    Which::Values,
                    bits,
                    128,
                    t,
                    p,
                    pool_id,
                    &pool,
                )?);
            }
        }
        pools.push(pool);
    }
    // Bit packing: one pool of (codes, words) per b, shared by its pack and unpack arms.
    let mut packs: Vec<Option<PackPool>> = (0..tokens.len()).map(|_| None).collect();
    for bits in [2, 3, 4, 8] {
        let id = packs.len();
        match pack_arms(ctx, bits, stream, o.l2_bytes, id, &mut rng) {
            Ok((a, b, p)) => {
                arms.push(a);
                arms.push(b);
                packs.push(Some(p));
            }
            Err(e) => {
                println!("  skipping bitpack b={bits}: {e}");
                packs.push(None);
            }
        }
    }
    println!(
        "  {} arms; rotation buffers per arm: {}",
        arms.len(),
        arms.iter()
            .map(|a| a.instances.len().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );

    // Before every timed dispatch, unless --no-flush: a separate submission copying 2x the
    // assumed L2 (the L2 then holds someone else's lines, and the GPU is busy right before
    // the timed work instead of idling between submissions, which let its clocks drop).
    let flush = if o.flush {
        let mut one = Rng(0x0f1a_5eed);
        Some(copy_arm(ctx, 2 * o.l2_bytes, 0, &mut one)?)
    } else {
        None
    };
    let stamps = Stamps::new(ctx, arms.len())?;
    let mut shared = vec![0usize; packs.len()];
    let total = o.warmup + o.rounds;
    let t0 = Instant::now();
    for round in 0..total {
        // Rotate the starting arm so no arm always follows the same one.
        let order: Vec<usize> = (0..arms.len()).map(|i| (i + round) % arms.len()).collect();
        for (slot, &a) in order.iter().enumerate() {
            let arm = &arms[a];
            let k = match arm.cursor {
                Cursor::Own => round,
                Cursor::Shared(p) => {
                    shared[p] += 1;
                    shared[p]
                }
            } % arm.instances.len();
            if let Some(f) = &flush {
                gpu::submit_blocking(ctx, "bench L2 flush", |enc| {
                    gpu::encode_plan(
                        ctx,
                        enc,
                        KernelPath::WgslWorkgroup,
                        &f.passes[0].plan,
                        &[&f.instances[0][0], &f.instances[0][1]],
                    )
                })?;
            }
            time_arm(ctx, &stamps, arm, k, slot as u32)?;
        }
        let ns = stamps.read(ctx, arms.len())?;
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

    // Correctness of what was timed: run instance 0 of every arm once more and check it.
    for (slot, arm) in arms.iter().enumerate() {
        time_arm(ctx, &stamps, arm, 0, slot as u32)?;
    }
    let mut bad = 0;
    println!("\nchecks (instance 0 of each arm):");
    for arm in &arms {
        let host = arm
            .t
            .and_then(|t| tokens.iter().position(|&x| x == t))
            .map(|i| pools[i].host.as_slice());
        match check_arm(ctx, &arms, arm, host, &packs) {
            Ok(m) => println!("  ok   {:<44} {m}", arm.name),
            Err(m) => {
                bad += 1;
                println!("  FAIL {:<44} {m}", arm.name);
            }
        }
    }
    if bad > 0 {
        return Err(kvpack::Error::Config(format!(
            "{bad} arm(s) failed their output check; no numbers printed"
        )));
    }

    // Detailed results, then the compact table.
    println!(
        "\nper arm, µs over {} rounds (median / min / max):",
        o.rounds
    );
    let rows: Vec<(f64, f64, f64)> = arms.iter().map(|a| stats(&a.times_ns)).collect();
    for (arm, r) in arms.iter().zip(&rows) {
        println!(
            "  {:<44} {:>10.2} {:>10.2} {:>10.2}",
            arm.name,
            r.0 / 1e3,
            r.1 / 1e3,
            r.2 / 1e3
        );
    }
    // The roofline of an arm: the copy whose bytes moved are nearest (log scale).
    let roofline = |bytes: u64| -> Option<(usize, f64)> {
        arms.iter()
            .zip(&rows)
            .enumerate()
            .filter(|(_, (a, _))| a.check == Check::Copy)
            .min_by(|(_, (a, _)), (_, (b, _))| {
                let d = |c: u64| (c as f64 / bytes as f64).ln().abs();
                d(a.bytes).total_cmp(&d(b.bytes))
            })
            .map(|(i, (a, r))| (i, a.bytes as f64 / r.0))
    };
    let named: Vec<(&str, &[f64], f64)> = arms
        .iter()
        .zip(&rows)
        .map(|(a, r)| (a.name.as_str(), a.times_ns.as_slice(), r.0))
        .collect();
    let (noise, aa, floor) = common::aa_floor(&named);
    println!("  (for scale, the spread (max - min) / median of the copy arms:)");
    for (arm, r) in arms.iter().zip(&rows) {
        if arm.check == Check::Copy {
            println!("  {:<44} {:>6.1} %", arm.name, 100.0 * (r.2 - r.1) / r.0);
        }
    }

    // Fused vs unfused.
    println!(
        "\nfused vs unfused quantization (medians; unfused traffic = what its 8 passes move):"
    );
    let mut speedups = Vec::new();
    for (arm, r) in arms.iter().zip(&rows) {
        if let Check::Unfused { fused } = arm.check {
            let f = rows[fused].0;
            let sp = r.0 / f;
            let verdict = if 100.0 * (sp - 1.0).abs() <= floor {
                " (inside the noise floor: no result)"
            } else {
                ""
            };
            let what = arm.kind.trim_end_matches("_unfused");
            println!(
                "  {what:<6} T={:<6} {}b: fused {:>9.2} µs, unfused {:>9.2} µs ({} moved): fused is {:.2}x faster{verdict}",
                arm.t.unwrap_or(0),
                arm.bits,
                f / 1e3,
                r.0 / 1e3,
                fmt_bytes(arm.traffic),
                sp
            );
            speedups.push(serde_json::json!({
                "what": what, "T": arm.t, "bits": arm.bits, "fused_median_us": f / 1e3,
                "unfused_median_us": r.0 / 1e3, "unfused_traffic_bytes": arm.traffic,
                "speedup": sp, "noise": 100.0 * (sp - 1.0).abs() <= floor,
            }));
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
    println!(
        "\n{:<56} {:>9} {:>9} {:>9} {:>9} {:>8} {:>6} {:>7}",
        "arm", "moved", "med µs", "min µs", "max µs", "GB/s", "spread", "% copy~"
    );
    let mut out_rows = Vec::new();
    for (i, (arm, r)) in arms.iter().zip(&rows).enumerate() {
        let gbs = arm.bytes as f64 / r.0;
        let roof = roofline(arm.bytes).filter(|&(c, _)| c != i);
        let pct = roof.map(|(_, c)| 100.0 * gbs / c);
        println!(
            "{:<56} {:>9} {:>9.2} {:>9.2} {:>9.2} {:>8.1} {:>5.1}% {:>7}",
            arm.name,
            fmt_bytes(arm.bytes),
            r.0 / 1e3,
            r.1 / 1e3,
            r.2 / 1e3,
            gbs,
            100.0 * (r.2 - r.1) / r.0,
            pct.map_or("-".into(), |p| format!("{p:.0}%"))
        );
        out_rows.push(ArmRow {
            name: arm.name.clone(),
            kind: arm.kind.into(),
            method: (arm.bits > 0).then(|| format!("{}-bit", arm.bits)),
            path: arm.passes.first().map(|p| p.path.to_string()),
            variant: Some(arm.variant().to_string()).filter(|v| !v.is_empty()),
            twin: arm.name.ends_with(AA_SUFFIX),
            t: arm.t,
            tq: None,
            bytes: arm.bytes,
            median_us: r.0 / 1e3,
            min_us: r.1 / 1e3,
            max_us: r.2 / 1e3,
            samples: arm.times_ns.len(),
            samples_ns: arm.times_ns.clone(),
            roofline: roof.map(|(c, _)| arms[c].name.clone()),
            pct_roofline: pct,
        });
    }
    if cpu_adapter {
        println!("({CPU_ADAPTER_NOTE})");
    }

    let rep = Report {
        bench: "gpu_kivi",
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
            "fused_vs_unfused": speedups,
            "noise_floor_pct": floor,
            "aa_pairs": aa,
        }),
        total_s,
    };
    if let Some(p) = &o.json {
        rep.write_json(p).map_err(kvpack::Error::Config)?;
        println!("wrote {}", p.display());
    }
    if let Some(p) = &o.plot {
        draw(p, &rep.arms, &rep.adapter, cpu_adapter).map_err(kvpack::Error::Config)?;
        println!("wrote {}", p.display());
    }
    Ok(())
}

/// The figure of a run's arms (`--plot`, or `--replot` from its JSON): one line per KIVI
/// kernel (the arm's name without its T) against T.
fn draw(png: &Path, rows: &[ArmRow], adapter: &str, cpu_adapter: bool) -> Result<(), String> {
    let series = report::series_by(rows, |r| {
        Some(r.name.replace(&format!(" T={}", r.t.unwrap_or(0)), ""))
    });
    report::plot(
        png,
        &format!("gpu_kivi: KIVI quantization, H={HEADS}, D={DIM} ({adapter})"),
        "T (tokens quantized)",
        &series,
        cpu_adapter.then_some(CPU_ADAPTER_NOTE),
    )
}

/// `--replot JSON PNG`: the figure drawn again from a run's JSON (no GPU needed).
fn replot(json: &Path, png: &Path) -> Result<(), String> {
    let (v, rows) = report::read_rows(json)?;
    let adapter = v["adapter"].as_str().unwrap_or("unknown adapter");
    draw(
        png,
        &rows,
        adapter,
        v["device_type"].as_str() == Some("Cpu"),
    )
}
