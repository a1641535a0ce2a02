//! Writes the generated tables of `BENCHMARKS.md` from the JSON the benches wrote: every
//! number in those tables comes from a file in the results directory, none is typed by hand.
//!
//! ```text
//! cargo bench --bench bench_report -- --results benches/results/h200 [--out BENCHMARKS.md]
//! cargo bench --bench bench_report -- --results benches/results/h100 --only header,targets,figures --tag h100
//! ```
//! Reads `gpu_kivi.json`, `gpu_attend.json` and, when present, `torch_baseline.json` (from
//! `benches/torch_baseline.py`). In `--out`, each block between `<!-- generated:NAME -->` and
//! `<!-- /generated:NAME -->` is replaced; everything else (the analysis) is left as it is.
//! `--only A,B` writes only those blocks; `--tag T` writes them between
//! `<!-- generated:NAME@T -->` markers instead (a second run's blocks beside the first's).
//! A missing file gets a skeleton with every block. Run without `--results` (as a plain
//! `cargo bench` does), it prints this usage and exits 0.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

#[path = "report_targets.rs"]
mod report_targets;

/// Generated blocks, in skeleton order.
const BLOCKS: [&str; 11] = [
    "header",
    "noise",
    "roofline",
    "kivi",
    "bitpack",
    "targets",
    "decode",
    "prefill",
    "append",
    "turboquant",
    "figures",
];

#[allow(dead_code)] // unused where tests/benchmarks_in_sync.rs includes this file
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut results = None;
    let mut out = PathBuf::from("BENCHMARKS.md");
    let mut only: Option<Vec<String>> = None;
    let mut tag: Option<String> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--results" => results = it.next().map(PathBuf::from),
            "--out" => out = it.next().map_or(out, PathBuf::from),
            "--only" => only = it.next().map(|l| l.split(',').map(String::from).collect()),
            "--tag" => tag = it.next().cloned(),
            "--bench" => {}
            other => eprintln!("bench_report: ignoring argument `{other}`"),
        }
    }
    let Some(results) = results else {
        println!(
            "bench_report: nothing to do; usage: cargo bench --bench bench_report -- --results DIR [--out BENCHMARKS.md]"
        );
        return;
    };
    let only: Option<Vec<&str>> = only
        .as_ref()
        .map(|l| l.iter().map(String::as_str).collect());
    if let Err(e) = run_blocks(&results, &out, only.as_deref(), tag.as_deref()) {
        eprintln!("bench_report: {e}");
        std::process::exit(1);
    }
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn run(results: &Path, out: &Path) -> Result<(), String> {
    run_blocks(results, out, None, None)
}

