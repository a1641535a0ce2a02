//! `kvpack calibrate`: run a model over a text and write the calibration file of VecInfer
//! (λ and k-means codebooks per layer and KV head, docs/contracts/vecinfer.md) and Q-Filters
//! (the filters, docs/contracts/qfilters.md), with a progress bar on stderr and a JSON summary
//! on stdout (the Q-Filters orientation report per query head: majority and sum-of-signs rules
//! and where they disagree).

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kvpack::calib::train::{CalibOptions, Progress, calibrate_text};
use kvpack::cpu::vecinfer::Preset;
use kvpack::model::load::load_model;

/// What `kvpack calibrate` was asked.
pub struct Options {
    pub model: String,
    pub tokenizer: Option<PathBuf>,
    pub text: PathBuf,
    pub out: PathBuf,
    pub vecinfer: bool,
    pub qfilters: bool,
    pub bits: Vec<u32>,
    pub seed: u64,
    pub max_tokens: Option<usize>,
    pub chunk: usize,
}

/// Parses `--for vecinfer,qfilters`.
pub fn parse_for(s: &str) -> Result<(bool, bool), String> {
    let (mut v, mut q) = (false, false);
    for w in s.split(',').map(str::trim) {
        match w {
            "vecinfer" => v = true,
            "qfilters" => q = true,
            _ => return Err(format!("--for: unknown `{w}` (vecinfer, qfilters)")),
        }
    }
    Ok((v, q))
}

/// Runs the calibration and writes the file; returns the JSON summary.
pub fn run(opts: &Options) -> Result<serde_json::Value, String> {
    if opts.out.is_dir() {
        return Err(format!("{} is a directory", opts.out.display()));
    }
    let text = std::fs::read_to_string(&opts.text)
        .map_err(|e| format!("cannot read {}: {e}", opts.text.display()))?;
    let presets = if opts.vecinfer {
        opts.bits
            .iter()
            .map(|&b| Preset::for_bits(b))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?
    } else {
        Vec::new()
    };
    let t0 = Instant::now();
    let model = load_model(&opts.model, opts.tokenizer.as_deref()).map_err(|e| e.to_string())?;
    let copts = CalibOptions {
        seed: opts.seed,
        vecinfer: presets,
        qfilters: opts.qfilters,
        max_tokens: opts.max_tokens,
        chunk: opts.chunk,
        ..CalibOptions::default()
    };
    let bar = ProgressBar::with_draw_target(Some(1), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{msg:>9} [{bar:40}] {pos}/{len}, eta {eta}")
            .map_err(|e| e.to_string())?,
    );
    let stage = Mutex::new("");
    let progress = |p: Progress| {
        let mut s = stage.lock().unwrap_or_else(|e| e.into_inner());
        if *s != p.stage {
            *s = p.stage;
            bar.reset();
            bar.set_length(p.total as u64);
            bar.set_message(p.stage);
        }
        bar.set_position(p.done as u64);
    };
    let name = opts
        .text
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let cal = calibrate_text(model, &text, &name, &copts, &progress).map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    cal.write(&opts.out).map_err(|e| e.to_string())?;
    let m = &cal.meta;
    let mut out = serde_json::json!({
        "model": m.model.name,
        "layers": m.model.layers, "q_heads": m.model.q_heads, "kv_heads": m.model.kv_heads,
        "head_dim": m.model.head_dim,
        "text": m.text_name, "tokens": m.tokens, "seed": m.seed,
        "seconds": t0.elapsed().as_secs_f64(),
        "output": opts.out.display().to_string(),
    });
    if let Some(v) = &cal.vecinfer {
        let mean = |x: &Vec<usize>| x.iter().sum::<usize>() as f64 / x.len().max(1) as f64;
        out["vecinfer"] = serde_json::json!({
            "vectors": v.vectors,
            "mean_lloyd_iterations": v.iterations.iter().map(|(k, x)| (k.clone(), mean(x))).collect::<std::collections::BTreeMap<_, _>>(),
            "max_lloyd_iterations": v.iterations.iter().map(|(k, x)| (k.clone(), x.iter().copied().max().unwrap_or(0))).collect::<std::collections::BTreeMap<_, _>>(),
        });
    }
    if let Some(q) = &cal.qfilters {
        let disagree: Vec<_> = q
            .report
            .iter()
            .filter(|r| r.disagree())
            .map(|r| {
                serde_json::json!({"layer": r.layer, "query_head": r.head,
                "positive_fraction": r.positive_fraction, "majority_sign": r.majority_sign,
                "sum_sign": r.sum_sign})
            })
            .collect();
        out["qfilters"] = serde_json::json!({
            "rows": q.rows,
            "heads": q.report.len(),
            "per_head": q.report.iter().map(|r| serde_json::json!({
                "layer": r.layer, "query_head": r.head,
                "positive_fraction": r.positive_fraction,
                "majority_sign": r.majority_sign, "sum_sign": r.sum_sign,
                "sigma1_over_sigma2": r.sigma_ratio,
                "rules_disagree": r.disagree(),
            })).collect::<Vec<_>>(),
            "disagreements": disagree,
        });
    }
    Ok(out)
}
