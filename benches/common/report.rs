//! What the GPU benches share besides sizes and statistics: timestamp pairs around arbitrary
//! recorded work, the CPU-adapter warning, and the `--json` / `--plot` outputs.

use std::path::{Path, PathBuf};

use kvpack::{Context, gpu};

/// Printed and stored whenever the adapter is a CPU (lavapipe, SwiftShader, llvmpipe).
pub const CPU_ADAPTER_NOTE: &str = "times on a CPU adapter mean nothing";

/// Adapter line and whether the adapter is a CPU.
pub fn adapter(ctx: &Context) -> (String, String, bool) {
    let desc = ctx.describe();
    match desc.gpu.as_ref() {
        Some(g) => (
            format!("{} ({}, {})", g.adapter, g.backend, g.device_type),
            g.device_type.clone(),
            g.device_type == "Cpu",
        ),
        None => ("?".into(), "?".into(), false),
    }
}

/// Timestamp queries: a (begin, end) pair per slot, written by empty compute passes around
/// whatever is recorded between them (wgpu-core records an empty pass's timestamp writes; on
/// Vulkan both are `vkCmdWriteTimestamp(BOTTOM_OF_PIPE)`, the end one after all earlier
/// commands).
pub struct Stamps {
    pub set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    period_ns: f64,
    pairs: u32,
}

/// An empty compute pass that writes one timestamp (at its beginning or its end).
pub fn stamp(enc: &mut wgpu::CommandEncoder, set: &wgpu::QuerySet, index: u32, begin: bool) {
    let _pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: Some("bench timestamp"),
        timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
            query_set: set,
            beginning_of_pass_write_index: begin.then_some(index),
            end_of_pass_write_index: (!begin).then_some(index),
        }),
    });
}

impl Stamps {
    pub fn new(ctx: &Context, pairs: usize) -> kvpack::Result<Self> {
        let period_ns = kvpack::gpu::timing::timestamp_period_ns(ctx)?;
        let device = ctx.device().expect("checked in main");
        let pairs = pairs.max(1) as u32;
        let set = device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("bench timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: 2 * pairs,
        });
        let resolve = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("bench timestamps resolve"),
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

    pub fn pairs(&self) -> usize {
        self.pairs as usize
    }

    /// Submits what `record` records, alone, between timestamps `2·slot` and `2·slot + 1`,
    /// and waits for it.
    pub fn time(
        &self,
        ctx: &Context,
        slot: u32,
        record: impl FnOnce(&mut wgpu::CommandEncoder) -> kvpack::Result<()>,
    ) -> kvpack::Result<()> {
        gpu::submit_blocking(ctx, "bench timed call", |enc| {
            stamp(enc, &self.set, 2 * slot, true);
            record(enc)?;
            stamp(enc, &self.set, 2 * slot + 1, false);
            Ok(())
        })
    }

