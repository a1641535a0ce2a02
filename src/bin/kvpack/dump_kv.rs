//! `kvpack dump-kv`: a real model's post-RoPE q, k and v of every layer on a text, written as
//! safetensors in the layout `kvpack roundtrip` and `kvpack attend` read, so any method can be
//! tried on one's own text without Python.
//!
//! The text runs through the model's CPU forward with the f16 cache (the reference), in chunks;
//! every layer's queries and keys after RoPE (biases included) and its values are recorded
//! before they enter the cache (f32, rounded to f16 on output unless `--dtype f32`).
//!
//! Output tensors (the layout of the SmolLM2 fixtures in `../shared/fixtures/`):
//! - `q` `[L, T, Hq, D]`, `k` and `v` `[L, T, Hkv, D]` (f16 or f32);
//! - `token_ids` `[T]` (I32);
//! - `logits_last` `[vocab]` (F32): the next-token logits after the last token;
//!
//! plus string metadata (model, architecture, RoPE, token count, perplexity with the f16 cache,
//! the text). RoPE pairs are the model's own (adjacent for llama GGUFs, whose q/k rows the
//! converter permuted; halves for qwen2): attention does not depend on the channel order as long
//! as q and k share it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use half::f16;
use kvpack::model::forward::log_prob;
use kvpack::model::load::load_model;
use kvpack::model::{RopePairing, Session};
use kvpack::{Context, Method, PathChoice};
use safetensors::tensor::{Dtype, TensorView};

/// What `kvpack dump-kv` was asked.
pub struct Options {
    pub model: String,
    pub tokenizer: Option<PathBuf>,
    pub text: PathBuf,
    pub out: PathBuf,
    pub max_tokens: Option<usize>,
    pub f32: bool,
    pub chunk: usize,
}

