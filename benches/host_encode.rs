//! Host time of recording a decode step: what an app's CPU spends per layer and token to put
//! kvpack's attention (and the token's append) into its command encoder. Not GPU time: the
//! recorded work is submitted and waited for outside the timed span.
//!
//! ```text
//! cargo bench --bench host_encode                 # 30 layers, 24 rounds
//! cargo bench --bench host_encode -- --quick      # 4 layers, 4 rounds (CI proves the path)
//! options: --rounds N  --layers N  --tokens T (cached tokens before the first step; 1024)
//!          --steps N (decode steps per round; 8)  --json PATH
//! ```
//!
//! **What.** A model of `--layers` layers (8 KV heads, 32 query heads, D = 128: SmolLM2-1.7B's
//! attention shape), KIVI-4 (`kivi:bits=4,group=32,residual=32`) and f16, `--tokens` cached.
//! A decode step records, for every layer, `encode_append` of one token (host values) and
//! `encode_attend` of one query into the app's own query and output buffers (one pair per
//! layer, the same at every step), all into one encoder, then `finish`; the step is then
//! submitted and waited for (not timed). Per arm and round: the median over the round's steps
//! of the host µs per layer, for the whole step (append + attention + the encoder's share of
//! `finish`) and for `encode_attend` alone.
//!
//! **Arms**, interleaved round by round (the order alternates): `cached` (the default: each
//! layer keeps its attention bind groups, [`kvpack::gpu::bind_cache`], and the uniforms'
//! bytes live in the device's arena at dynamic offsets), `per-call` (bind groups made at every
//! call, as before 2026-12-07: `bind_cache::set_enabled(false)`), and `cached (A')`, the
//! first arm again, for the noise floor.

mod common;

use std::time::Instant;

use kvpack::{AttendOptions, Context, Input, KvLayer, Method, PathChoice};

const HKV: usize = 8;
const HQ: usize = 32;
const D: usize = 128;

struct Opts {
    rounds: usize,
    layers: usize,
    tokens: usize,
    steps: usize,
    json: Option<String>,
}

fn parse() -> Result<Opts, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let mut o = Opts {
        rounds: if quick { 4 } else { 24 },
        layers: if quick { 4 } else { 30 },
        tokens: 1024,
        steps: if quick { 3 } else { 8 },
        json: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = |name: &str| -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|v| *v > 0)
                .ok_or_else(|| format!("{name} needs a positive number"))
        };
        match a.as_str() {
            "--quick" | "--bench" => {}
            "--rounds" => o.rounds = num("--rounds")?,
            "--layers" => o.layers = num("--layers")?,
            "--tokens" => o.tokens = num("--tokens")?,
            "--steps" => o.steps = num("--steps")?,
            "--json" => o.json = Some(it.next().ok_or("--json needs a path")?.clone()),
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    Ok(o)
}

/// One method's model: its layers and each layer's query and output buffers.
struct Model {
    name: &'static str,
    layers: Vec<Box<dyn KvLayer>>,
    io: Vec<(wgpu::Buffer, wgpu::Buffer)>,
}

fn model(ctx: &Context, name: &'static str, spec: &str, o: &Opts) -> kvpack::Result<Model> {
    let method: Method = spec.parse()?;
    let mut rng = common::Rng(0x5eed_0001);
    let (mut layers, mut io) = (Vec::new(), Vec::new());
    for l in 0..o.layers {
        let mut layer = method.layer_at(ctx, l, HKV, D, PathChoice::Auto)?;
        let kv = rng.normals(o.tokens * HKV * D);
        layer.append(Input::F32(&kv), Input::F32(&kv))?;
        layer.prepare()?;
        let q = rng.normals(HQ * D);
        let qb = kvpack::gpu::upload(ctx, "app query", bytemuck::cast_slice(&q))?;
        let ob = kvpack::gpu::storage_buffer(ctx, "app output", (HQ * D * 4) as u64)?;
        layers.push(layer);
        io.push((qb, ob));
    }
    Ok(Model { name, layers, io })
}

/// One round of an arm: `steps` decode steps over every layer; the median over steps of the
/// host µs per layer for the whole step and for `encode_attend` alone.
fn round(
    ctx: &Context,
    m: &mut Model,
    steps: usize,
    rng: &mut common::Rng,
) -> kvpack::Result<(f64, f64)> {
    let device = ctx.device().expect("a GPU context");
    let queue = ctx.queue().expect("a GPU context");
    let opts = AttendOptions::default();
    let layers = m.layers.len() as f64;
    let (mut whole, mut attend) = (Vec::new(), Vec::new());
    for _ in 0..steps {
        let kv: Vec<Vec<f32>> = (0..m.layers.len()).map(|_| rng.normals(HKV * D)).collect();
        let start = Instant::now();
        let mut in_attend = 0.0;
        let mut enc = device.create_command_encoder(&Default::default());
        for ((layer, (qb, ob)), kv) in m.layers.iter_mut().zip(&m.io).zip(&kv) {
            layer.encode_append(&mut enc, Input::F32(kv), Input::F32(kv))?;
            let a = Instant::now();
            layer.encode_attend(&mut enc, qb, 1, HQ, &opts, ob)?;
            in_attend += a.elapsed().as_secs_f64();
        }
        let cb = enc.finish();
        whole.push(start.elapsed().as_secs_f64() * 1e6 / layers);
        attend.push(in_attend * 1e6 / layers);
        queue.submit([cb]);
        let _ = device.poll(wgpu::PollType::Wait {
            submission_index: None,
            timeout: None,
        });
    }
    Ok((common::stats(&whole).0, common::stats(&attend).0))
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("host_encode: {e}");
            std::process::exit(2);
        }
    };
    let ctx = match Context::headless() {
        Ok(c) if c.device().is_some() => c,
        Ok(_) => return println!("host_encode: NOT RUN: no GPU device (nothing to record for)"),
        Err(e) => return println!("host_encode: NOT RUN: {e}"),
    };
    if let Err(e) = run(&ctx, &o) {
        eprintln!("host_encode: {e}");
        std::process::exit(1);
    }
}