    /// ns of the first `n` (begin, end) pairs.
    pub fn read(&self, ctx: &Context, n: usize) -> kvpack::Result<Vec<f64>> {
        let queries = 2 * (n as u32).min(self.pairs);
        if queries == 0 {
            return Ok(Vec::new());
        }
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

/// One arm's row in the JSON output.
#[derive(Clone, Debug, Default)]
pub struct ArmRow {
    pub name: String,
    /// "copy", "keys", "values", "bitpack", "attend", "append", ...
    pub kind: String,
    pub method: Option<String>,
    /// The kernel path (`wgsl-subgroup`, ...), where the arm has one.
    pub path: Option<String>,
    /// Free-form variant (`fused`, `unfused 8 passes`, `G=128`, ...).
    pub variant: Option<String>,
    /// An A-vs-A twin: the same case as the arm named without the ` (A')` suffix.
    pub twin: bool,
    /// Context length (tokens), where the arm has one.
    pub t: Option<usize>,
    /// Query rows (attention).
    pub tq: Option<usize>,
    /// Bytes the GB/s figure counts.
    pub bytes: u64,
    pub median_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    pub samples: usize,
    /// Every timed round (ns, in the order timed): `bench_report`'s sync test recomputes
    /// the median, min, max, GB/s and % of roofline from them.
    pub samples_ns: Vec<f64>,
    /// The copy arm the roofline % refers to, and the %.
    pub roofline: Option<String>,
    pub pct_roofline: Option<f64>,
}

impl ArmRow {
    /// A row back from the `arms` of a report's JSON (what [`Report::write_json`] wrote);
    /// None where a field is missing or of the wrong type.
    pub fn from_json(v: &serde_json::Value) -> Option<ArmRow> {
        let text = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
        let size = |k: &str| v.get(k).and_then(|x| x.as_u64()).map(|x| x as usize);
        let num = |k: &str| v.get(k).and_then(|x| x.as_f64());
        Some(ArmRow {
            name: text("name")?,
            kind: text("kind")?,
            method: text("method"),
            path: text("path"),
            variant: text("variant"),
            twin: v.get("twin")?.as_bool()?,
            t: size("T"),
            tq: size("Tq"),
            bytes: v.get("bytes")?.as_u64()?,
            median_us: num("median_us")?,
            min_us: num("min_us")?,
            max_us: num("max_us")?,
            samples: size("samples")?,
            samples_ns: v
                .get("samples_ns")?
                .as_array()?
                .iter()
                .filter_map(|x| x.as_f64())
                .collect(),
            roofline: text("roofline_arm"),
            pct_roofline: num("pct_roofline"),
        })
    }

    pub fn gbs(&self) -> f64 {
        self.bytes as f64 / (self.median_us * 1e3)
    }
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "kind": self.kind,
            "method": self.method,
            "path": self.path,
            "variant": self.variant,
            "twin": self.twin,
            "T": self.t,
            "Tq": self.tq,
            "bytes": self.bytes,
            "median_us": self.median_us,
            "min_us": self.min_us,
            "max_us": self.max_us,
            "spread_pct": 100.0 * (self.max_us - self.min_us) / self.median_us,
            "samples": self.samples,
            "samples_ns": self.samples_ns,
            "GB_per_s": self.gbs(),
            "roofline_arm": self.roofline,
            "pct_roofline": self.pct_roofline,
        })
    }
}

/// Everything a bench writes to `--json`.
pub struct Report {
    pub bench: &'static str,
    pub adapter: String,
    pub device_type: String,
    pub cpu_adapter: bool,
    pub quick: bool,
    pub rounds: usize,
    pub warmup: usize,
    pub l2_bytes: u64,
    pub arms: Vec<ArmRow>,
    /// (copy arm, (max − min) / median in %).
    pub noise_floor: Vec<(String, f64)>,
    /// Bench-specific summaries (speedups, append shares).
    pub extra: serde_json::Value,
    pub total_s: f64,
}

impl Report {
    pub fn write_json(&self, path: &Path) -> Result<(), String> {
        let args: Vec<String> = std::env::args().collect();
        let v = serde_json::json!({
            "bench": self.bench,
            "command": args.join(" "),
            "adapter": self.adapter,
            "device_type": self.device_type,
            "note": self.cpu_adapter.then_some(CPU_ADAPTER_NOTE),
            "mode": if self.quick { "quick" } else { "full" },
            "rounds": self.rounds,
            "warmup": self.warmup,
            "assumed_l2_bytes": self.l2_bytes,
            "unix_time": std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            "total_s": self.total_s,
            "noise_floor_pct": self.noise_floor.iter()
                .map(|(n, p)| serde_json::json!({"arm": n, "spread_pct": p}))
                .collect::<Vec<_>>(),
            "arms": self.arms.iter().map(ArmRow::json).collect::<Vec<_>>(),
            "summary": self.extra,
        });
        let text = serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n")
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

/// One line of a plot: (x, median µs, % of roofline) points.
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64, Option<f64>)>,
}