/// Runs the model over the text and writes the file; returns the JSON summary.
pub fn run(opts: &Options) -> Result<serde_json::Value, String> {
    if opts.chunk == 0 {
        return Err("--chunk must be positive".into());
    }
    if opts.out.is_dir() {
        return Err(format!("{} is a directory", opts.out.display()));
    }
    if let Some(d) = opts
        .out
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.is_dir())
    {
        return Err(format!(
            "cannot write {}: folder {} does not exist",
            opts.out.display(),
            d.display()
        ));
    }
    let text = std::fs::read_to_string(&opts.text)
        .map_err(|e| format!("cannot read {}: {e}", opts.text.display()))?;
    let t0 = Instant::now();
    let model = load_model(&opts.model, opts.tokenizer.as_deref()).map_err(|e| e.to_string())?;
    let load_s = t0.elapsed().as_secs_f64();
    let mut ids = model.tokenizer.encode(&text);
    if let Some(n) = opts.max_tokens {
        ids.truncate(n);
    }
    let c = model.config.clone();
    if ids.is_empty() {
        return Err(format!("{} encodes to no tokens", opts.text.display()));
    }
    if ids.len() > c.max_seq {
        return Err(format!(
            "{} tokens exceed {}'s maximum sequence length {} (use --max-tokens {})",
            ids.len(),
            model.name,
            c.max_seq,
            c.max_seq
        ));
    }

    let mut s = Session::new(
        Arc::new(model.weights),
        &Context::cpu(),
        Method::f16(),
        PathChoice::Cpu,
    )
    .map_err(|e| e.to_string())?;
    s.capture_qkv(true);
    let t1 = Instant::now();
    let mut nll = 0.0;
    let mut last = Vec::new();
    let mut done = 0;
    for chunk in ids.chunks(opts.chunk) {
        let logits = s.forward_chunk(chunk).map_err(|e| e.to_string())?;
        for (j, row) in logits.chunks_exact(c.vocab).enumerate() {
            if let Some(&next) = ids.get(done + j + 1) {
                nll -= log_prob(row, next);
            }
        }
        done += chunk.len();
        last = logits[(chunk.len() - 1) * c.vocab..].to_vec();
    }
    let forward_s = t1.elapsed().as_secs_f64();
    let cap = s
        .take_qkv()
        .ok_or("internal: the capture was not recorded")?;
    let t = ids.len();
    if cap.tokens != t {
        return Err(format!("internal: recorded {} tokens of {t}", cap.tokens));
    }

    let predictions = t - 1;
    let mean_nll = if predictions > 0 {
        nll / predictions as f64
    } else {
        f64::NAN
    };
    let pairing = match c.rope_pairing {
        RopePairing::Adjacent => "adjacent pairs (2i, 2i+1)",
        RopePairing::Halves => "halves (i, i + D/2)",
    };
    let mut meta = HashMap::from([
        ("producer".to_string(), "kvpack dump-kv".to_string()),
        ("model".to_string(), model.name.clone()),
        (
            "architecture".to_string(),
            format!(
                "{}; {} layers, dim {}, {} query heads, {} KV heads, head_dim {}, vocab {}",
                c.arch, c.layers, c.dim, c.heads, c.kv_heads, c.head_dim, c.vocab
            ),
        ),
        ("rope_theta".to_string(), c.rope_theta.to_string()),
        ("rope_pairing".to_string(), pairing.to_string()),
        ("token_count".to_string(), t.to_string()),
        (
            "forward".to_string(),
            "kvpack CPU f32 forward, f16 KV cache; q and k after RoPE (and biases), v as \
             projected, recorded before the cache"
                .to_string(),
        ),
        ("text".to_string(), text),
    ]);
    if predictions > 0 {
        meta.insert("mean_nll_nats".into(), format!("{mean_nll:.6}"));
        meta.insert(
            "perplexity_f16_cache".into(),
            format!("{:.4}", mean_nll.exp()),
        );
    }

    let dtype = if opts.f32 { Dtype::F32 } else { Dtype::F16 };
    let stack = |per_layer: &[Vec<f32>]| -> Vec<u8> {
        let n: usize = per_layer.iter().map(Vec::len).sum();
        let mut b = Vec::with_capacity(n * if opts.f32 { 4 } else { 2 });
        for layer in per_layer {
            for &x in layer {
                if opts.f32 {
                    b.extend_from_slice(&x.to_le_bytes());
                } else {
                    b.extend_from_slice(&f16::from_f32(x).to_le_bytes());
                }
            }
        }
        b
    };
    let (q, k, v) = (stack(&cap.q), stack(&cap.k), stack(&cap.v));
    drop(cap);
    let id_bytes: Vec<u8> = ids.iter().flat_map(|&i| (i as i32).to_le_bytes()).collect();
    let last_bytes: Vec<u8> = last.iter().flat_map(|x| x.to_le_bytes()).collect();
    let tensors = [
        (
            "q",
            view(dtype, vec![c.layers, t, c.heads, c.head_dim], &q)?,
        ),
        (
            "k",
            view(dtype, vec![c.layers, t, c.kv_heads, c.head_dim], &k)?,
        ),
        (
            "v",
            view(dtype, vec![c.layers, t, c.kv_heads, c.head_dim], &v)?,
        ),
        ("token_ids", view(Dtype::I32, vec![t], &id_bytes)?),
        ("logits_last", view(Dtype::F32, vec![c.vocab], &last_bytes)?),
    ];
    write(&opts.out, tensors, meta)?;
    Ok(serde_json::json!({
        "model": model.name,
        "architecture": c.arch.to_string(),
        "tokens": t,
        "layers": c.layers,
        "q_heads": c.heads,
        "kv_heads": c.kv_heads,
        "head_dim": c.head_dim,
        "dtype": if opts.f32 { "f32" } else { "f16" },
        "perplexity_f16_cache": if predictions > 0 { serde_json::json!(mean_nll.exp()) } else { serde_json::Value::Null },
        "load_s": load_s,
        "forward_s": forward_s,
        "output": opts.out.display().to_string(),
    }))
}

fn view(dt: Dtype, shape: Vec<usize>, b: &[u8]) -> Result<TensorView<'_>, String> {
    TensorView::new(dt, shape, b).map_err(|e| format!("internal: {e}"))
}

fn write(
    path: &Path,
    tensors: [(&str, TensorView<'_>); 5],
    meta: HashMap<String, String>,
) -> Result<(), String> {
    safetensors::serialize_to_file(tensors, Some(meta), path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}
