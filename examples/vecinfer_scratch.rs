//! Issue 15's memory row: the GPU bytes that quantizing 8 KV heads × 32k tokens × D = 256 with
//! VecInfer allocates (keys and values, through a cache layer on the best GPU path), against
//! the layer's own codes and the `[N, C, d_s]` distance tensor the seed library built.
//!
//! ```sh
//! cargo run --release --features model --example vecinfer_scratch [-- TOKENS [BITS]]
//! ```
//!
//! The codebooks come from 1,024 tokens of synthetic normal keys and values through the
//! library's calibration API (quality does not matter here, only the bytes). The inputs are
//! the same kind of normals, appended in chunks of 4,096 tokens. What is printed: the bytes
//! allocated by the appends (`Context::allocated_bytes`: every buffer kvpack made, summed over
//! the whole run, so each chunk's input upload counts although it is freed after it), the bytes
//! the layer holds at the end (`memory()`), the input's f16 bytes, and what one
//! `[N, C, d_s]` f32 distance tensor per side would take.

use kvpack::calib::ModelIdentity;
use kvpack::calib::train::{CalibOptions, calibrate_capture};
use kvpack::{Context, Input, Method, PathChoice};
use rand::{Rng, SeedableRng};

const HKV: usize = 8;
const DIM: usize = 256;
const CHUNK: usize = 4096;

fn normals(rng: &mut rand::rngs::StdRng, n: usize) -> Vec<f32> {
    // Box–Muller; rounded to f16 as a cache's input would be.
    (0..n)
        .map(|_| {
            let u: f32 = rng.random_range(f32::EPSILON..1.0);
            let w: f32 = rng.random_range(0.0..std::f32::consts::TAU);
            half::f16::from_f32((-2.0 * u.ln()).sqrt() * w.cos()).to_f32()
        })
        .collect()
}

fn main() -> kvpack::Result<()> {
    let mut args = std::env::args().skip(1);
    let tokens: usize = args.next().map_or(32768, |s| s.parse().expect("TOKENS"));
    let bits: u32 = args.next().map_or(2, |s| s.parse().expect("BITS"));
    let mut rng = rand::rngs::StdRng::seed_from_u64(15);
    let calib_tokens = 1024;
    let cap = kvpack::model::QkvCapture {
        tokens: calib_tokens,
        q: vec![normals(&mut rng, calib_tokens * HKV * DIM)],
        k: vec![normals(&mut rng, calib_tokens * HKV * DIM)],
        v: vec![normals(&mut rng, calib_tokens * HKV * DIM)],
    };
    let id = ModelIdentity {
        name: format!("vecinfer_scratch-synthetic-h{HKV}-d{DIM}"),
        arch: "llama".into(),
        layers: 1,
        q_heads: HKV,
        kv_heads: HKV,
        head_dim: DIM,
    };
    let opts = CalibOptions {
        qfilters: false,
        ..Default::default()
    };
    let cal = calibrate_capture(&cap, id, "synthetic normals", "synthetic", &opts, &|_| {})?;
    let path = std::env::temp_dir().join(format!(
        "kvpack-vecinfer-scratch-{}.safetensors",
        std::process::id()
    ));
    cal.write(&path)?;

    let ctx = Context::headless()?;
    let spec = format!("vecinfer:bits={bits},residual=0,calib={}", path.display());
    let m = Method::parse(&spec)?;
    let mut layer = m.layer(&ctx, HKV, DIM, PathChoice::Auto)?;
    let before = ctx.allocated_bytes();
    let started = std::time::Instant::now();
    let mut done = 0;
    while done < tokens {
        let n = CHUNK.min(tokens - done);
        let k = normals(&mut rng, n * HKV * DIM);
        let v = normals(&mut rng, n * HKV * DIM);
        layer.append(Input::F32(&k), Input::F32(&v))?;
        done += n;
    }
    let secs = started.elapsed().as_secs_f64();
    let grown = ctx.allocated_bytes() - before;
    let mem = layer.memory();
    let input = (tokens * HKV * DIM * 2 * 2) as u64;
    let preset = kvpack::cpu::vecinfer::Preset::for_bits(bits)?;
    let n_sub = (DIM / preset.sub_dim) as u64;
    let dist = tokens as u64 * HKV as u64 * n_sub * preset.centroids as u64 * 4;
    let _ = std::fs::remove_file(&path);
    println!(
        "{spec} on {} ({}): {tokens} tokens x {HKV} heads x D {DIM} appended in chunks of \
         {CHUNK} in {secs:.1} s",
        layer.paths()[0],
        ctx.adapter_info().map_or("no adapter", |a| a.name.as_str())
    );
    println!(
        "allocated by the appends: {grown} bytes ({:.3} x the f16 input's {input}); the layer \
         holds {} bytes; one [N, C, d_s] f32 distance tensor per side would be {dist} bytes \
         ({:.0} x what was allocated)",
        grown as f64 / input as f64,
        mem.held.total(),
        dist as f64 / grown.max(1) as f64
    );
    Ok(())
}
