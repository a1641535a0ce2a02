//! How fast cooperative-matrix operands come out of a storage buffer, against plain loads of
//! the same bytes: the question behind the tensor-core decode kernel's former direct path for
//! f16 rows, which read K and V with `coopLoad` straight from the segments and ran at ~16 % of
//! the copy rate (its answer: wgsl/attend/attend_decode_tc_rows.wgsl stages them instead). A measuring tool, not a test; it needs
//! 16×16×16 f16 cooperative matrices (`Context::tensor_cores`) and says why it does not run
//! elsewhere.
//!
//! ```text
//! cargo bench --bench coop_load [-- --rounds 20 --json FILE | --wgsl]
//! ```
//!
//! **What is read.** One buffer of 256 MiB of f16, seen as rows of 1024 f16 (the decode
//! bench's 8 KV heads × D = 128): tile i is 16 rows × 128 channels (4 KiB) at row
//! 16·(i / 8), channels 128·(i % 8) — a 16-token block of one head's keys, as that path
//! reads it. Every arm reads every tile once per dispatch (65,536 tiles; one workgroup of one
//! 32-wide subgroup takes tiles wid, wid + n, …) and writes one small result per workgroup.
//! The buffer is 4× the H200's L2, read once in order: nothing of a dispatch's start is
//! cached at the next one's.
//!
//! **Arms** (per tile and subgroup):
//! - `vec4`: 8 plain 16-byte loads per lane (`array<vec4<u32>>`), xor-folded: the read
//!   roofline of this access pattern;
//! - `coop`: 8 `coopLoad`s (16×16, column-major, row stride 1024) each fed at once to an MMA
//!   (four accumulators), as that path did;
//! - `coop-first`: the same 8 `coopLoad`s into an array first, then the 8 MMAs;
//! - `coop-first2`: two tiles' 16 `coopLoad`s first, then their MMAs;
//! - `stage`: 16 plain 8-byte loads per lane (`array<vec4<f16>>`), stored element by element
//!   into workgroup memory (`array<f16>`, the only type a coop load may read), a barrier, 8
//!   `coopLoad`s from there and the MMAs, a barrier.
//!
//! Each arm runs at 1, 2, 4, 8, 16 and 32 workgroups (subgroups) per SM of a 132-SM H200;
//! every (arm, occupancy) pair is timed once per round, all pairs interleaved, with
//! timestamp queries around the one dispatch.

#[path = "common/mod.rs"]
mod common;

use common::report::Stamps;
use common::{MIB, stats};
use kvpack::{Context, gpu};

const BYTES: u64 = 256 * MIB;
const ROW: u64 = 1024; // f16 per row
const TILE_BYTES: u64 = 16 * 128 * 2;
const TILES: u64 = BYTES / TILE_BYTES;
const SMS: u32 = 132;
const PER_SM: [u32; 6] = [1, 2, 4, 8, 16, 32];
const ARMS: [&str; 5] = ["vec4", "coop", "coop-first", "coop-first2", "stage"];

const SHADER_TEMPLATE: &str = "enable f16;
enable wgpu_cooperative_matrix;
diagnostic(off, derivative_uniformity);
alias TcA = coop_mat16x16<f16, A>;
alias TcB = coop_mat16x16<f16, B>;
alias TcC = coop_mat16x16<f32, C>;
const ROW: u32 = {ROW}u;
const TILES: u32 = {TILES}u;
@group(0) @binding(0) var<storage, read> src16: array<f16>;
@group(0) @binding(1) var<storage, read> src4: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> srch: array<vec4<f16>>;
@group(0) @binding(3) var<storage, read> ones: array<f16>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
var<workgroup> sm: array<f16, 2048>;

// f16 index of tile i's (row 0, channel 0).
fn tile_base(i: u32) -> u32 {
    return (i / 8u) * 16u * ROW + (i % 8u) * 128u;
}

@compute @workgroup_size(32)
fn vec4_main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    var acc = vec4<u32>(0u);
    for (var i = wg.x; i < TILES; i += n.x) {
        let b = tile_base(i) / 8u;
{vec4_body}
    }
    out[wg.x * 32u + l] = f32(acc.x ^ acc.y ^ acc.z ^ acc.w);
}

fn fin(a0: TcC, a1: TcC, a2: TcC, a3: TcC, w: u32) {
    coopStoreT(a0 + a1 + a2 + a3, &out[w * 256u], 16u);
}

";