/// [`run`] for the blocks named in `only` (all where `None`; an unknown name is an error),
/// between markers `NAME@tag` where `tag` is given.
pub fn run_blocks(
    results: &Path,
    out: &Path,
    only: Option<&[&str]>,
    tag: Option<&str>,
) -> Result<(), String> {
    if let Some(bad) = only.and_then(|l| l.iter().find(|b| !BLOCKS.contains(b))) {
        return Err(format!("no block `{bad}` (blocks: {})", BLOCKS.join(", ")));
    }
    let kivi = read_json(&results.join("gpu_kivi.json"))?;
    let attend = read_json(&results.join("gpu_attend.json"))?;
    let torch_path = results.join("torch_baseline.json");
    let torch = if torch_path.exists() {
        Some(read_json(&torch_path)?)
    } else {
        println!(
            "bench_report: no {} (the PyTorch columns stay empty)",
            torch_path.display()
        );
        None
    };
    let r = Results::new(&kivi, &attend, torch.as_ref(), results);
    let mut blocks = BTreeMap::new();
    blocks.insert("header", r.header());
    blocks.insert("noise", r.noise());
    blocks.insert("roofline", r.roofline());
    blocks.insert("kivi", r.kivi());
    blocks.insert("bitpack", r.bitpack());
    blocks.insert("targets", r.targets());
    blocks.insert("decode", r.attention(1));
    blocks.insert("prefill", r.attention(64));
    blocks.insert("append", r.append());
    let tq_path = results.join("gpu_turboquant.json");
    blocks.insert(
        "turboquant",
        if tq_path.exists() {
            turboquant_block(&read_json(&tq_path)?)
        } else {
            format!("(no {}: run gpu_turboquant)", tq_path.display())
        },
    );
    blocks.insert("figures", r.figures());

    let mut doc = std::fs::read_to_string(out).unwrap_or_else(|_| {
        let mut s = String::from("# kvpack benchmarks\n\n");
        for b in BLOCKS {
            let _ = write!(s, "<!-- generated:{b} -->\n<!-- /generated:{b} -->\n\n");
        }
        s
    });
    blocks.retain(|name, _| only.is_none_or(|l| l.contains(name)));
    for (name, body) in &blocks {
        let name = tag.map_or_else(|| name.to_string(), |t| format!("{name}@{t}"));
        let (open, close) = (
            format!("<!-- generated:{name} -->"),
            format!("<!-- /generated:{name} -->"),
        );
        let a = doc
            .find(&open)
            .ok_or_else(|| format!("{}: no `{open}` marker", out.display()))?;
        let b = doc[a..]
            .find(&close)
            .map(|b| a + b)
            .ok_or_else(|| format!("{}: no `{close}` marker", out.display()))?;
        doc.replace_range(
            a + open.len()..b,
            &format!("\n{}\n", body.trim_end_matches('\n')),
        );
    }
    std::fs::write(out, doc).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    println!(
        "bench_report: wrote {} ({} blocks)",
        out.display(),
        blocks.len()
    );
    Ok(())
}

/// The `turboquant` block from gpu_turboquant.json: every quantize/encode arm against the
/// copy of matched size (`quantize_vs_copy`), and the decode ratios against KIVI at about equal
/// bits (`attend_vs_kivi`), ratios inside the run's A-vs-A floor marked. A row whose target
/// differs from the header's (VecInfer's: ≥ 30 % of the copy, ≤ 1.0× KIVI-4) states its own;
/// a run with VecInfer arms (its `vecinfer` entry) adds its calibration, each decode arm's
/// LUT precision and the arms the device could not run.
fn turboquant_block(v: &Value) -> String {
    let floor = Results::floor(v);
    let rows = v["rows"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let med = |arm: &str| {
        rows.iter()
            .find(|r| r["arm"] == arm)
            .and_then(|r| r["median_us"].as_f64())
            .unwrap_or(f64::NAN)
    };
    let mut s = format!(
        "{}; A-vs-A noise floor {floor:.1} %. H = 8, D = 128; decode: Hq = 32, Hkv = 8.\n\n",
        v["adapter"].as_str().unwrap_or("?")
    );
    s.push_str("| quantize / encode arm | median µs | % of the same-size copy (target ≥ 50) |\n");
    s.push_str("|---|---:|---:|\n");
    for q in v["quantize_vs_copy"].as_array().into_iter().flatten() {
        let arm = q["arm"].as_str().unwrap_or("?");
        let target = match q["target_pct"].as_f64() {
            Some(t) if t != 50.0 => format!(" (target ≥ {t:.0})"),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "| {arm} | {} | {:.0} %{target} |",
            us(med(arm)),
            q["pct_of_copy"].as_f64().unwrap_or(f64::NAN)
        );
    }
    s.push_str("\n| decode, method / KIVI | T | method µs | KIVI µs | ratio (target ≤ 1.2×) |\n");
    s.push_str("|---|---:|---:|---:|---:|\n");
    for a in v["attend_vs_kivi"].as_array().into_iter().flatten() {
        let f = |k: &str| a[k].as_f64().unwrap_or(f64::NAN);
        let target = match a["target_ratio"].as_f64() {
            Some(t) if (t - 1.2).abs() > 1e-9 => format!(" (target ≤ {t:.1}×)"),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "| {} / {} | {} | {} | {} | {}{target} |",
            a["method"].as_str().unwrap_or("?"),
            a["kivi"].as_str().unwrap_or("?"),
            tokens(a["tokens"].as_u64().unwrap_or(0)),
            us(f("method_us")),
            us(f("kivi_us")),
            Results::ratio(f("ratio"), floor)
        );
    }
    let vi = &v["vecinfer"];
    if vi.is_object() {
        let _ = write!(
            s,
            "\nVecInfer (`calib=F`): codebooks trained at bench start on {} tokens of synthetic \
             normal q/k/v ({:.0} s on the bench host's CPU): speed only, quality rows come from \
             `kvpack eval`.\n",
            vi["training_tokens"].as_u64().unwrap_or(0),
            vi["calibration_s"].as_f64().unwrap_or(f64::NAN)
        );
        for l in vi["layers"].as_array().into_iter().flatten() {
            let d = l["describe"].as_str().unwrap_or("");
            let lut = ["f16", "f32"]
                .into_iter()
                .find(|p| d.contains(&format!("GPU LUT {p}")))
                .unwrap_or("?");
            let _ = writeln!(
                s,
                "- {} T = {}: GPU LUT {lut}",
                l["method"].as_str().unwrap_or("?"),
                tokens(l["tokens"].as_u64().unwrap_or(0))
            );
        }
        for k in vi["skipped"].as_array().into_iter().flatten() {
            let _ = writeln!(
                s,
                "- {} T = {}: not run on this device: {}",
                k["method"].as_str().unwrap_or("?"),
                tokens(k["tokens"].as_u64().unwrap_or(0)),
                k["reason"].as_str().unwrap_or("?")
            );
        }
    }
    s
}

/// One timed arm of a bench JSON.
struct Arm<'a>(&'a Value);

