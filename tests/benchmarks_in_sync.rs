//! BENCHMARKS.md's generated tables are exactly what `benches/bench_report.rs` makes of the
//! committed JSON in `benches/results/h200/` (and, between `@h100` markers, in
//! `benches/results/h100/`): no number in them was typed or edited by hand,
//! and no result file was replaced without regenerating the report.

#[path = "../benches/bench_report.rs"]
#[allow(dead_code, unreachable_pub)]
mod bench_report;

use std::path::Path;

#[test]
fn benchmarks_md_matches_its_json() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let published = std::fs::read_to_string(root.join("BENCHMARKS.md")).expect("BENCHMARKS.md");
    let out = std::env::temp_dir().join(format!("kvpack-benchmarks-{}.md", std::process::id()));
    std::fs::write(&out, &published).expect("temp copy");
    // Relative, as the report was generated (cargo runs tests in the package root); the
    // path is printed into the report.
    assert_eq!(std::env::current_dir().expect("cwd"), root);
    bench_report::run(Path::new("benches/results/h200"), &out).expect("bench_report");
    // The H100's full run: its header, targets and figures, between `@h100` markers.
    bench_report::run_blocks(
        Path::new("benches/results/h100"),
        &out,
        Some(&["header", "targets", "figures"]),
        Some("h100"),
    )
    .expect("bench_report (h100)");
    let regenerated = std::fs::read_to_string(&out).expect("regenerated");
    let _ = std::fs::remove_file(&out);
    if regenerated != published {
        let line = published
            .lines()
            .zip(regenerated.lines())
            .position(|(a, b)| a != b)
            .map_or(
                published.lines().count().min(regenerated.lines().count()),
                |i| i,
            );
        panic!(
            "BENCHMARKS.md differs from what bench_report makes of benches/results/h200 and h100 at line {}:\n  published:   {:?}\n  regenerated: {:?}\n(run `cargo bench --bench bench_report -- --results benches/results/h200`, then with `--results benches/results/h100 --only header,targets,figures --tag h100`)",
            line + 1,
            published.lines().nth(line).unwrap_or(""),
            regenerated.lines().nth(line).unwrap_or("")
        );
    }
}

/// The committed results in the arm format (`benches/common/report.rs`) whose arms carry no
/// per-round samples: written before the JSON kept them (issue 19 point 6). Their derived
/// numbers are still checked against their medians; a file not listed here must carry
/// `samples_ns` on every arm, and one listed here that gains samples must leave the list.
const WITHOUT_SAMPLES: &[&str] = &[
    "benches/results/h200-final-gpu_attend.json",
    "benches/results/h200-final-gpu_kivi.json",
    "benches/results/h200-session2/gpu_attend.json",
    "benches/results/h200-session2/gpu_kivi.json",
    "benches/results/h200-session3/gpu_attend-decode-loops.json",
    "benches/results/h200-session3/gpu_attend-decode-throttled-unroll-but-kch.json",
    "benches/results/h200-session3/gpu_attend-decode-throttled-unrolled.json",
    "benches/results/h200-session3/gpu_attend-decode-unrolled.json",
    "benches/results/h200-session3/gpu_attend-first-core.json",
    "benches/results/h200-2026-12-01/gpu_attend.json",
    "benches/results/h200-2026-12-01/gpu_kivi.json",
    "benches/results/h200-session3-final/gpu_attend.json",
    "benches/results/h200-session3-final/gpu_kivi.json",
    "benches/results/h200-session4/run1/attend-decode.json",
    "benches/results/h200-session4/run1/kivi-new-1.json",
    "benches/results/h200-session4/run1/kivi-new-2.json",
    "benches/results/h200-session4/run1/kivi-prev-1.json",
    "benches/results/h200-session4/run1/kivi-prev-2.json",
    "benches/results/h200-session4/run2/kivi-new-1.json",
    "benches/results/h200-session4/run2/kivi-new-2.json",
    "benches/results/h200-session4/run2/kivi-prev-1.json",
    "benches/results/h200-session4/run2/kivi-prev-2.json",
    "benches/results/h200-session4/run2/kivi-rolled-1.json",
    "benches/results/h200-session4/run2/kivi-rolled-2.json",
    "benches/results/h200-session4/run3/kivi-new-1.json",
    "benches/results/h200-session4/run3/kivi-new-2.json",
    "benches/results/h200-session4/run3/kivi-prev-1.json",
    "benches/results/h200-session4/run3/kivi-prev-2.json",
    "benches/results/rejected-fused-ring/gpu_attend.json",
    "benches/results/rejected-fused-ring/gpu_kivi.json",
];

