//! `kvpack eval`: quality of each cache method on a real model, against the f16 cache.
//!
//! For every method a fresh [`Session`] decodes the text teacher-forced, one token at a time
//! (so caches flush exactly as in real decoding), and the next-token distribution of every
//! position is compared with the f16 run's (the reference, always run first): perplexity, its
//! change against f16, mean KL(p_f16 ‖ p_method) and top-1 agreement. Bits per value are
//! measured from the bytes the caches hold at the end (spare capacity included).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kvpack::model::Session;
use kvpack::model::load::{LoadedModel, load_model};
use kvpack::{Context, Method, PathChoice};
use safetensors::tensor::{Dtype, SafeTensors};

/// Where the tokens come from.
pub enum Source {
    /// A text file, encoded with the model's tokenizer.
    Text(PathBuf),
    /// A JSON array of ids, or a safetensors file with `token_ids`.
    Ids(PathBuf),
}

/// What `kvpack eval` was asked.
pub struct Options {
    pub model: String,
    pub tokenizer: Option<PathBuf>,
    pub source: Source,
    pub methods: Vec<String>,
    pub path: PathChoice,
    pub json: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    pub max_tokens: Option<usize>,
    /// Eviction policies: each adds a row `METHOD+POLICY` for every method.
    pub evict: Vec<String>,
    /// A PNG of perplexity against tokens held per KV head, one line per eviction policy.
    pub evict_plot: Option<PathBuf>,
}

/// One method's result.
pub struct Row {
    pub method: String,
    pub bits_per_value: f64,
    pub perplexity: f64,
    pub delta_pct: f64,
    pub kl: f64,
    pub top1: f64,
    /// Tokens held per KV head at the end, the mean over layers.
    pub tokens_held_per_head: f64,
    /// Bytes the caches hold at the end (all layers).
    pub bytes_held: u64,
    /// The eviction policy's name and budget, for rows under one.
    pub eviction: Option<(String, usize)>,
    /// Q-Filters rows: Spearman ρ per (layer, KV head) of the filter's scores with the
    /// attention mass each key receives (mean, worst) and the flipped filter's mean.
    pub spearman: Option<(f64, f64, f64)>,
    /// Q-Filters rows: the same ρ for filters calibrated on the evaluated text itself and for
    /// the mean logit from the later queries, each (mean, worst) (`eval_evict::Spearman`).
    pub spearman_references: Option<((f64, f64), (f64, f64))>,
}

/// Runs the evaluation: the table on stdout, the progress on stderr, the JSON and PNG files.
pub fn run(
    opts: &Options,
    context: impl Fn(PathChoice) -> kvpack::Result<Context>,
) -> Result<(), String> {
    // Everything that can be checked before the (long) decoding is checked first.
    let methods = parse_methods(&opts.methods, &opts.evict)?;
    if let Some(p) = &opts.json {
        check_output(p, None)?;
    }
    for p in opts.plot.iter().chain(&opts.evict_plot) {
        check_output(p, Some("png"))?;
    }
    let input = match &opts.source {
        Source::Text(p) => Input::Text(
            std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?,
        ),
        Source::Ids(p) => Input::Ids(read_ids(p)?),
    };

    let model = load_model(&opts.model, opts.tokenizer.as_deref()).map_err(|e| e.to_string())?;
    let mut ids = match input {
        Input::Ids(ids) => ids,
        Input::Text(text) => encode(&model, &text),
    };
    if let Some(n) = opts.max_tokens {
        ids.truncate(n);
    }
    check_ids(&model, &ids)?;

    let ctx = context(opts.path).map_err(|e| e.to_string())?;
    let weights = Arc::new(model.weights);
    let steps = ids.len() - 1;
    eprintln!(
        "kvpack eval: {} ({} layers, {} KV heads of {}), {} tokens ({steps} predictions), \
         methods {}, path {}",
        model.name,
        model.config.layers,
        model.config.kv_heads,
        model.config.head_dim,
        ids.len(),
        methods
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(","),
        opts.path
    );

    let bar = ProgressBar::with_draw_target(
        Some((methods.len() * steps) as u64),
        ProgressDrawTarget::stderr(),
    );
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:>14} [{bar:40}] {pos}/{len} tokens, {per_sec}, eta {eta}",
        )
        .map_err(|e| format!("internal: progress template: {e}"))?
        .progress_chars("=> "),
    );
    // The JSON is rewritten after every method: a long run stopped part-way keeps its rows.
    let mut save = |rows: &[Row]| -> Result<(), String> {
        match &opts.json {
            Some(p) => write_json(p, rows),
            None => Ok(()),
        }
    };
    let result = decode_all(&weights, &ctx, opts.path, &methods, &ids, &bar, &mut save);
    bar.finish_and_clear();
    let rows = result?;

    print_table(&model.name, opts.path, ids.len(), &rows);
    if let Some(p) = &opts.plot {
        plot(p, &model.name, ids.len(), opts.path, &rows)?;
    }
    if let Some(p) = &opts.evict_plot {
        super::eval_evict::plot(p, &model.name, ids.len(), &rows)?;
    }
    Ok(())
}