const ARMS: [(&str, bool); 3] = [("cached", true), ("per-call", false), ("cached (A')", true)];

fn run(ctx: &Context, o: &Opts) -> kvpack::Result<()> {
    let (adapter, _, cpu) = common::report::adapter(ctx);
    println!(
        "host_encode: {adapter}; host: {} threads; {} layers, {HKV} KV heads, {HQ} query heads, D = {D}, {} tokens cached, {} steps per round, {} rounds",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        o.layers,
        o.tokens,
        o.steps,
        o.rounds
    );
    if cpu {
        println!("(a CPU adapter: the host time includes what its driver does on the CPU)");
    }
    let mut models = [
        model(ctx, "kivi-4", "kivi:bits=4,group=32,residual=32", o)?,
        model(ctx, "f16", "f16", o)?,
    ];
    let mut rng = common::Rng(0x5eed_0002);
    // samples[model][arm] = (whole, attend) per round
    let mut samples = vec![vec![(Vec::new(), Vec::new()); ARMS.len()]; models.len()];
    // groups[model][arm] = bind groups (taken from the layers' caches, made by them)
    let mut groups = vec![vec![(0u64, 0u64); ARMS.len()]; models.len()];
    // One warm-up step per model and arm (pipelines, the first groups, the arena).
    for m in models.iter_mut() {
        for &(_, on) in &ARMS {
            kvpack::gpu::bind_cache::set_enabled(on);
            round(ctx, m, 1, &mut rng)?;
        }
    }
    for r in 0..o.rounds {
        for (mi, m) in models.iter_mut().enumerate() {
            let order: Vec<usize> = if r % 2 == 0 {
                vec![0, 1, 2]
            } else {
                vec![2, 1, 0]
            };
            for a in order {
                kvpack::gpu::bind_cache::set_enabled(ARMS[a].1);
                let b0 = ctx.bind_group_stats();
                let (w, at) = round(ctx, m, o.steps, &mut rng)?;
                let b1 = ctx.bind_group_stats();
                groups[mi][a].0 += b1.0 - b0.0;
                groups[mi][a].1 += b1.1 - b0.1;
                samples[mi][a].0.push(w);
                samples[mi][a].1.push(at);
            }
        }
    }
    kvpack::gpu::bind_cache::set_enabled(true);
    println!(
        "\nhost µs per layer and decode step, medians over {} rounds (min / max):",
        o.rounds
    );
    println!(
        "{:<26} {:>26} {:>26} {:>22}",
        "arm", "append + attend", "encode_attend alone", "cached groups hit/made"
    );
    let mut rows = Vec::new();
    let mut aa = Vec::new();
    for (mi, m) in models.iter().enumerate() {
        for (a, &(arm, _)) in ARMS.iter().enumerate() {
            let (w, at) = (&samples[mi][a].0, &samples[mi][a].1);
            let (wm, wl, wh) = common::stats(w);
            let (am, al, ah) = common::stats(at);
            let name = format!("{} {arm}", m.name);
            let (hit, made) = groups[mi][a];
            println!(
                "{name:<26} {:>26} {:>26} {:>22}",
                format!("{wm:.2} ({wl:.2} / {wh:.2})"),
                format!("{am:.2} ({al:.2} / {ah:.2})"),
                format!("{hit} / {made}")
            );
            rows.push(serde_json::json!({
                "name": name, "method": m.name, "arm": arm,
                "cached_groups": {"hit": hit, "made": made},
                "step_us": {"median": wm, "min": wl, "max": wh, "samples": w},
                "attend_us": {"median": am, "min": al, "max": ah, "samples": at},
            }));
        }
        let (obs, boot) = common::aa_noise(&samples[mi][0].1, &samples[mi][2].1);
        aa.push((m.name, obs.max(boot)));
        let per_call = common::stats(&samples[mi][1].1).0;
        let cached = common::stats(&samples[mi][0].1).0;
        println!(
            "  {}: encode_attend {cached:.2} µs cached against {per_call:.2} per call ({:.0} % less); A-vs-A {obs:.1} % (bootstrap 95 %: {boot:.1} %)",
            m.name,
            100.0 * (1.0 - cached / per_call)
        );
    }
    if let Some(path) = &o.json {
        let v = serde_json::json!({
            "adapter": adapter,
            "layers": o.layers, "tokens": o.tokens, "steps": o.steps, "rounds": o.rounds,
            "geometry": {"hkv": HKV, "hq": HQ, "d": D},
            "rows": rows,
            "noise_floor_pct": aa.iter().map(|x| x.1).fold(0.0, f64::max),
        });
        std::fs::write(path, serde_json::to_string_pretty(&v).expect("json"))
            .map_err(|e| kvpack::Error::Config(format!("--json {path}: {e}")))?;
        println!("wrote {path}");
    }
    Ok(())
}