fn json_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read_dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            json_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "json") {
            out.push(p);
        }
    }
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

/// Median, min and max of `v` (the benches' `common::stats`, written again here).
fn median_min_max(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let med = if n % 2 == 1 {
        s[n / 2]
    } else {
        0.5 * (s[n / 2 - 1] + s[n / 2])
    };
    (med, s[0], s[n - 1])
}

/// Checks one arm-format result: per arm, median/min/max/count from `samples_ns` where present,
/// then GB/s, spread and % of roofline from the median (and the roofline arm's). Returns
/// (arms, arms with samples) or the first disagreement.
fn check_arms(doc: &serde_json::Value) -> Result<(usize, usize), String> {
    let arms = doc["arms"].as_array().ok_or("no `arms` array")?;
    let f = |a: &serde_json::Value, k: &str| -> Result<f64, String> {
        a[k].as_f64()
            .ok_or_else(|| format!("arm {}: `{k}` is not a number", a["name"]))
    };
    let gbs_of = |a: &serde_json::Value| -> Result<f64, String> {
        Ok(f(a, "bytes")? / (f(a, "median_us")? * 1e3))
    };
    let mut sampled = 0;
    for a in arms {
        let name = &a["name"];
        let (med, lo, hi) = (f(a, "median_us")?, f(a, "min_us")?, f(a, "max_us")?);
        if let Some(s) = a.get("samples_ns") {
            let s: Vec<f64> = s
                .as_array()
                .ok_or_else(|| format!("arm {name}: samples_ns is not an array"))?
                .iter()
                .map(|x| {
                    x.as_f64()
                        .ok_or_else(|| format!("arm {name}: a sample is not a number"))
                })
                .collect::<Result<_, _>>()?;
            if s.is_empty() || s.len() as f64 != f(a, "samples")? {
                return Err(format!(
                    "arm {name}: {} samples, `samples` says {}",
                    s.len(),
                    a["samples"]
                ));
            }
            let (m, mn, mx) = median_min_max(&s);
            for (what, got, want) in [
                ("median_us", med, m),
                ("min_us", lo, mn),
                ("max_us", hi, mx),
            ] {
                if !close(got, want / 1e3) {
                    return Err(format!(
                        "arm {name}: {what} {got} but its samples give {}",
                        want / 1e3
                    ));
                }
            }
            sampled += 1;
        }
        if !(lo <= med && med <= hi) {
            return Err(format!("arm {name}: median {med} outside [{lo}, {hi}]"));
        }
        let gbs = gbs_of(a)?;
        if !close(f(a, "GB_per_s")?, gbs) {
            return Err(format!(
                "arm {name}: GB_per_s {} but bytes / median is {gbs}",
                a["GB_per_s"]
            ));
        }
        if !close(f(a, "spread_pct")?, 100.0 * (hi - lo) / med) {
            return Err(format!(
                "arm {name}: spread_pct {} disagrees",
                a["spread_pct"]
            ));
        }
        if let Some(pct) = a["pct_roofline"].as_f64() {
            let roof = a["roofline_arm"]
                .as_str()
                .ok_or_else(|| format!("arm {name}: % of roofline without a roofline arm"))?;
            let r = arms
                .iter()
                .find(|x| x["name"] == roof)
                .ok_or_else(|| format!("arm {name}: roofline arm {roof} is absent"))?;
            let want = 100.0 * gbs / gbs_of(r)?;
            if !close(pct, want) {
                return Err(format!(
                    "arm {name}: pct_roofline {pct} but GB/s over {roof}'s is {want}"
                ));
            }
        }
    }
    Ok((arms.len(), sampled))
}