enum Input {
    Text(String),
    Ids(Vec<u32>),
}

/// Parses the method list; f16 (the reference) goes first, and is added when missing; each
/// eviction policy then adds `METHOD+POLICY` for every method.
fn parse_methods(names: &[String], evict: &[String]) -> Result<Vec<(String, Method)>, String> {
    let mut out: Vec<(String, Method)> = Vec::new();
    for name in names {
        let name = name.trim();
        if name.is_empty() {
            return Err("--method has an empty entry".into());
        }
        let m = Method::parse(name).map_err(|e| e.to_string())?;
        if out.iter().any(|(n, _)| n == name) {
            return Err(format!("method `{name}` is listed twice"));
        }
        out.push((name.to_string(), m));
    }
    if out.is_empty() {
        return Err("no --method given".into());
    }
    match out.iter().position(|(_, m)| m.is_f16()) {
        Some(0) => {}
        Some(i) => {
            let f16 = out.remove(i);
            out.insert(0, f16);
        }
        None => {
            eprintln!("kvpack eval: adding f16, the reference the others are compared with");
            out.insert(0, ("f16".into(), Method::f16()));
        }
    }
    let base = out.clone();
    for e in evict {
        let ev: kvpack::policy::Eviction =
            e.trim().parse().map_err(|e: kvpack::Error| e.to_string())?;
        for (name, m) in &base {
            if m.eviction().is_some() {
                continue;
            }
            out.push((
                format!("{name}+{}", e.trim()),
                m.with_eviction(Some(ev.clone())),
            ));
        }
    }
    Ok(out)
}

/// Fails early (before minutes of decoding) on an output that cannot be written.
fn check_output(p: &Path, ext: Option<&str>) -> Result<(), String> {
    if let Some(ext) = ext {
        let ok = p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case(ext));
        if !ok {
            return Err(format!("{} must end in .{ext}", p.display()));
        }
    }
    if p.is_dir() {
        return Err(format!("{} is a directory", p.display()));
    }
    let parent = p.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(d) = parent.filter(|d| !d.is_dir()) {
        return Err(format!(
            "cannot write {}: folder {} does not exist",
            p.display(),
            d.display()
        ));
    }
    Ok(())
}

/// Token ids from a JSON array, or from the `token_ids` tensor of a safetensors file.
fn read_ids(p: &Path) -> Result<Vec<u32>, String> {
    let bytes = std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    let is_json = match p.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("json") => true,
        Some(e) if e.eq_ignore_ascii_case("safetensors") => false,
        _ => bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'['),
    };
    if is_json {
        let v: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{} is not valid JSON: {e}", p.display()))?;
        let arr = v
            .as_array()
            .ok_or_else(|| format!("{}: expected a JSON array of token ids", p.display()))?;
        return arr
            .iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_u64()
                    .and_then(|x| u32::try_from(x).ok())
                    .ok_or_else(|| {
                        format!(
                            "{}: element {i} ({x}) is not a token id (an integer 0..2^32)",
                            p.display()
                        )
                    })
            })
            .collect();
    }
    let st = SafeTensors::deserialize(&bytes).map_err(|e| {
        format!(
            "{} is neither a JSON array nor a valid safetensors file: {e}",
            p.display()
        )
    })?;
    let view = st
        .tensor("token_ids")
        .map_err(|_| format!("{} has no tensor `token_ids`", p.display()))?;
    let shape = view.shape();
    if shape.len() > 1 && shape[..shape.len() - 1].iter().any(|&d| d != 1) {
        return Err(format!(
            "{}: `token_ids` has shape {shape:?}; expected [T]",
            p.display()
        ));
    }
    let data = view.data();
    let wide: Vec<i128> = match view.dtype() {
        Dtype::I32 => data
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]).into())
            .collect(),
        Dtype::U32 => data
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]).into())
            .collect(),
        Dtype::I64 => data
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap_or_default()).into())
            .collect(),
        Dtype::U64 => data
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()).into())
            .collect(),
        other => {
            return Err(format!(
                "{}: `token_ids` has dtype {other:?}; expected I32, U32, I64 or U64",
                p.display()
            ));
        }
    };
    wide.iter()
        .enumerate()
        .map(|(i, &x)| {
            u32::try_from(x)
                .map_err(|_| format!("{}: token_ids[{i}] = {x} is not a token id", p.display()))
        })
        .collect()
}

