//! GPU benchmark of KIVI quantization against the device's copy roofline, timed with
//! timestamp queries (`src/gpu/timing.rs`). See `benches/README.md`.
//!
//! ```text
//! cargo bench --bench gpu_kivi                 # full sizes (a real GPU)
//! cargo bench --bench gpu_kivi -- --quick      # small sizes (proves the code path, e.g. lavapipe)
//! options: --rounds N  --warmup N  --l2-mib N
//! ```
//!
//! Arms, all interleaved within every round (each dispatch submitted alone and waited for, so
//! no two timed dispatches overlap; the starting arm rotates with the round):
//! - `copy S`: vec4<u32> copy of S bytes; bytes moved = 2·S (read + written).
//! - `keys` / `values`: `kivi_quant_keys` / `kivi_quant_values` of a prefill of T tokens read
//!   from `incoming` (t_old = 0); bytes moved = f16 input + codes + params written.
//!
//! Every arm rotates through at least 4 distinct input (and output) buffers whose total exceeds
//! twice the assumed L2, so no measured dispatch finds its input in cache. Outputs are checked
//! once (copy: dst == src; KIVI: against the CPU reference) before timing.

use std::time::Instant;

use half::f16;
use kvpack::context::{Context, KernelPath, PathChoice};
use kvpack::cpu::kivi_quant_keys::kivi_quant_keys as cpu_quant_keys;
use kvpack::cpu::kivi_quant_values::kivi_quant_values as cpu_quant_values;
use kvpack::gpu::registry;
use kvpack::gpu::timing::{GpuTimer, TimedDispatch};
use kvpack::gpu::{self, DispatchPlan};
use kvpack::kivi::gpu_store::{plan_quant_keys, plan_quant_values};
use kvpack::kivi::{KiviConfig, Layout};

mod common;

use common::{MIB, Rng, fill_from, fmt_bytes, rotation, stats, storage};
const HEADS: usize = 8;
const DIM: usize = 128;
const GROUP: usize = 32;

struct Opts {
    quick: bool,
    rounds: usize,
    warmup: usize,
    l2_bytes: u64,
}

fn parse_args() -> Result<Opts, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let mut o = Opts {
        quick,
        rounds: if quick { 3 } else { 50 },
        warmup: if quick { 1 } else { 5 },
        // H200: 50 MB of L2; 64 MiB errs on the safe side.
        l2_bytes: if quick { MIB } else { 64 * MIB },
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
            "--l2-mib" => o.l2_bytes = num("--l2-mib")? * MIB,
            other => eprintln!("gpu_kivi: ignoring argument `{other}`"),
        }
    }
    Ok(o)
}