/// Lines against T from a report's rows (a run's, or its JSON's through [`read_rows`]): the
/// rows `label` names (None: left out), one line per label; A-vs-A twins and copies are left
/// out, and lines of one point dropped.
pub fn series_by(rows: &[ArmRow], label: impl Fn(&ArmRow) -> Option<String>) -> Vec<Series> {
    let mut series: Vec<Series> = Vec::new();
    for r in rows.iter().filter(|r| !r.twin && r.kind != "copy") {
        let (Some(label), Some(t)) = (label(r), r.t) else {
            continue;
        };
        let pt = (t as f64, r.median_us, r.pct_roofline);
        match series.iter_mut().find(|s| s.label == label) {
            Some(s) => s.points.push(pt),
            None => series.push(Series {
                label,
                points: vec![pt],
            }),
        }
    }
    series.retain(|s| s.points.len() > 1);
    series
}

/// `gpu_attend`'s lines: one per (method, Tq, path, variant) of its attention arms.
pub fn attend_series(rows: &[ArmRow]) -> Vec<Series> {
    series_by(rows, |r| {
        let (Some(method), Some(tq)) = (&r.method, r.tq) else {
            return None;
        };
        (r.kind == "attend").then(|| {
            format!(
                "{method} Tq={tq} [{}]{}",
                r.path.as_deref().unwrap_or(""),
                r.variant
                    .as_ref()
                    .map(|v| format!(" ({v})"))
                    .unwrap_or_default()
            )
        })
    })
}