/// Encodes a text as the model was trained to see it: llama2.c tokenizers start with BOS (as
/// `run.c` does); the GPT-2 BPE of GGUF models adds none (as the SmolLM2 fixtures do not).
fn encode(model: &LoadedModel, text: &str) -> Vec<u32> {
    model.tokenizer.encode(text)
}

fn check_ids(model: &LoadedModel, ids: &[u32]) -> Result<(), String> {
    let c = &model.config;
    if ids.len() < 2 {
        return Err(format!(
            "{} token(s): perplexity needs at least two",
            ids.len()
        ));
    }
    if let Some((i, t)) = ids
        .iter()
        .enumerate()
        .find(|(_, t)| **t as usize >= c.vocab)
    {
        return Err(format!(
            "token id {t} (position {i}) is outside {}'s vocabulary of {}",
            model.name, c.vocab
        ));
    }
    // The last token is only predicted, never fed.
    if ids.len() - 1 > c.max_seq {
        return Err(format!(
            "{} tokens exceed {}'s maximum sequence length {} (use --max-tokens {})",
            ids.len(),
            model.name,
            c.max_seq,
            c.max_seq + 1
        ));
    }
    Ok(())
}

/// Natural-log softmax in f64 (max-subtracted).
fn log_softmax(logits: &[f32], out: &mut Vec<f64>) {
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = logits
        .iter()
        .map(|&v| (v as f64 - m).exp())
        .sum::<f64>()
        .ln()
        + m;
    out.clear();
    out.extend(logits.iter().map(|&v| v as f64 - lse));
}

/// KL(p ‖ q) from log-probabilities.
fn kl(lp: &[f64], lq: &[f64]) -> f64 {
    lp.iter()
        .zip(lq)
        .map(|(&a, &b)| {
            if a == f64::NEG_INFINITY {
                0.0
            } else {
                a.exp() * (a - b)
            }
        })
        .sum()
}

fn argmax(x: &[f32]) -> usize {
    kvpack::model::forward::argmax(x) as usize
}