/// The arms' loop bodies, unrolled here (naga keeps loops; arrays of matrices indexed by a
/// loop variable would not stay in registers).
fn bodies() -> [String; 6] {
    let mut vec4 = String::new();
    for j in 0..8 {
        vec4 += &format!(
            "        let x{j} = src4[b + ((l + {o}u) / 16u) * (ROW / 8u) + (l + {o}u) % 16u];\n",
            o = 32 * j
        );
    }
    for j in 0..8 {
        vec4 += &format!("        acc ^= x{j};\n");
    }
    let mma = |k: usize, m: &str| {
        format!(
            "        acc{r} = coopMultiplyAdd(a, {m}, acc{r});\n",
            r = k % 4
        )
    };
    let mut coop = String::new();
    for kc in 0..8 {
        coop += &format!(
            "        let k{kc} = coopLoad<TcB>(&src16[b + {o}u], ROW);\n",
            o = 16 * kc
        );
        coop += &mma(kc, &format!("k{kc}"));
    }
    let mut first = String::new();
    for kc in 0..8 {
        first += &format!(
            "        let k{kc} = coopLoad<TcB>(&src16[b + {o}u], ROW);\n",
            o = 16 * kc
        );
    }
    for kc in 0..8 {
        first += &mma(kc, &format!("k{kc}"));
    }
    let mut first2 = String::new();
    for t in 0..2 {
        for kc in 0..8 {
            first2 += &format!(
                "        let k{t}_{kc} = coopLoad<TcB>(&src16[b{t} + {o}u], ROW);\n",
                o = 16 * kc
            );
        }
    }
    for t in 0..2 {
        for kc in 0..8 {
            first2 += &mma(kc, &format!("k{t}_{kc}"));
        }
    }
    let mut stage = String::new();
    for j in 0..16 {
        stage += &format!(
            "        let x{j} = srch[b + ((l + {o}u) / 32u) * (ROW / 4u) + (l + {o}u) % 32u];\n",
            o = 32 * j
        );
    }
    for j in 0..16 {
        stage += &format!(
            "        let s{j} = ((l + {o}u) / 32u) * 128u + 4u * ((l + {o}u) % 32u);\n        sm[s{j}] = x{j}.x;\n        sm[s{j} + 1u] = x{j}.y;\n        sm[s{j} + 2u] = x{j}.z;\n        sm[s{j} + 3u] = x{j}.w;\n",
            o = 32 * j
        );
    }
    let mut stage_mma = String::new();
    for kc in 0..8 {
        stage_mma += &format!(
            "        let k{kc} = coopLoad<TcB>(&sm[{o}u], 128u);\n",
            o = 16 * kc
        );
        stage_mma += &mma(kc, &format!("k{kc}"));
    }
    [vec4, coop, first, first2, stage, stage_mma]
}

/// A matrix arm's entry point `{name}_main`: four accumulators fed by `body` for the tiles
/// `i` = wg.x, wg.x + `step`, …, with `tile` binding the tile's base index(es) first.
fn coop_entry(name: &str, step: &str, tile: &str, body: &str) -> String {
    format!(
        "@compute @workgroup_size(32)
fn {name}_main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>, @builtin(local_invocation_index) l: u32) {{
    let a = coopLoadT<TcA>(&ones[0], 16u);
    var acc0 = TcC();
    var acc1 = TcC();
    var acc2 = TcC();
    var acc3 = TcC();
    for (var i = wg.x; i < TILES; i += {step}) {{
{tile}{body}    }}
    fin(acc0, acc1, acc2, acc3, wg.x);
}}
"
    )
}

fn shader() -> String {
    let mut s = SHADER_TEMPLATE
        .replace("{ROW}", &ROW.to_string())
        .replace("{TILES}", &TILES.to_string());
    let [vec4, coop, first, first2, stage, stage_mma] = bodies();
    s = s.replace("{vec4_body}", &vec4);
    let one = "        let b = tile_base(i);\n";
    // The second tile: i + n.x, or tile i again past the end (the same bytes, cached).
    let two = "        let b0 = tile_base(i);\n        let b1 = tile_base(select(i, i + n.x, i + n.x < TILES));\n";
    let staged =
        format!("{stage}        workgroupBarrier();\n{stage_mma}        workgroupBarrier();\n");
    for (name, step, tile, body) in [
        ("coop", "n.x", one, coop.as_str()),
        ("coop_first", "n.x", one, first.as_str()),
        ("coop_first2", "2u * n.x", two, first2.as_str()),
        (
            "stage",
            "n.x",
            "        let b = tile_base(i) / 4u;\n",
            staged.as_str(),
        ),
    ] {
        s += &coop_entry(name, step, tile, body);
    }
    s
}

struct Opts {
    /// Print the WGSL and stop (to check it with a validator where nothing can run it).
    wgsl: bool,
    rounds: usize,
    json: Option<String>,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        wgsl: false,
        rounds: 20,
        json: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--bench" => {}
            "--wgsl" => o.wgsl = true,
            "--rounds" => {
                o.rounds = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or("--rounds needs a number")?
            }
            "--json" => o.json = Some(it.next().ok_or("--json needs a path")?.clone()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(o)
}

fn main() {
    let opts = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("coop_load: {e}");
            std::process::exit(2);
        }
    };
    if opts.wgsl {
        print!("{}", shader());
        return;
    }
    let ctx = match Context::headless() {
        Ok(c) => c,
        Err(e) => {
            println!("coop_load: skipped: no headless context: {e}");
            return;
        }
    };
    if let Err(why) = ctx.tensor_cores() {
        println!("coop_load: skipped: no cooperative matrices here: {why}");
        return;
    }
    if let Err(e) = run(&ctx, &opts) {
        eprintln!("coop_load: error: {e}");
        std::process::exit(1);
    }
}

