//! The soak: a million tokens appended to one layer, bytes held every 10k tokens.
//!
//! ```text
//! cargo run --release --example soak -- [--tokens 1000000] [--path cpu|wgsl] \
//!     [--method kivi-2] [--chunk 1000] [--every 10000] [--spot-every 100000] \
//!     [--json OUT.json] [--plot OUT.png]
//! ```
//! Prints one line per sample; `--json` writes every sample, `--plot` bytes held (and the f16
//! bytes of the same tokens) against tokens. On a GPU path it counts the device's live wgpu
//! buffers at every sample and once more after dropping the layer (must return to the count
//! before it was made), and checks attention against the CPU reference every
//! `--spot-every` tokens. Bytes held grow linearly, unless the method evicts
//! (`--method "kivi-2+knorm:budget=4096"`, CPU or WGSL path): then they stay flat once the
//! budget is reached.

#[path = "core.rs"]
mod core;

use kvpack::{Context, Method, PathChoice};
use plotters::prelude::*;

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} {v}: not a value"))
        })
        .unwrap_or(default)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let tokens: usize = arg(&args, "--tokens", 1_000_000);
    let path = PathChoice::parse(&arg(&args, "--path", "cpu".to_string()))?;
    let method = Method::parse(&arg(&args, "--method", "kivi-2".to_string()))?;
    let chunk: usize = arg(&args, "--chunk", 1000);
    let every: usize = arg(&args, "--every", 10_000);
    let spot_every: usize = arg(&args, "--spot-every", 100_000);
    let json: String = arg(&args, "--json", String::new());
    let plot: String = arg(&args, "--plot", String::new());
    let (ctx, count): (Context, core::BufferCount) = if path == PathChoice::Cpu {
        (Context::cpu(), Box::new(|| None))
    } else {
        let (c, n) = core::gpu_with_buffer_count()?;
        (c.with_path(path)?, n)
    };
    let baseline = count();
    let t0 = std::time::Instant::now();
    let s = core::Soak {
        ctx: &ctx,
        path,
        method: method.clone(),
        heads: 2,
        dim: 64,
        tokens,
        chunk,
        every,
        spot_every: if path == PathChoice::Cpu {
            0
        } else {
            spot_every
        },
        buffers: &*count,
    };
    let (samples, layer) = core::run(&s)?;
    let secs = t0.elapsed().as_secs_f64();
    let describe = layer.describe();
    drop(layer);
    let after = count();
    for x in &samples {
        println!(
            "{:>8} tokens ({:>8} held)  held {:>11}  payload {:>11}  f16 {:>11}  buffers {:?}  spot {:?}",
            x.tokens, x.held_tokens, x.held, x.payload, x.f16_bytes, x.buffers, x.spot_error
        );
    }
    println!(
        "{tokens} tokens in {secs:.1} s on {describe}; buffers before {baseline:?}, after drop {after:?}"
    );
    if !json.is_empty() {
        let v = serde_json::json!({
            "method": method.to_string(),
            "path": path.to_string(),
            "heads": 2, "dim": 64, "chunk": chunk, "seconds": secs,
            "buffers_before": baseline, "buffers_after_drop": after,
            "eviction": method.eviction().map_or("none".to_string(), |e| e.to_string()),
            "samples": samples.iter().map(|x| serde_json::json!({
                "tokens": x.tokens, "held_tokens": x.held_tokens, "held": x.held, "payload": x.payload,
                "f16_bytes": x.f16_bytes, "buffers": x.buffers, "spot_error": x.spot_error,
            })).collect::<Vec<_>>(),
        });
        std::fs::write(&json, serde_json::to_string_pretty(&v)?)?;
    }
    if !plot.is_empty() {
        // Text in DejaVu Sans embedded in the binary (no system fonts), as `kvpack eval`.
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .map_err(|_| "the embedded font does not load")?;
        let root = BitMapBackend::new(&plot, (900, 560)).into_drawing_area();
        root.fill(&WHITE)?;
        let maxy = samples
            .iter()
            .map(|x| x.f16_bytes.max(x.held))
            .max()
            .unwrap_or(1) as f64
            / 1e6;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("soak: {method} on {path}, one layer H=2 D=64"),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..tokens as f64 / 1e3, 0f64..maxy * 1.05)?;
        chart
            .configure_mesh()
            .x_desc("tokens (thousands)")
            .y_desc("MB")
            .draw()?;
        let line = |f: fn(&core::Sample) -> u64| {
            samples
                .iter()
                .map(move |x| (x.tokens as f64 / 1e3, f(x) as f64 / 1e6))
                .collect::<Vec<_>>()
        };
        chart
            .draw_series(LineSeries::new(line(|x| x.held), &BLUE))?
            .label("bytes held")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE));
        chart
            .draw_series(LineSeries::new(line(|x| x.f16_bytes), &RED))?
            .label("f16 bytes of the tokens held")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED));
        chart
            .configure_series_labels()
            .background_style(WHITE)
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    Ok(())
}