/// Decodes `ids` through every method; `methods[0]` is f16.
fn decode_all(
    weights: &Arc<kvpack::model::Weights>,
    ctx: &Context,
    path: PathChoice,
    methods: &[(String, Method)],
    ids: &[u32],
    bar: &ProgressBar,
    save: &mut dyn FnMut(&[Row]) -> Result<(), String>,
) -> Result<Vec<Row>, String> {
    let c = &weights.config;
    let steps = ids.len() - 1;
    // The f16 run's logits of every position (f32, as the forward pass gives them).
    let mut reference: Vec<f32> = Vec::new();
    let mut ref_top: Vec<usize> = Vec::with_capacity(steps);
    let (mut lp, mut lq) = (Vec::new(), Vec::new());
    // Q-Filters rows: the f16 run records q and k for the Spearman check.
    let mut spearman = methods
        .iter()
        .any(|(_, m)| {
            matches!(
                m.eviction().map(|e| &e.policy),
                Some(kvpack::policy::Policy::QFilters { .. })
            )
        })
        .then(|| super::eval_evict::Spearman::new(c.heads, c.kv_heads, c.head_dim));
    let mut rows: Vec<Row> = Vec::with_capacity(methods.len());
    for (name, method) in methods {
        bar.set_message(name.clone());
        let is_ref = rows.is_empty();
        let mut s = Session::new(weights.clone(), ctx, method.clone(), path)
            .map_err(|e| format!("{name}: {e}"))?;
        if is_ref && spearman.is_some() {
            s.capture_qkv(true);
        }
        let t0 = Instant::now();
        let (mut nll, mut kl_sum, mut agree) = (0.0f64, 0.0f64, 0usize);
        for (i, w) in ids.windows(2).enumerate() {
            let logits = s
                .forward_token(w[0])
                .map_err(|e| format!("{name}, position {i}: {e}"))?;
            log_softmax(&logits, &mut lq);
            nll -= lq[w[1] as usize];
            let top = argmax(&logits);
            if is_ref {
                reference.extend_from_slice(&logits);
                ref_top.push(top);
                agree += 1;
            } else {
                log_softmax(&reference[i * c.vocab..(i + 1) * c.vocab], &mut lp);
                kl_sum += kl(&lp, &lq);
                agree += usize::from(top == ref_top[i]);
            }
            bar.inc(1);
        }
        let secs = t0.elapsed().as_secs_f64();
        let mean = nll / steps as f64;
        let ppl = mean.exp();
        if is_ref && let Some(sp) = spearman.as_mut() {
            if let Some(cap) = s.take_qkv() {
                sp.capture(cap);
            }
        }
        let mem = s.memory();
        let values = 2 * s.pos() * c.kv_heads * c.head_dim * c.layers;
        let bits = mem.held.total() as f64 * 8.0 / values as f64;
        let f16_ppl = rows.first().map_or(ppl, |r| r.perplexity);
        let rho = match (method.eviction(), spearman.as_ref()) {
            (Some(e), Some(sp)) => sp.of(e, c.kv_heads, c.head_dim)?,
            _ => None,
        };
        let row = Row {
            method: name.clone(),
            bits_per_value: bits,
            perplexity: ppl,
            delta_pct: if is_ref {
                0.0
            } else {
                (ppl / f16_ppl - 1.0) * 100.0
            },
            kl: kl_sum / steps as f64,
            top1: agree as f64 / steps as f64,
            tokens_held_per_head: mem.tokens as f64 / c.layers as f64,
            bytes_held: mem.held.total(),
            eviction: method
                .eviction()
                .map(|e| (e.policy.name().to_string(), e.budget)),
            spearman: rho,
            spearman_references: rho.and(spearman.as_ref().and_then(|sp| sp.references)),
        };
        let sp = row.spearman.map_or(String::new(), |(m, w, f)| {
            format!(", Spearman mean {m:+.3} worst {w:+.3} (flipped {f:+.3})")
        });
        let sp = match row.spearman_references {
            Some(((im, iw), (lm, lw))) => format!(
                "{sp}; references: filters calibrated on this text {im:+.3} / {iw:+.3}, \
                 mean logit {lm:+.3} / {lw:+.3}"
            ),
            None => sp,
        };
        let line = format!(
            "{name:>14}: perplexity {ppl:.4} (mean NLL {mean:.4}), {bits:.2} bits/value held, \
             {:.1} tokens held per KV head, {:.1} tok/s{sp}",
            row.tokens_held_per_head,
            steps as f64 / secs
        );
        // Shown even when the bar is hidden (stderr not a terminal).
        bar.suspend(|| eprintln!("{line}"));
        rows.push(row);
        save(&rows)?;
    }
    Ok(rows)
}

const HEADERS: [&str; 6] = [
    "method",
    "bits/value (held)",
    "perplexity",
    "Δ vs f16 (%)",
    "mean KL vs f16",
    "top-1 agreement",
];

fn print_table(model: &str, path: PathChoice, tokens: usize, rows: &[Row]) {
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.method.clone(),
                format!("{:.3}", r.bits_per_value),
                format!("{:.4}", r.perplexity),
                format!("{:+.2}", r.delta_pct),
                format!("{:.6}", r.kl),
                format!("{:.4}", r.top1),
            ]
        })
        .collect();
    let mut width: [usize; 6] = HEADERS.map(|h| h.chars().count());
    for row in &cells {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cols: &[String; 6]| {
        let parts: Vec<String> = cols
            .iter()
            .zip(width)
            .enumerate()
            .map(|(i, (c, w))| {
                let pad = " ".repeat(w - c.chars().count());
                if i == 0 {
                    format!("{c}{pad}")
                } else {
                    format!("{pad}{c}")
                }
            })
            .collect();
        format!("| {} |", parts.join(" | "))
    };
    println!(
        "{model}, {tokens} tokens ({} predictions, teacher-forced one token at a time), path {path}",
        tokens - 1
    );
    println!(
        "bits/value are measured from the bytes the caches hold: held bytes × 8 / (2 · T · Hkv · D · layers)"
    );
    println!("{}", line(&HEADERS.map(String::from)));
    // Markdown: the first column left-aligned, the numbers right-aligned.
    let rule: Vec<String> = width
        .iter()
        .enumerate()
        .map(|(i, &w)| {
            if i == 0 {
                "-".repeat(w + 2)
            } else {
                format!("{}:", "-".repeat(w + 1))
            }
        })
        .collect();
    println!("|{}|", rule.join("|"));
    for row in &cells {
        println!("{}", line(row));
    }
}