fn run(ctx: &Context, o: &Opts) -> kvpack::Result<()> {
    let device = ctx.device().expect("tensor_cores checked a device");
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("coop_load"),
        source: wgpu::ShaderSource::Wgsl(shader().into()),
    });
    let pipes: Vec<wgpu::ComputePipeline> = ARMS
        .iter()
        .map(|arm| {
            let entry = format!("{}_main", arm.replace('-', "_"));
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some("coop_load arm"),
                layout: None,
                module: &module,
                entry_point: Some(&entry),
                compilation_options: Default::default(),
                cache: None,
            })
        })
        .collect();
    // The source: a pattern of small f16 values (1 + k/1024), 16 MiB repeated.
    let seed: Vec<u16> = (0..(8 * MIB) as u32)
        .map(|i| half::f16::from_f32(1.0 + (i % 1024) as f32 / 1024.0).to_bits())
        .collect();
    let seed = gpu::upload(ctx, "coop_load seed", bytemuck::cast_slice(&seed))?;
    let src = gpu::storage_buffer(ctx, "coop_load source", BYTES)?;
    common::fill_from(ctx, &seed, &src)?;
    let ones: Vec<u16> = vec![half::f16::ONE.to_bits(); 256];
    let ones = gpu::upload(ctx, "coop_load ones", bytemuck::cast_slice(&ones))?;
    let max_wg = u64::from(SMS * PER_SM[PER_SM.len() - 1]);
    let out = gpu::storage_buffer(ctx, "coop_load out", max_wg * 256 * 4)?;
    let groups: Vec<wgpu::BindGroup> = pipes
        .iter()
        .enumerate()
        .map(|(a, p)| {
            // Each entry point's (derived) layout holds only the bindings it uses.
            let used: &[u32] = match ARMS[a] {
                "vec4" => &[1, 4],
                "stage" => &[2, 3, 4],
                _ => &[0, 3, 4],
            };
            let entries: Vec<wgpu::BindGroupEntry> = used
                .iter()
                .map(|&b| wgpu::BindGroupEntry {
                    binding: b,
                    resource: match b {
                        0..=2 => src.as_entire_binding(),
                        3 => ones.as_entire_binding(),
                        _ => out.as_entire_binding(),
                    },
                })
                .collect();
            device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("coop_load group"),
                layout: &p.get_bind_group_layout(0),
                entries: &entries,
            })
        })
        .collect();
    let cases: Vec<(usize, u32)> = (0..ARMS.len())
        .flat_map(|a| PER_SM.iter().map(move |&w| (a, w)))
        .collect();
    let stamps = Stamps::new(ctx, cases.len())?;
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for round in 0..o.rounds + 2 {
        for (slot, &(a, w)) in cases.iter().enumerate() {
            stamps.time(ctx, slot as u32, |enc| {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("coop_load"),
                    timestamp_writes: None,
                });
                pass.set_pipeline(&pipes[a]);
                pass.set_bind_group(0, &groups[a], &[]);
                pass.dispatch_workgroups(SMS * w, 1, 1);
                Ok(())
            })?;
        }
        let ns = stamps.read(ctx, cases.len())?;
        if round >= 2 {
            for (t, x) in times.iter_mut().zip(ns) {
                t.push(x);
            }
        }
    }
    println!(
        "coop_load: {} MiB in 4 KiB tiles (16 rows × 128 f16, row stride 2 KiB), {} rounds after 2 warm-up; {}",
        BYTES / MIB,
        o.rounds,
        ctx.describe().gpu.map(|g| g.adapter).unwrap_or_default()
    );
    print!("{:<12}", "arm \\ wg/SM");
    for w in PER_SM {
        print!("{w:>16}");
    }
    println!("   (median µs, GB/s)");
    let mut rows = Vec::new();
    for (a, arm) in ARMS.iter().enumerate() {
        print!("{arm:<12}");
        for (i, &w) in PER_SM.iter().enumerate() {
            let t = &times[a * PER_SM.len() + i];
            let (med, lo, hi) = stats(t);
            let gbs = BYTES as f64 / med;
            print!("{:>9.1} {:>6.0}", med / 1e3, gbs);
            rows.push(serde_json::json!({
                "arm": arm, "workgroups_per_sm": w, "workgroups": SMS * w,
                "median_us": med / 1e3, "min_us": lo / 1e3, "max_us": hi / 1e3, "gb_per_s": gbs,
            }));
        }
        println!();
    }
    if let Some(path) = &o.json {
        let doc = serde_json::json!({ "bytes": BYTES, "rounds": o.rounds, "rows": rows });
        std::fs::write(path, serde_json::to_string_pretty(&doc).expect("json"))
            .map_err(|e| kvpack::Error::Config(format!("cannot write {path}: {e}")))?;
    }
    Ok(())
}