/// A report's JSON (what [`Report::write_json`] wrote) read back: the whole value and its
/// arms as rows.
pub fn read_rows(json: &Path) -> Result<(serde_json::Value, Vec<ArmRow>), String> {
    let text = std::fs::read_to_string(json)
        .map_err(|e| format!("cannot read {}: {e}", json.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", json.display()))?;
    let rows = v["arms"]
        .as_array()
        .ok_or_else(|| format!("{}: no `arms` array", json.display()))?
        .iter()
        .enumerate()
        .map(|(i, a)| {
            ArmRow::from_json(a).ok_or_else(|| format!("{}: arm {i} is incomplete", json.display()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((v, rows))
}

/// With `--replot JSON PNG` in the arguments: `draw(json, png)`, its outcome printed (exit 2
/// on an error), and true; else false (the bench runs).
pub fn replotted(bench: &str, draw: impl Fn(&Path, &Path) -> Result<(), String>) -> bool {
    let Some(r) = replot_args() else {
        return false;
    };
    match r.and_then(|(json, png)| draw(&json, &png).map(|()| png)) {
        Ok(png) => println!("wrote {}", png.display()),
        Err(e) => {
            eprintln!("{bench}: {e}");
            std::process::exit(2);
        }
    }
    true
}

/// `--replot JSON PNG` in a bench's arguments: (JSON, PNG), or an error where a path is
/// missing; None without the flag.
pub fn replot_args() -> Option<Result<(PathBuf, PathBuf), String>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let i = args.iter().position(|a| a == "--replot")?;
    Some(match (args.get(i + 1), args.get(i + 2)) {
        (Some(j), Some(p)) => Ok((j.into(), p.into())),
        _ => Err("--replot needs a JSON path and a PNG path".into()),
    })
}

/// Two panels against `x_desc` (log scale): median time (log scale) and % of the copy
/// roofline. `note` (the CPU-adapter warning) goes under the title.
pub fn plot(
    path: &Path,
    title: &str,
    x_desc: &str,
    series: &[Series],
    note: Option<&str>,
) -> Result<(), String> {
    use plotters::prelude::*;
    use plotters::style::FontStyle;

    let err = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| err(&"the embedded font is invalid"))?;
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1, mut p1) = (f64::MAX, 0f64, f64::MAX, 0f64, 1f64);
    for &(x, y, p) in pts() {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
        if let Some(p) = p {
            p1 = p1.max(p);
        }
    }
    if x1 <= 0.0 {
        return Err(err(&"nothing to plot"));
    }
    let (x0, x1) = (x0 / 1.4, x1 * 1.4);
    let (y0, y1) = (y0 / 1.5, y1 * 1.5);
    let p1 = (p1 * 1.15).min(120.0);

    // The legend goes below the two panels (two columns), where it covers no data.
    let legend_rows = series.len().div_ceil(2) as u32;
    let legend_h = 24 * legend_rows + 16;
    let root = BitMapBackend::new(path, (1400, 620 + legend_h)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let caption = match note {
        Some(n) => format!("{title} — {n}"),
        None => title.to_string(),
    };
    let root = root
        .titled(&caption, ("sans-serif", 17))
        .map_err(|e| err(&e))?;
    let (panels, legend) = root.split_vertically(620 - 27);
    let (left, right) = panels.split_horizontally(700);
    let colors = [
        RGBColor(40, 90, 180),
        RGBColor(200, 60, 60),
        RGBColor(40, 150, 70),
        RGBColor(150, 80, 170),
        RGBColor(220, 140, 20),
        RGBColor(20, 160, 170),
        RGBColor(120, 120, 120),
        RGBColor(0, 0, 0),
        RGBColor(240, 120, 160),
        RGBColor(120, 70, 20),
        RGBColor(100, 200, 240),
        RGBColor(180, 180, 40),
    ];
    // Series past the palette repeat its colours dashed.
    let style = |i: usize| (colors[i % colors.len()], (i / colors.len()) % 2 == 1);
    let mut time = ChartBuilder::on(&left)
        .caption("median GPU time (µs)", ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
        .map_err(|e| err(&e))?;
    time.configure_mesh()
        .x_desc(x_desc)
        .y_desc("µs")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| err(&e))?;
    let mut pct = ChartBuilder::on(&right)
        .caption("% of the copy roofline", ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d((x0..x1).log_scale(), 0f64..p1)
        .map_err(|e| err(&e))?;
    pct.configure_mesh()
        .x_desc(x_desc)
        .y_desc("%")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, s) in series.iter().enumerate() {
        let (c, dashed) = style(i);
        let t: Vec<(f64, f64)> = s.points.iter().map(|&(x, y, _)| (x, y)).collect();
        let p: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter_map(|&(x, _, p)| p.map(|p| (x, p)))
            .collect();
        if dashed {
            time.draw_series(DashedLineSeries::new(t.clone(), 8, 5, c.stroke_width(2)))
                .map_err(|e| err(&e))?;
            pct.draw_series(DashedLineSeries::new(p.clone(), 8, 5, c.stroke_width(2)))
                .map_err(|e| err(&e))?;
        } else {
            time.draw_series(LineSeries::new(t.clone(), c.stroke_width(2)))
                .map_err(|e| err(&e))?;
            pct.draw_series(LineSeries::new(p.clone(), c.stroke_width(2)))
                .map_err(|e| err(&e))?;
        }
        time.draw_series(t.iter().map(|&q| Circle::new(q, 4, c.filled())))
            .map_err(|e| err(&e))?;
        pct.draw_series(p.iter().map(|&q| Circle::new(q, 4, c.filled())))
            .map_err(|e| err(&e))?;
    }
    for (i, s) in series.iter().enumerate() {
        let (c, dashed) = style(i);
        let x = 40 + 690 * (i as i32 % 2);
        let y = 12 + 24 * (i as i32 / 2);
        let line = if dashed {
            vec![
                (x, y),
                (x + 8, y),
                (x + 13, y),
                (x + 21, y),
                (x + 26, y),
                (x + 34, y),
            ]
        } else {
            vec![(x, y), (x + 34, y)]
        };
        if dashed {
            for seg in line.chunks(2) {
                legend
                    .draw(&PathElement::new(seg.to_vec(), c.stroke_width(2)))
                    .map_err(|e| err(&e))?;
            }
        } else {
            legend
                .draw(&PathElement::new(line, c.stroke_width(2)))
                .map_err(|e| err(&e))?;
        }
        legend
            .draw(&Circle::new((x + 17, y), 4, c.filled()))
            .map_err(|e| err(&e))?;
        legend
            .draw(&Text::new(
                s.label.clone(),
                (x + 44, y - 8),
                ("sans-serif", 14),
            ))
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