fn write_json(p: &Path, rows: &[Row]) -> Result<(), String> {
    let list: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "method": r.method,
                "bits_per_value": r.bits_per_value,
                "perplexity": r.perplexity,
                "delta_pct": r.delta_pct,
                "kl": r.kl,
                "top1": r.top1,
                "tokens_held_per_head": r.tokens_held_per_head,
                "bytes_held": r.bytes_held,
                "policy": r.eviction.as_ref().map(|e| e.0.clone()),
                "budget": r.eviction.as_ref().map(|e| e.1),
                "spearman_mean": r.spearman.map(|s| s.0),
                "spearman_worst": r.spearman.map(|s| s.1),
                "spearman_flipped_mean": r.spearman.map(|s| s.2),
                "spearman_insample_mean": r.spearman_references.map(|c| c.0.0),
                "spearman_insample_worst": r.spearman_references.map(|c| c.0.1),
                "spearman_mean_logit_mean": r.spearman_references.map(|c| c.1.0),
                "spearman_mean_logit_worst": r.spearman_references.map(|c| c.1.1),
            })
        })
        .collect();
    let text = serde_json::to_string_pretty(&list).map_err(|e| format!("internal: {e}"))?;
    std::fs::write(p, text + "\n").map_err(|e| format!("cannot write {}: {e}", p.display()))
}

/// Perplexity against bits per value, one labelled point per method, the f16 perplexity as a
/// dashed line. Text is drawn with DejaVu Sans embedded in the binary (no system fonts).
fn plot(
    p: &Path,
    model: &str,
    tokens: usize,
    path: PathChoice,
    rows: &[Row],
) -> Result<(), String> {
    use plotters::prelude::*;
    use plotters::style::FontStyle;

    let err = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", p.display());
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| err(&"the embedded font is invalid"))?;

    let pts: Vec<&Row> = rows
        .iter()
        .filter(|r| r.bits_per_value.is_finite() && r.perplexity.is_finite())
        .collect();
    let xmax = pts.iter().map(|r| r.bits_per_value).fold(1.0, f64::max);
    let (ylo, yhi) = pts
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), r| {
            (lo.min(r.perplexity), hi.max(r.perplexity))
        });
    let (ylo, yhi) = if ylo.is_finite() {
        (ylo, yhi)
    } else {
        (1.0, 2.0)
    };
    let pad = ((yhi - ylo) * 0.12).max(ylo.abs() * 0.01).max(1e-6);
    let (y0, y1) = (ylo - pad, yhi + pad);
    let x1 = (xmax * 1.12).ceil();

    let root = BitMapBackend::new(p, (960, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{model}: perplexity vs bits per value ({tokens} tokens, path {path})"),
            ("sans-serif", 22),
        )
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x1, y0..y1)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("bits per value (measured from bytes held)")
        .y_desc("perplexity")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(|e| err(&e))?;
    if let Some(f16) = rows.first().filter(|r| r.perplexity.is_finite()) {
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, f16.perplexity), (x1, f16.perplexity)],
                6,
                4,
                RGBColor(200, 60, 60).stroke_width(1),
            ))
            .map_err(|e| err(&e))?;
    }
    chart
        .draw_series(pts.iter().map(|r| {
            EmptyElement::at((r.bits_per_value, r.perplexity))
                + Circle::new((0, 0), 6, RGBColor(40, 90, 180).filled())
                + Text::new(
                    format!("{} ({:+.1} %)", r.method, r.delta_pct),
                    (9, -18),
                    ("sans-serif", 15),
                )
        }))
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