#[test]
fn bench_json_numbers_follow_from_their_samples() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    json_files(&root.join("benches/results"), &mut files);
    files.sort();
    let mut listed_seen = Vec::new();
    let mut checked = 0;
    for p in &files {
        let rel = p
            .strip_prefix(root)
            .expect("under the root")
            .to_string_lossy()
            .replace('\\', "/");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(p).expect("read")).expect("JSON");
        if doc.get("arms").is_none() {
            continue; // evals, calibration reports, the PyTorch baseline: not arm results
        }
        let (arms, sampled) = check_arms(&doc).unwrap_or_else(|e| panic!("{rel}: {e}"));
        checked += 1;
        if WITHOUT_SAMPLES.contains(&rel.as_str()) {
            assert_eq!(
                sampled, 0,
                "{rel} now has samples: take it off WITHOUT_SAMPLES"
            );
            listed_seen.push(rel.clone());
            eprintln!("{rel}: {arms} arms, no samples (derived numbers checked against medians)");
        } else {
            assert_eq!(
                sampled, arms,
                "{rel}: {sampled} of {arms} arms carry samples_ns (new results must keep every round)"
            );
            eprintln!("{rel}: {arms} arms, medians recomputed from their samples");
        }
    }
    assert_eq!(
        listed_seen.len(),
        WITHOUT_SAMPLES.len(),
        "WITHOUT_SAMPLES names files that do not exist: {:?}",
        WITHOUT_SAMPLES
            .iter()
            .filter(|f| !listed_seen.iter().any(|s| s == *f))
            .collect::<Vec<_>>()
    );
    assert!(checked > 0, "no arm results found");
}

/// The check itself fails on an edited median: with samples (the median no longer follows
/// from them) and without (GB/s and % of roofline no longer follow from it).
#[test]
fn an_edited_median_is_caught() {
    let doc = serde_json::json!({"arms": [
        {"name": "copy", "bytes": 1000, "median_us": 2.0, "min_us": 1.0, "max_us": 3.0,
         "spread_pct": 100.0, "samples": 3, "samples_ns": [3000.0, 1000.0, 2000.0],
         "GB_per_s": 0.5, "roofline_arm": null, "pct_roofline": null},
        {"name": "k", "bytes": 500, "median_us": 2.0, "min_us": 2.0, "max_us": 2.0,
         "spread_pct": 0.0, "samples": 2, "samples_ns": [2000.0, 2000.0],
         "GB_per_s": 0.25, "roofline_arm": "copy", "pct_roofline": 50.0}
    ]});
    assert_eq!(check_arms(&doc), Ok((2, 2)));
    let mut edited = doc.clone();
    edited["arms"][1]["median_us"] = 1.9.into();
    edited["arms"][1]["min_us"] = 1.9.into();
    let e = check_arms(&edited).expect_err("an edited median");
    assert!(e.contains("median_us"), "{e}");
    // Without samples, the same edit breaks GB/s.
    edited["arms"][1]
        .as_object_mut()
        .unwrap()
        .remove("samples_ns");
    let e = check_arms(&edited).expect_err("an edited median without samples");
    assert!(e.contains("GB_per_s"), "{e}");
    // An edited roofline median moves every % of roofline.
    let mut roof = doc.clone();
    roof["arms"][0]
        .as_object_mut()
        .unwrap()
        .remove("samples_ns");
    roof["arms"][0]["median_us"] = 2.5.into();
    roof["arms"][0]["GB_per_s"] = 0.4.into();
    roof["arms"][0]["spread_pct"] = 80.0.into();
    let e = check_arms(&roof).expect_err("an edited roofline median");
    assert!(e.contains("pct_roofline"), "{e}");
}