impl Arm<'_> {
    fn s(&self, k: &str) -> &str {
        self.0[k].as_str().unwrap_or("")
    }
    fn f(&self, k: &str) -> Option<f64> {
        self.0[k].as_f64()
    }
    fn u(&self, k: &str) -> Option<u64> {
        self.0[k].as_u64()
    }
    fn med(&self) -> f64 {
        self.f("median_us").unwrap_or(f64::NAN)
    }
    fn twin(&self) -> bool {
        self.0["twin"].as_bool().unwrap_or(false)
    }
    /// "median (min–max)".
    fn time(&self) -> String {
        format!(
            "{} ({}–{})",
            us(self.med()),
            us(self.f("min_us").unwrap_or(f64::NAN)),
            us(self.f("max_us").unwrap_or(f64::NAN))
        )
    }
    fn gbs(&self) -> String {
        self.f("GB_per_s").map_or("–".into(), |g| {
            if g >= 10.0 {
                format!("{g:.0}")
            } else {
                format!("{g:.2}")
            }
        })
    }
    fn pct(&self) -> String {
        self.f("pct_roofline")
            .map_or("–".into(), |p| format!("{p:.1} %"))
    }
}

fn us(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x >= 1000.0 {
        format!("{x:.0}")
    } else if x >= 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn tokens(t: u64) -> String {
    if t >= 1024 && t.is_multiple_of(1024) {
        format!("{}k", t / 1024)
    } else {
        t.to_string()
    }
}

fn mib(b: u64) -> String {
    let m = b as f64 / (1 << 20) as f64;
    if m >= 1024.0 {
        format!("{:.0} GiB", m / 1024.0)
    } else if m >= 10.0 {
        format!("{m:.0} MiB")
    } else {
        format!("{m:.1} MiB")
    }
}

struct Results<'a> {
    kivi: &'a Value,
    attend: &'a Value,
    torch: Option<&'a Value>,
    dir: &'a Path,
}

impl<'a> Results<'a> {
    fn new(kivi: &'a Value, attend: &'a Value, torch: Option<&'a Value>, dir: &'a Path) -> Self {
        Self {
            kivi,
            attend,
            torch,
            dir,
        }
    }