fn main() {
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

/// One measured arm: a plan on a path, and the storage bindings of each rotation instance.
struct Arm {
    name: String,
    path: KernelPath,
    plan: DispatchPlan,
    /// Bytes read + written by one dispatch.
    bytes: u64,
    /// Input bytes (what a copy of "similar size" copies).
    input_bytes: u64,
    /// Storage bindings per rotation instance.
    instances: Vec<Vec<wgpu::Buffer>>,
    /// Index into `instances` for the next dispatch.
    cursor: Cursor,
    times_ns: Vec<f64>,
}

/// How an arm picks its rotation instance: its own round counter, or a counter shared by every
/// arm reading the same input pool (so consecutive arms never read the same input).
#[derive(Clone, Copy)]
enum Cursor {
    Own,
    Shared(usize),
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
        path: KernelPath::WgslWorkgroup,
        plan,
        bytes: 2 * size,
        input_bytes: size,
        instances,
        cursor: Cursor::Own,
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
    let cfg = KiviConfig {
        value_group: vgroup,
        ..KiviConfig::uniform(bits, GROUP, 128)
    };
    let l = Layout::new(HEADS, DIM, &cfg)?;
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
    Ok(Arm {
        name: format!("{name} {bits}b T={t} [{path}]"),
        path,
        plan,
        bytes: input_bytes + codes_bytes + params_bytes,
        input_bytes,
        instances,
        cursor: Cursor::Shared(pool_id),
        times_ns: Vec::new(),
    })
}

fn read_u32(ctx: &Context, b: &wgpu::Buffer, bytes: u64) -> kvpack::Result<Vec<u32>> {
    Ok(bytemuck::pod_collect_to_vec(&gpu::readback(ctx, b, bytes)?))
}

/// Checks one instance's outputs (after warm-up): copy dst == src (first 64 MiB); KIVI status
/// clear and codes/params agreeing with the CPU reference (codes may differ at rounding
/// boundaries, params by float rounding).
fn check_arm(ctx: &Context, arm: &Arm, host: Option<&[f16]>, t: usize) -> Result<String, String> {
    let e = |e: kvpack::Error| e.to_string();
    let inst = &arm.instances[0];
    if arm.plan.kernel.name == registry::COPY.name {
        let n = arm.input_bytes.min(64 * MIB);
        let (a, b) = (
            gpu::readback(ctx, &inst[0], n).map_err(e)?,
            gpu::readback(ctx, &inst[1], n).map_err(e)?,
        );
        return if a == b {
            Ok(format!("dst == src ({})", fmt_bytes(n)))
        } else {
            Err("copy: dst differs from src".into())
        };
    }
    let host = host.ok_or("no host input")?;
    let status = read_u32(ctx, &inst[4], 4).map_err(e)?;
    if status[0] != 0 {
        return Err(format!("status = {:#x} (parameter overflow)", status[0]));
    }
    let p: kvpack::kivi::gpu_store::KiviParams = bytemuck::pod_read_unaligned(&arm.plan.uniform);
    // KiviParams.group is the key group of a key plan and the value group of a value plan.
    let is_keys = arm.plan.kernel.name == registry::KIVI_QUANT_KEYS.name;
    let vgroup = if is_keys { GROUP } else { p.group as usize };
    let cfg = KiviConfig {
        value_group: vgroup,
        ..KiviConfig::uniform(p.bits, GROUP, 128)
    };
    let l = Layout::new(HEADS, DIM, &cfg).map_err(e)?;
    let gpu_codes = read_u32(ctx, &inst[2], inst[2].size()).map_err(e)?;
    let gpu_params = read_u32(ctx, &inst[3], inst[3].size()).map_err(e)?;
    let mut codes = vec![0u32; gpu_codes.len()];
    let mut params = vec![0u32; gpu_params.len()];
    let row = l.token_elems();
    let x = |t: usize, h: usize, d: usize| host[t * row + h * DIM + d].to_f32();
    let r = if is_keys {
        cpu_quant_keys(&l, t / l.key_group, x, &mut codes, &mut params)
    } else {
        cpu_quant_values(&l, t, x, &mut codes, &mut params)
    };
    r.map_err(|o| format!("CPU reference overflowed: {o:?}"))?;
    let code_diff = codes.iter().zip(&gpu_codes).filter(|(a, b)| a != b).count();
    let mut param_err = 0f32;
    for (a, b) in params.iter().zip(&gpu_params) {
        for s in [0, 16] {
            let (x, y) = (
                f16::from_bits((a >> s) as u16).to_f32(),
                f16::from_bits((b >> s) as u16).to_f32(),
            );
            param_err = param_err.max((x - y).abs() / x.abs().max(1e-3));
        }
    }
    let frac = code_diff as f64 / codes.len() as f64;
    let msg = format!(
        "{code_diff}/{} code words differ, params rel err {param_err:.1e}",
        codes.len()
    );
    if frac > 1e-3 || param_err > 1e-2 {
        Err(msg)
    } else {
        Ok(msg)
    }
}

fn run(ctx: &Context, o: &Opts) -> kvpack::Result<()> {
    let started = Instant::now();
    let desc = ctx.describe();
    let adapter = desc.gpu.as_ref().map_or("?".into(), |g| {
        format!("{} ({}, {})", g.adapter, g.backend, g.device_type)
    });
    println!("gpu_kivi: {adapter}");
    println!(
        "  mode {}, {} warm-up + {} timed rounds, assumed L2 {} (rotation: total inputs > 2x L2, >= 4 buffers)",
        if o.quick { "quick" } else { "full" },
        o.warmup,
        o.rounds,
        fmt_bytes(o.l2_bytes)
    );
    let (copy_sizes, tokens): (Vec<u64>, Vec<usize>) = if o.quick {
        (vec![MIB, 4 * MIB], vec![256, 1024])
    } else {
        (vec![64 * MIB, 1 << 30], vec![4096, 32768])
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
    let keys_path = ctx.resolve(&registry::KIVI_QUANT_KEYS, PathChoice::Wgsl)?;
    let values_thread_path = ctx.resolve(&registry::KIVI_QUANT_VALUES_THREAD, PathChoice::Wgsl)?;
    let mut value_paths = Vec::new();
    for choice in [PathChoice::WgslSubgroup, PathChoice::WgslWorkgroup] {
        match ctx.resolve(&registry::KIVI_QUANT_VALUES, choice) {
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
            arms.push(kivi_arm(
                ctx,
                Which::Keys,
                bits,
                GROUP,
                t,
                keys_path,
                pool_id,
                &pool,
            )?);
            arms.push(kivi_arm(
                ctx,
                Which::Values,
                bits,
                GROUP,
                t,
                values_thread_path,
                pool_id,
                &pool,
            )?);
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
    println!(
        "  {} arms; rotation buffers per arm: {}",
        arms.len(),
        arms.iter()
            .map(|a| a.instances.len().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );

    let timer = GpuTimer::new(ctx, arms.len())?;
    let mut shared = vec![0usize; pools.len()];
    let total = o.warmup + o.rounds;
    for round in 0..total {
        // Rotate the starting arm so no arm always follows the same one.
        let order: Vec<usize> = (0..arms.len()).map(|i| (i + round) % arms.len()).collect();
        let mut picks = Vec::with_capacity(arms.len());
        for &a in &order {
            let arm = &arms[a];
            let k = match arm.cursor {
                Cursor::Own => round,
                Cursor::Shared(p) => {
                    shared[p] += 1;
                    shared[p]
                }
            } % arm.instances.len();
            picks.push(k);
        }
        let storages: Vec<Vec<&wgpu::Buffer>> = order
            .iter()
            .zip(&picks)
            .map(|(&a, &k)| arms[a].instances[k].iter().collect())
            .collect();
        let dispatches: Vec<TimedDispatch> = order
            .iter()
            .zip(&storages)
            .map(|(&a, s)| TimedDispatch {
                path: arms[a].path,
                plan: &arms[a].plan,
                storage: s,
            })
            .collect();
        let ns = timer.time_isolated(&dispatches)?;
        drop(dispatches);
        if round >= o.warmup {
            for (&a, t) in order.iter().zip(ns) {
                arms[a].times_ns.push(t);
            }
        }
    }

    // Correctness of what was timed: write instance 0 of every arm once more and check it.
    let ck: Vec<Vec<&wgpu::Buffer>> = arms
        .iter()
        .map(|a| a.instances[0].iter().collect())
        .collect();
    let dispatches: Vec<TimedDispatch> = arms
        .iter()
        .zip(&ck)
        .map(|(a, s)| TimedDispatch {
            path: a.path,
            plan: &a.plan,
            storage: s,
        })
        .collect();
    timer.time_isolated(&dispatches)?;
    let mut bad = 0;
    println!("\nchecks (instance 0 of each arm):");
    for arm in &arms {
        let t = arm.input_bytes as usize / (HEADS * DIM * 2);
        let host = tokens
            .iter()
            .position(|&x| x == t)
            .map(|i| pools[i].host.as_slice());
        match check_arm(ctx, arm, host, t) {
            Ok(m) => println!("  ok   {:<34} {m}", arm.name),
            Err(m) => {
                bad += 1;
                println!("  FAIL {:<34} {m}", arm.name);
            }
        }
    }

    // Detailed results, then the compact table.
    println!(
        "\nper arm, µs over {} rounds (median / min / max):",
        o.rounds
    );
    let mut rows = Vec::new();
    for arm in &arms {
        let (med, min, max) = stats(&arm.times_ns);
        println!(
            "  {:<34} {:>10.2} {:>10.2} {:>10.2}",
            arm.name,
            med / 1e3,
            min / 1e3,
            max / 1e3
        );
        rows.push((med, min, max));
    }
    let copy_gbs = |input: u64| -> Option<f64> {
        arms.iter().zip(&rows).find_map(|(a, r)| {
            (a.plan.kernel.name == registry::COPY.name && a.input_bytes == input)
                .then(|| a.bytes as f64 / r.0)
        })
    };
    println!("\nnoise floor (copy arms, (max - min) / median):");
    for (arm, r) in arms.iter().zip(&rows) {
        if arm.plan.kernel.name == registry::COPY.name {
            println!("  {:<34} {:>6.1} %", arm.name, 100.0 * (r.2 - r.1) / r.0);
        }
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
    println!(
        "\n{:<52} {:>9} {:>9} {:>9} {:>9} {:>8} {:>6} {:>7}",
        "arm", "moved", "med µs", "min µs", "max µs", "GB/s", "spread", "% copy"
    );
    for (arm, r) in arms.iter().zip(&rows) {
        let gbs = arm.bytes as f64 / r.0;
        let pct = match copy_gbs(arm.input_bytes) {
            Some(c) if arm.plan.kernel.name != registry::COPY.name => {
                format!("{:.0}%", 100.0 * gbs / c)
            }
            _ => "-".into(),
        };
        println!(
            "{:<52} {:>9} {:>9.2} {:>9.2} {:>9.2} {:>8.1} {:>5.1}% {:>7}",
            arm.name,
            fmt_bytes(arm.bytes),
            r.0 / 1e3,
            r.1 / 1e3,
            r.2 / 1e3,
            gbs,
            100.0 * (r.2 - r.1) / r.0,
            pct
        );
    }
    if bad > 0 {
        return Err(kvpack::Error::Config(format!(
            "{bad} arm(s) failed their output check"
        )));
    }
    Ok(())
}