/// The decode numbers the README's speed paragraph quotes are the generated decode table's
/// (BENCHMARKS.md, `generated:decode`): the medians of KIVI-4 and f16 (wgsl-subgroup) at 32k
/// and 128k rounded to whole µs, PyTorch SDPA's, and the range of "× slower than SDPA" over
/// those four. The other numbers of that paragraph (quantization's % of roofline and its
/// speedups, prefill's) are not checked here.
#[test]
fn readme_decode_numbers_match_the_generated_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bench = std::fs::read_to_string(root.join("BENCHMARKS.md")).expect("BENCHMARKS.md");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let block = bench
        .split("<!-- generated:decode -->")
        .nth(1)
        .and_then(|b| b.split("<!-- /generated:decode -->").next())
        .expect("the generated decode table");
    // (median µs, PyTorch µs) of a row `| T | method | median (min–max) | ... | SDPA µs | ... |`.
    let row = |t: &str, method: &str| -> (f64, f64) {
        let cells: Vec<&str> = block
            .lines()
            .map(|l| l.split('|').map(str::trim).collect::<Vec<_>>())
            .find(|c| c.len() > 8 && c[1] == t && c[2] == method)
            .unwrap_or_else(|| panic!("no decode row for {t} {method}"));
        let num = |s: &str| -> f64 {
            s.split_whitespace()
                .next()
                .and_then(|x| x.parse().ok())
                .unwrap_or_else(|| panic!("`{s}` is not a number"))
        };
        (num(cells[3]), num(cells[7]))
    };
    let (k32, p32) = row("32k", "kivi-4 [wgsl-subgroup]");
    let (k128, p128) = row("128k", "kivi-4 [wgsl-subgroup]");
    let (f32k, _) = row("32k", "f16 [wgsl-subgroup]");
    let (f128k, _) = row("128k", "f16 [wgsl-subgroup]");
    let ratios = [k32 / p32, k128 / p128, f32k / p32, f128k / p128];
    let lo = ratios.iter().copied().fold(f64::MAX, f64::min);
    let hi = ratios.iter().copied().fold(0f64, f64::max);
    let readme = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    for phrase in [
        format!(
            "{:.0} µs on KIVI-4 at 32k tokens and {:.0} µs at 128k (f16: {:.0} / {:.0} µs)",
            k32, k128, f32k, f128k
        ),
        format!("{lo:.1}–{hi:.1}× slower than PyTorch's fp16 SDPA ({p32:.0} / {p128:.0} µs)"),
    ] {
        assert!(
            readme.contains(&phrase),
            "README.md does not say \"{phrase}\" (what BENCHMARKS.md's decode table gives)"
        );
    }
}

/// The TurboQuant / QJL / Prod decode ratios the README's speed paragraph quotes are the
/// generated TurboQuant table's at 32k (BENCHMARKS.md, `generated:turboquant`): the range over
/// the TurboQuant-MSE and -RVQ rows, then the QJL row's and the Prod row's ratio.
#[test]
fn readme_turboquant_ratios_match_the_generated_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bench = std::fs::read_to_string(root.join("BENCHMARKS.md")).expect("BENCHMARKS.md");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let block = bench
        .split("<!-- generated:turboquant -->")
        .nth(1)
        .and_then(|b| b.split("<!-- /generated:turboquant -->").next())
        .expect("the generated turboquant table");
    // (method, ratio) of the decode rows `| method / kivi-N | 32k | µs | µs | R× ... |`.
    let rows: Vec<(String, f64)> = block
        .lines()
        .map(|l| l.split('|').map(str::trim).collect::<Vec<_>>())
        .filter(|c| c.len() > 5 && c[2] == "32k" && c[1].contains(" / kivi-"))
        .map(|c| {
            let r = c[5]
                .split('×')
                .next()
                .and_then(|x| x.parse().ok())
                .unwrap_or_else(|| panic!("`{}` is not a ratio", c[5]));
            (c[1].to_string(), r)
        })
        .collect();
    let tq: Vec<f64> = rows
        .iter()
        .filter(|(m, _)| m.starts_with("turboquant-mse") || m.starts_with("turboquant-rvq"))
        .map(|r| r.1)
        .collect();
    let one = |prefix: &str| -> f64 {
        rows.iter()
            .find(|(m, _)| m.starts_with(prefix))
            .unwrap_or_else(|| panic!("no 32k decode row for {prefix}"))
            .1
    };
    assert!(!tq.is_empty(), "no TurboQuant decode rows at 32k");
    let lo = tq.iter().copied().fold(f64::MAX, f64::min);
    let hi = tq.iter().copied().fold(0f64, f64::max);
    let phrase = format!(
        "TurboQuant decode is within {lo:.2}–{hi:.2}× of KIVI at about equal bits, QJL keys {:.2}×, TurboQuant-Prod keys {:.2}×",
        one("qjl:"),
        one("turboquant-prod:")
    );
    let readme = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        readme.contains(&phrase),
        "README.md does not say \"{phrase}\" (what BENCHMARKS.md's TurboQuant table gives)"
    );
}