    fn arms(v: &Value) -> impl Iterator<Item = Arm<'_>> {
        v["arms"].as_array().into_iter().flatten().map(Arm)
    }

    /// The noise floor of a bench (the largest A-vs-A figure), in %.
    fn floor(v: &Value) -> f64 {
        v["summary"]["noise_floor_pct"]
            .as_f64()
            .or_else(|| v["noise_floor_pct"].as_f64())
            .unwrap_or(0.0)
    }

    /// "x.xx×", or "x.xx× (noise)" when inside `floor` %.
    fn ratio(x: f64, floor: f64) -> String {
        if !x.is_finite() {
            "–".into()
        } else if 100.0 * (x - 1.0).abs() <= floor {
            format!("{x:.2}× (noise)")
        } else {
            format!("{x:.2}×")
        }
    }

    fn torch_row(&self, name: &str) -> Option<(f64, f64, f64)> {
        let rows = self.torch?["rows"].as_array()?;
        rows.iter().find(|r| r["arm"] == name).map(|r| {
            (
                r["median_us"].as_f64().unwrap_or(f64::NAN),
                r["min_us"].as_f64().unwrap_or(f64::NAN),
                r["max_us"].as_f64().unwrap_or(f64::NAN),
            )
        })
    }

    fn header(&self) -> String {
        let mut s = String::new();
        let date = |v: &Value| {
            v["unix_time"]
                .as_u64()
                .map_or("?".into(), |t| civil_date(t / 86_400))
        };
        let _ = writeln!(
            s,
            "Adapter: **{}**; measured {} (gpu_kivi) and {} (gpu_attend). Raw JSON, text and figures: `{}`.",
            self.attend["adapter"].as_str().unwrap_or("?"),
            date(self.kivi),
            date(self.attend),
            self.dir.display()
        );
        for v in [self.kivi, self.attend] {
            if let Some(note) = v["note"].as_str() {
                let _ = writeln!(s, "\n**{}: {note}**", v["bench"].as_str().unwrap_or("?"));
            }
        }
        let _ = writeln!(
            s,
            "\nExact commands (as run; the programs under `.carry*/` are release builds of `cargo bench --bench X`, copied to the GPU machine under the bench's name or a short one: `ga` gpu_attend, `gk` gpu_kivi):\n```"
        );
        for v in [self.kivi, self.attend] {
            let _ = writeln!(
                s,
                "{}    # {} rounds after {} warm-up, {:.0} s",
                v["command"].as_str().unwrap_or("?"),
                v["rounds"],
                v["warmup"],
                v["total_s"].as_f64().unwrap_or(0.0)
            );
        }
        if let Some(t) = self.torch {
            let _ = writeln!(
                s,
                "{}    # PyTorch {} on {}",
                t["command"]
                    .as_str()
                    .unwrap_or("python3 benches/torch_baseline.py"),
                t["torch"].as_str().unwrap_or("?"),
                t["device"].as_str().unwrap_or("?")
            );
        }
        s += "```\n";
        s
    }

    fn noise(&self) -> String {
        let mut s = String::from(
            "| bench | A-vs-A arm | median A µs | median A′ µs | observed | bootstrap 95 % |\n|---|---|---|---|---|---|\n",
        );
        let mut add = |bench: &str, v: &Value| {
            let pairs = v["summary"]["aa_pairs"]
                .as_array()
                .or_else(|| v["aa_pairs"].as_array());
            for p in pairs.into_iter().flatten() {
                let _ = writeln!(
                    s,
                    "| {bench} | {} | {} | {} | {:.1} % | {:.1} % |",
                    p["arm"].as_str().unwrap_or("?"),
                    p["median_a_us"].as_f64().map_or("–".into(), us),
                    p["median_a2_us"].as_f64().map_or("–".into(), us),
                    p["observed_pct"].as_f64().unwrap_or(f64::NAN),
                    p["bootstrap_p95_pct"].as_f64().unwrap_or(f64::NAN)
                );
            }
        };
        add("gpu_kivi", self.kivi);
        add("gpu_attend", self.attend);
        if let Some(t) = self.torch {
            add("torch_baseline", t);
        }
        let _ = write!(
            s,
            "\nNoise floor (the larger of the two figures, worst pair): gpu_kivi {:.1} %, gpu_attend {:.1} %{}. \
             A ratio within its bench's floor is marked \"(noise)\" below: it is no result.\n",
            Self::floor(self.kivi),
            Self::floor(self.attend),
            self.torch.map_or(String::new(), |t| format!(
                ", PyTorch {:.1} %",
                Self::floor(t)
            ))
        );
        s
    }

    /// The attention issue's goals against the runs (benches/report_targets.rs).
    fn targets(&self) -> String {
        let floors = format!(
            "Noise floors of these runs: gpu_attend {:.1} %, gpu_kivi {:.1} %{}.",
            Self::floor(self.attend),
            Self::floor(self.kivi),
            self.torch.map_or(String::new(), |t| format!(
                ", PyTorch {:.1} %",
                Self::floor(t)
            ))
        );
        report_targets::block(self.kivi, self.attend, self.torch, us, &floors)
    }

    fn roofline(&self) -> String {
        let mut s = String::from(
            "| bench | copy (read + write) | median µs (min–max) | GB/s | spread (max−min)/median |\n|---|---|---|---|---|\n",
        );
        for (bench, v) in [("gpu_kivi", self.kivi), ("gpu_attend", self.attend)] {
            for a in Self::arms(v).filter(|a| a.s("kind") == "copy") {
                let b = a.u("bytes").unwrap_or(0);
                if b < 16 << 20 {
                    continue;
                }
                let _ = writeln!(
                    s,
                    "| {bench} | {} | {} | {} | {:.0} % |",
                    mib(b),
                    a.time(),
                    a.gbs(),
                    a.f("spread_pct").unwrap_or(f64::NAN)
                );
            }
        }
        s
    }

    fn kivi(&self) -> String {
        let floor = Self::floor(self.kivi);
        let mut s = String::from(
            "| what | T | bits | fused µs (min–max) | GB/s | % roofline | unfused 8 passes µs | fused speedup | eager PyTorch µs | vs PyTorch |\n|---|---|---|---|---|---|---|---|---|---|\n",
        );
        let arms: Vec<Arm> = Self::arms(self.kivi).collect();
        let find = |kind: &str, variant: &str, t: u64, m: &str| {
            arms.iter().find(|a| {
                a.s("kind") == kind
                    && a.s("variant") == variant
                    && a.u("T") == Some(t)
                    && a.s("method") == m
                    && !a.twin()
            })
        };
        let mut ts: Vec<u64> = arms.iter().filter_map(|a| a.u("T")).collect();
        ts.sort_unstable();
        ts.dedup();
        for t in ts {
            for m in ["2-bit", "4-bit"] {
                for what in ["keys", "values"] {
                    let Some(f) = find(what, "fused", t, m) else {
                        continue;
                    };
                    let un = find(&format!("{what}_unfused"), "unfused 8 passes", t, m);
                    let bits = m.trim_end_matches("-bit");
                    let tr = self.torch_row(&format!("kivi {what} eager {m} T={t}"));
                    let _ = writeln!(
                        s,
                        "| {what} G=32 | {} | {bits} | {} | {} | {} | {} | {} | {} | {} |",
                        tokens(t),
                        f.time(),
                        f.gbs(),
                        f.pct(),
                        un.map_or("–".into(), |u| us(u.med())),
                        un.map_or("–".into(), |u| Self::ratio(u.med() / f.med(), floor)),
                        tr.map_or("–".into(), |r| us(r.0)),
                        tr.map_or("–".into(), |r| Self::ratio(r.0 / f.med(), floor)),
                    );
                    if what == "values" {
                        for g in arms.iter().filter(|a| {
                            a.s("kind") == "values"
                                && a.s("variant") == "G=128"
                                && a.u("T") == Some(t)
                                && a.s("method") == m
                        }) {
                            let _ = writeln!(
                                s,
                                "| values G=128 [{}] | {} | {bits} | {} | {} | {} | – | – | – | – |",
                                g.s("path"),
                                tokens(t),
                                g.time(),
                                g.gbs(),
                                g.pct()
                            );
                        }
                    }
                }
            }
        }
        s += "\nBytes = f16 input read + packed codes and (scale, lo) written (the unfused arm is \
              charged the same useful bytes; what its passes really move is in the JSON summary). \
              % roofline = against the copy whose bytes moved are nearest.\n";
        s
    }

    fn bitpack(&self) -> String {
        let mut s = String::from(
            "| b | codes | pack µs (min–max) | pack GB/s | % roofline | unpack µs (min–max) | unpack GB/s | % roofline |\n|---|---|---|---|---|---|---|---|\n",
        );
        let arms: Vec<Arm> = Self::arms(self.kivi).collect();
        for p in arms.iter().filter(|a| a.s("kind") == "bitpack") {
            let m = p.s("method");
            let u = arms
                .iter()
                .find(|a| a.s("kind") == "bitunpack" && a.s("method") == m);
            let n = p
                .s("name")
                .split(' ')
                .find_map(|w| w.strip_prefix("n="))
                .unwrap_or("?");
            let _ = writeln!(
                s,
                "| {} | {n} | {} | {} | {} | {} | {} | {} |",
                m.trim_end_matches("-bit"),
                p.time(),
                p.gbs(),
                p.pct(),
                u.map_or("–".into(), Arm::time),
                u.map_or("–".into(), Arm::gbs),
                u.map_or("–".into(), Arm::pct),
            );
        }
        s
    }

    /// Attention with `tq` query rows: one row per T, a column group per method.
    fn attention(&self, tq: u64) -> String {
        let floor = Self::floor(self.attend);
        let arms: Vec<Arm> = Self::arms(self.attend)
            .filter(|a| a.s("kind") == "attend" && a.u("Tq") == Some(tq) && !a.twin())
            .collect();
        let torch_name = |t: u64| {
            if tq == 1 {
                format!("sdpa fp16 decode T={t}")
            } else {
                format!("sdpa fp16 prefill64 T={t}")
            }
        };
        let mut s = String::from(
            "| T | method [path] | median µs (min–max) | GB/s | % roofline | vs f16 | PyTorch SDPA µs | vs PyTorch |\n|---|---|---|---|---|---|---|---|\n",
        );
        let mut ts: Vec<u64> = arms.iter().filter_map(|a| a.u("T")).collect();
        ts.sort_unstable();
        ts.dedup();
        for t in ts {
            let f16_arm = arms.iter().find(|a| {
                a.u("T") == Some(t) && a.s("method") == "f16" && a.s("variant").is_empty()
            });
            let f16 = f16_arm.map(Arm::med);
            let f16_path = f16_arm.map_or("", |a| a.s("path"));
            let mut torch = self.torch_row(&torch_name(t));
            if tq > 1 {
                // The faster of the two ways to say "causal, bottom-right" in PyTorch.
                if let Some(lr) = self.torch_row(&format!("sdpa fp16 prefill64 lower-right T={t}"))
                {
                    if torch.is_none_or(|m| lr.0 < m.0) {
                        torch = Some(lr);
                    }
                }
            }
            for a in arms.iter().filter(|a| a.u("T") == Some(t)) {
                let _ = writeln!(
                    s,
                    "| {} | {} [{}]{} | {} | {} | {} | {} | {} | {} |",
                    tokens(t),
                    a.s("method"),
                    a.s("path"),
                    if a.s("variant").is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", a.s("variant"))
                    },
                    a.time(),
                    a.gbs(),
                    a.pct(),
                    if a.s("method") == "f16"
                        && a.s("path") == f16_path
                        && a.s("variant").is_empty()
                    {
                        "baseline".into()
                    } else {
                        f16.map_or("–".into(), |f| Self::ratio(f / a.med(), floor))
                    },
                    torch.map_or("–".into(), |r| us(r.0)),
                    torch.map_or("–".into(), |r| Self::ratio(r.0 / a.med(), floor)),
                );
            }
        }
        let roof = self.attend["summary"]["roofline_copy_bytes"]
            .as_u64()
            .map_or("the largest".into(), |b| format!("a {} copy's", mib(b)));
        let _ = write!(
            s,
            "\nTq = {tq}, Hq = 32, Hkv = 8, D = 128, KIVI G = 32, R = 128. Bytes = cache payload + q; \
             % roofline = GB/s over {roof} bandwidth in the same run. \"vs\" columns: how many times \
             faster kvpack is (below 1: slower).{}\n",
            if tq > 1 {
                " PyTorch: the faster of a boolean bottom-right causal mask and `causal_lower_right`."
            } else {
                ""
            }
        );
        s
    }

    fn append(&self) -> String {
        let mut s = String::from(
            "| method | T | step µs | flush µs | grow µs | per token µs (mean) | decode attention µs | predicted share (bytes) | measured share |\n|---|---|---|---|---|---|---|---|---|\n",
        );
        let attend_bytes = |m: &str, t: u64| {
            Self::arms(self.attend)
                .find(|a| {
                    a.s("kind") == "attend"
                        && a.s("method") == m
                        && a.u("T") == Some(t)
                        && a.u("Tq") == Some(1)
                        && !a.twin()
                })
                .and_then(|a| a.u("bytes"))
        };
        for r in self.attend["summary"]["append_vs_attend"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let m = r["method"].as_str().unwrap_or("?");
            let t = r["T"].as_u64().unwrap_or(0);
            let g = r["G"].as_u64().unwrap_or(32) as f64;
            // Bytes an append moves per token: the f16 K/V row read from its staging buffer
            // and written into the cache; KIVI also re-reads a block's rows once per G tokens
            // (one row per token) and writes b-bit codes plus one (scale, lo) word per group
            // of keys (per G tokens) and of values (per token).
            let row = 2.0 * 8.0 * 128.0 * 2.0;
            let per_token_bytes = match m.strip_prefix("kivi-").and_then(|b| b.parse::<f64>().ok())
            {
                Some(bits) => 3.0 * row + row * bits / 16.0 + 2.0 * (8.0 * 128.0 / g) * 4.0,
                None => 2.0 * row,
            };
            let predicted =
                attend_bytes(m, t).map(|b| per_token_bytes / (per_token_bytes + b as f64));
            let x = |k: &str| r[k].as_f64().map_or("–".into(), us);
            let _ = writeln!(
                s,
                "| {m} | {} | {} | {} | {} | {} | {} | {} | {} |",
                tokens(t),
                x("step_median_us"),
                x("flush_median_us"),
                x("grow_median_us"),
                x("append_per_token_us"),
                x("attend_decode_median_us"),
                predicted.map_or("–".into(), |p| format!("{:.3} %", 100.0 * p)),
                r["append_share_of_step"]
                    .as_f64()
                    .map_or("–".into(), |p| format!("{:.1} %", 100.0 * p)),
            );
        }
        s += "\nstep / flush / grow: medians of single-token `KvLayer::encode_append` calls that \
              only wrote rows / quantized a KIVI block of 32 / grew a storage segment (history \
              copied on the device). Per token: the mean over every timed step (flushes and \
              growths amortized). Predicted share: the append's bytes over the append's plus \
              decode attention's bytes; measured: per token / (per token + decode attention).\n";
        s
    }

    fn figures(&self) -> String {
        let mut s = String::new();
        for f in ["gpu_attend.png", "gpu_kivi.png"] {
            let p = self.dir.join(f);
            if p.exists() {
                let _ = writeln!(s, "![{f}]({})\n", p.display());
            }
        }
        s
    }
}

/// `YYYY-MM-DD` of a day count since 1970-01-01 (proleptic Gregorian).
fn civil_date(days: u64) -> String {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}
