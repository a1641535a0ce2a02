//! Qwen2.5-Coder-Instruct (qwen2 architecture, official Q4_K_M GGUFs, fetched by
//! `scripts/fetch-models.sh qwen2.5-coder-0.5b|qwen2.5-coder-1.5b`; see
//! ../shared/models/qwen2.5-coder.md) end to end through [`kvpack::model::load_model`], and the
//! block formats it needs (Q4_K, Q6_K, Q5_0, Q5_1) on hand-built blocks.
//!
//! Reference data (`tests/data/`, each made by the script beside it, independent of kvpack's
//! Rust code):
//! - `quant_blocks.json`: blocks packed forwards from chosen scales and codes, with their values
//!   computed from those parameters (`quant_blocks.py`);
//! - `qwen_tokens.json`: ids from Hugging Face `tokenizers` set up as Qwen2's tokenizer on the
//!   GGUF's vocabulary and merges (`qwen_tokens.py`);
//! - `qwen_reference.json`: a float32 numpy forward on weights dequantized by the `gguf`
//!   package: perplexities, last-position logits, weight statistics (`qwen_reference.py`).
//!
//! Without the 0.5B its tests print `SKIP ...` (a failure when `KVPACK_REQUIRE_MODELS=1`, as in
//! CI, which fetches it). The 1.5B (1.1 GB, 7 GB of f32 weights) is optional everywhere: its
//! tests run where it was fetched and print `SKIP ...` otherwise, even under
//! `KVPACK_REQUIRE_MODELS=1`. Each model is loaded once per test binary and shared.
//! Long texts run as one chunk (`forward_chunk`, all logits); the short one token by token.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use kvpack::Error;
use kvpack::model::bpe::PreTokenizer;
use kvpack::model::gguf::{GgmlType, GgufFile, dequantize};
use kvpack::model::load::Tokenizer;
use kvpack::model::{self, Arch, LoadedModel, RopePairing, Session, Weights, fetched};
use kvpack::{Context, Method, PathChoice};
use serde_json::Value;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn json(name: &str) -> Value {
    let p = data(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn text(name: &str) -> String {
    std::fs::read_to_string(data(name)).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Block formats on known blocks (no model needed).

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn ggml_type(name: &str) -> GgmlType {
    match name {
        "Q4_K" => GgmlType::Q4_K,
        "Q6_K" => GgmlType::Q6_K,
        "Q5_0" => GgmlType::Q5_0,
        "Q5_1" => GgmlType::Q5_1,
        other => panic!("unexpected type {other}"),
    }
}

fn is_format_error<T: std::fmt::Debug>(r: kvpack::Result<T>) -> bool {
    matches!(r, Err(Error::Format { .. }))
}

/// Every hand-built block dequantizes to the values derived from its parameters; two blocks in
/// a row are two blocks; wrong sizes are errors, not panics.
#[test]
fn quant_blocks_known_values() {
    let blocks = json("quant_blocks.json");
    let blocks = blocks.as_array().unwrap();
    assert_eq!(blocks.len(), 6);
    let mut seen = std::collections::HashSet::new();
    for b in blocks {
        let ty = ggml_type(b["type"].as_str().unwrap());
        seen.insert(ty);
        let bytes = hex(b["hex"].as_str().unwrap());
        let expected: Vec<f64> = b["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let (block, block_bytes) = ty.block_layout().unwrap();
        assert_eq!((bytes.len(), expected.len()), (block_bytes, block));
        let got = dequantize(ty, &bytes, block).unwrap();
        for (i, (&g, &e)) in got.iter().zip(&expected).enumerate() {
            assert!(
                (g as f64 - e).abs() <= 1e-6 * e.abs().max(1.0),
                "{ty} ({}) value {i}: {g} vs {e}",
                b["note"]
            );
        }
        // Two blocks in a row.
        let two = dequantize(ty, &[bytes.clone(), bytes.clone()].concat(), 2 * block).unwrap();
        assert_eq!(two, [got.clone(), got].concat());
        // Wrong sizes: a byte short, a partial block.
        assert!(matches!(
            dequantize(ty, &bytes[1..], block),
            Err(Error::LengthMismatch { .. })
        ));
        assert!(is_format_error(dequantize(ty, &bytes, block / 2)));
    }
    assert_eq!(seen.len(), 4, "Q4_K, Q6_K, Q5_0 and Q5_1 are all covered");
    assert_eq!(GgmlType::from_id(12), GgmlType::Q4_K);
    assert_eq!(GgmlType::from_id(14), GgmlType::Q6_K);
    assert_eq!(GgmlType::from_id(6), GgmlType::Q5_0);
    assert_eq!(GgmlType::from_id(7), GgmlType::Q5_1);
    assert_eq!(GgmlType::Q6_K.id(), 14);
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as u64).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
}

/// Metadata value: (key, GGUF type id, value bytes).
type Kv = (&'static str, u32, Vec<u8>);

/// A GGUF v3 file: metadata, then tensors (name, ggml dims, type id, data), aligned to 32.
fn gguf_bytes(kv: &[Kv], tensors: &[(String, Vec<u64>, u32, Vec<u8>)]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    b.extend_from_slice(&(kv.len() as u64).to_le_bytes());
    for (k, ty, v) in kv {
        put_str(&mut b, k);
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(v);
    }
    let mut offset = 0u64;
    for (name, dims, ty, data) in tensors {
        put_str(&mut b, name);
        b.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            b.extend_from_slice(&d.to_le_bytes());
        }
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(&offset.to_le_bytes());
        offset += (data.len() as u64).div_ceil(32) * 32;
    }
    while !b.len().is_multiple_of(32) {
        b.push(0);
    }
    for (_, _, _, data) in tensors {
        b.extend_from_slice(data);
        while !b.len().is_multiple_of(32) {
            b.push(0);
        }
    }
    b
}

/// A GGUF whose k-quant tensor has a row that is not whole 256-value blocks is a format error.
#[test]
fn kquant_rows_must_be_whole_blocks() {
    let file = |row: u64, ty: u32, data: usize| {
        let mut b = gguf_bytes(&[], &[("t".into(), vec![row, 2], ty, vec![])]);
        b.resize(b.len() + data, 0);
        GgufFile::from_bytes(b)
    };
    for (ty, bytes) in [(12u32, 144usize), (14, 210)] {
        let f = file(256, ty, 2 * bytes).unwrap();
        let t = f.dequantize("t").unwrap();
        assert_eq!(t.shape, vec![2, 256]);
        assert!(t.data.iter().all(|&x| x == 0.0));
        assert!(is_format_error(file(128, ty, bytes)));
        assert!(is_format_error(file(896, ty, 8 * bytes)));
        assert!(is_format_error(file(256, ty, 2 * bytes - 1)));
    }
}

/// A tiny qwen2 checkpoint (F32): 1 layer, d_model 8, 2 query heads and 1 KV head of 4, FFN
/// 6, vocabulary 5; `bias` scales the q/k/v biases, `drop` leaves one tensor out.
fn tiny_qwen2(bias: f32, drop: Option<&str>) -> GgufFile {
    let (d, hidden, vocab, kv_dim) = (8u64, 6u64, 5u64, 4u64);
    let u32v = |v: u32| v.to_le_bytes().to_vec();
    let kv: Vec<Kv> = vec![
        ("general.architecture", 8, {
            let mut b = Vec::new();
            put_str(&mut b, "qwen2");
            b
        }),
        ("qwen2.block_count", 4, u32v(1)),
        ("qwen2.context_length", 4, u32v(64)),
        ("qwen2.embedding_length", 4, u32v(d as u32)),
        ("qwen2.feed_forward_length", 4, u32v(hidden as u32)),
        ("qwen2.attention.head_count", 4, u32v(2)),
        ("qwen2.attention.head_count_kv", 4, u32v(1)),
        ("qwen2.rope.freq_base", 6, 1.0e6f32.to_le_bytes().to_vec()),
        (
            "qwen2.attention.layer_norm_rms_epsilon",
            6,
            1e-6f32.to_le_bytes().to_vec(),
        ),
        ("qwen2.vocab_size", 4, u32v(vocab as u32)),
    ];
    let mut seed = 3u32;
    let mut t = |name: &str, dims: Vec<u64>, scale: f32| {
        let n: u64 = dims.iter().product();
        let data: Vec<u8> = (0..n)
            .flat_map(|_| {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (((seed >> 8) as f32 / 16_777_216.0 - 0.5) * scale).to_le_bytes()
            })
            .collect();
        (name.to_string(), dims, 0u32, data)
    };
    let mut tensors = vec![
        t("token_embd.weight", vec![d, vocab], 1.0),
        t("output.weight", vec![d, vocab], 1.0),
        t("output_norm.weight", vec![d], 1.0),
        t("blk.0.attn_norm.weight", vec![d], 1.0),
        t("blk.0.attn_q.weight", vec![d, d], 1.0),
        t("blk.0.attn_k.weight", vec![d, kv_dim], 1.0),
        t("blk.0.attn_v.weight", vec![d, kv_dim], 1.0),
        t("blk.0.attn_q.bias", vec![d], bias),
        t("blk.0.attn_k.bias", vec![kv_dim], bias),
        t("blk.0.attn_v.bias", vec![kv_dim], bias),
        t("blk.0.attn_output.weight", vec![d, d], 1.0),
        t("blk.0.ffn_norm.weight", vec![d], 1.0),
        t("blk.0.ffn_gate.weight", vec![d, hidden], 1.0),
        t("blk.0.ffn_up.weight", vec![d, hidden], 1.0),
        t("blk.0.ffn_down.weight", vec![hidden, d], 1.0),
    ];
    tensors.retain(|(n, ..)| Some(n.as_str()) != drop);
    GgufFile::from_bytes(gguf_bytes(&kv, &tensors)).unwrap()
}

/// A tiny qwen2 GGUF loads as qwen2 (biases, RoPE on halves, untied head, θ and eps from the
/// file); its biases change the output; a missing bias or weight is an error, not a panic.
#[test]
fn tiny_qwen2_loads_and_uses_biases() {
    use kvpack::model::load::weights_from_gguf;
    let w = weights_from_gguf(&tiny_qwen2(1.0, None)).unwrap();
    let c = &w.config;
    assert_eq!(c.arch, Arch::Qwen2);
    assert_eq!((c.heads, c.kv_heads, c.head_dim), (2, 1, 4));
    assert_eq!(c.rope_pairing, RopePairing::Halves);
    assert!(c.qkv_bias && !w.tied());
    assert_eq!((c.rope_theta, c.norm_eps), (1.0e6, 1e-6));
    assert_eq!(w.layers[0].bk.len(), 4);
    let run = |w: Weights| {
        let mut s =
            Session::new(Arc::new(w), &Context::cpu(), Method::f16(), PathChoice::Cpu).unwrap();
        s.forward_chunk(&[1, 4, 2]).unwrap()
    };
    let with = run(w);
    let without = run(weights_from_gguf(&tiny_qwen2(0.0, None)).unwrap());
    assert!(with.iter().all(|x| x.is_finite()));
    assert!(
        with.iter().zip(&without).any(|(a, b)| (a - b).abs() > 1e-3),
        "the biases change nothing"
    );
    for missing in [
        "blk.0.attn_q.bias",
        "blk.0.attn_v.bias",
        "blk.0.attn_k.weight",
    ] {
        let r = weights_from_gguf(&tiny_qwen2(1.0, Some(missing)));
        assert!(
            matches!(r, Err(Error::Config(_)) | Err(Error::Format { .. })),
            "without {missing}: {r:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The models.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Size {
    B05,
    B15,
}

impl Size {
    fn name(self) -> &'static str {
        match self {
            Size::B05 => "qwen2.5-coder-0.5b",
            Size::B15 => "qwen2.5-coder-1.5b",
        }
    }

    fn file(self) -> &'static str {
        match self {
            Size::B05 => fetched::QWEN25_CODER_05B_FILE,
            Size::B15 => fetched::QWEN25_CODER_15B_FILE,
        }
    }

    fn path(self) -> PathBuf {
        fetched::path(self.name()).unwrap()
    }

    /// This model's entry in `qwen_reference.json`.
    fn reference(self) -> Value {
        json("qwen_reference.json")[self.file()].clone()
    }
}

/// `Some(path)` when the model is there; otherwise prints `SKIP` (and fails for the 0.5B under
/// `KVPACK_REQUIRE_MODELS=1`).
fn present(size: Size, test: &str) -> Option<PathBuf> {
    let p = size.path();
    if p.is_file() {
        return Some(p);
    }
    let msg = format!(
        "SKIP {test} because {} is absent (run scripts/fetch-models.sh {})",
        p.display(),
        size.name()
    );
    if size == Size::B05 && std::env::var("KVPACK_REQUIRE_MODELS").is_ok_and(|v| v == "1") {
        panic!("{msg} (KVPACK_REQUIRE_MODELS=1 forbids skips)");
    }
    eprintln!("{msg}");
    None
}

struct Model {
    size: Size,
    weights: Arc<Weights>,
    tokenizer: Tokenizer,
}

fn model(size: Size, test: &str) -> Option<&'static Model> {
    static B05: OnceLock<Model> = OnceLock::new();
    static B15: OnceLock<Model> = OnceLock::new();
    present(size, test)?;
    let cell = match size {
        Size::B05 => &B05,
        Size::B15 => &B15,
    };
    Some(cell.get_or_init(|| {
        let t0 = Instant::now();
        let LoadedModel {
            name,
            config,
            weights,
            tokenizer,
        } = model::load_model(size.name(), None).expect("load the model");
        eprintln!(
            "loaded {name} ({} layers, d_model {}, {}/{} heads of {}, {:.0} M params) in {:.1} s",
            config.layers,
            config.dim,
            config.heads,
            config.kv_heads,
            config.head_dim,
            weights.parameters() as f64 / 1e6,
            t0.elapsed().as_secs_f64()
        );
        Model {
            size,
            weights: Arc::new(weights),
            tokenizer,
        }
    }))
}

fn session(m: &Model) -> Session {
    Session::new(
        m.weights.clone(),
        &Context::cpu(),
        Method::f16(),
        PathChoice::Cpu,
    )
    .unwrap()
}

fn log_softmax_at(logits: &[f32], i: usize) -> f64 {
    model::forward::log_prob(logits, i as u32)
}

fn lse(logits: &[f32]) -> f64 {
    logits[0] as f64 - log_softmax_at(logits, 0)
}

/// Checks a text's ids, perplexity and last logits against the numpy reference (`rel` relative
/// tolerance on perplexity, `abs` on the 16 largest last logits and the log-sum-exp), printing
/// them with the time taken.
#[allow(clippy::too_many_arguments)]
fn check_against_reference(
    m: &Model,
    name: &str,
    ids: &[u32],
    ppl: f64,
    last: &[f32],
    rel: f64,
    abs: f64,
    how: &str,
    secs: f64,
) {
    let r = &m.size.reference()[name];
    let ref_ids: Vec<u32> = r["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(ids, ref_ids, "{name}: ids differ from the reference's");
    let ref_ppl = r["perplexity"].as_f64().unwrap();
    let mut max_diff = 0f64;
    for pair in r["last_top"].as_array().unwrap() {
        let (id, logit) = (
            pair[0].as_u64().unwrap() as usize,
            pair[1].as_f64().unwrap(),
        );
        max_diff = max_diff.max((last[id] as f64 - logit).abs());
    }
    let top = r["last_top"][0][0].as_u64().unwrap() as u32;
    let lse_diff = (lse(last) - r["last_lse"].as_f64().unwrap()).abs();
    eprintln!(
        "{} {name} ({} tokens, {how}): perplexity {ppl:.4} vs reference {ref_ppl:.4} ({:+.3} %), \
         last logits: argmax {} (reference {top}), max |diff| on the top 16 {max_diff:.4}, \
         |Δ logsumexp| {lse_diff:.4}; {secs:.1} s ({:.2} s/token)",
        m.size.name(),
        ids.len(),
        (ppl / ref_ppl - 1.0) * 100.0,
        model::forward::argmax(last),
        secs / ids.len() as f64
    );
    assert!(
        (ppl / ref_ppl - 1.0).abs() <= rel,
        "{name}: perplexity {ppl:.4}, reference {ref_ppl:.4} (±{:.2} %)",
        rel * 100.0
    );
    assert_eq!(model::forward::argmax(last), top, "{name}: last argmax");
    assert!(
        max_diff <= abs,
        "{name}: last logits differ by {max_diff:.4} > {abs}"
    );
    assert!(
        lse_diff <= abs,
        "{name}: last logsumexp differs by {lse_diff:.4}"
    );
}

/// Teacher-forced perplexity from all-position logits `[ids.len(), vocab]`.
fn chunk_perplexity(logits: &[f32], ids: &[u32], vocab: usize) -> f64 {
    let nll: f64 = ids[1..]
        .iter()
        .enumerate()
        .map(|(i, &next)| -log_softmax_at(&logits[i * vocab..(i + 1) * vocab], next as usize))
        .sum();
    (nll / (ids.len() - 1) as f64).exp()
}

/// Checks the dequantized weights of the real file against the `gguf` package's (statistics and
/// first values of a tensor of every quantization type the file uses).
fn check_tensor_stats(size: Size, path: &PathBuf) {
    let f = GgufFile::open(path).unwrap();
    let stats = size.reference()["tensor_stats"].clone();
    let stats = stats.as_object().unwrap();
    assert!(stats.len() >= 5);
    let mut types = std::collections::BTreeSet::new();
    for (name, s) in stats {
        let info = f.tensor(name).unwrap();
        assert_eq!(info.ggml_type.to_string(), s["type"].as_str().unwrap());
        types.insert(info.ggml_type.to_string());
        let t = f.dequantize(name).unwrap();
        let shape: Vec<usize> = s["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(t.shape, shape, "{name}");
        let n = t.data.len() as f64;
        let mean = t.data.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = t
            .data
            .iter()
            .map(|&x| (x as f64 - mean).powi(2))
            .sum::<f64>()
            / n;
        let abs_max = t.data.iter().fold(0f64, |a, &x| a.max((x as f64).abs()));
        let (e_mean, e_std, e_max) = (
            s["mean"].as_f64().unwrap(),
            s["std"].as_f64().unwrap(),
            s["abs_max"].as_f64().unwrap(),
        );
        eprintln!(
            "{} {name} {}: mean {mean:.3e} std {:.4e} |max| {abs_max:.4} (gguf package: {e_mean:.3e} \
             {e_std:.4e} {e_max:.4})",
            size.name(),
            info.ggml_type,
            var.sqrt()
        );
        assert!(t.data.iter().all(|x| x.is_finite()), "{name}");
        assert!(
            (mean - e_mean).abs() <= 1e-6 * e_std.max(1e-3),
            "{name}: mean"
        );
        assert!((var.sqrt() / e_std - 1.0).abs() <= 1e-5, "{name}: std");
        assert!((abs_max / e_max - 1.0).abs() <= 1e-6, "{name}: |max|");
        for (i, v) in s["first"].as_array().unwrap().iter().enumerate() {
            let e = v.as_f64().unwrap();
            assert!(
                (t.data[i] as f64 - e).abs() <= 1e-6 * e.abs().max(1e-3),
                "{name}[{i}]: {} vs {e}",
                t.data[i]
            );
        }
    }
    eprintln!("{}: checked tensor types {types:?}", size.name());
}

/// The 0.5B's header: qwen2, 24 layers, GQA 14/2 of 64, NeoX RoPE θ 1e6, eps 1e-6, biases,
/// untied head; and its weights of every quantization type against the `gguf` package's.
#[test]
fn qwen05b_config_and_weights() {
    let test = "qwen05b_config_and_weights";
    let Some(path) = present(Size::B05, test) else {
        return;
    };
    check_tensor_stats(Size::B05, &path);
    let Some(m) = model(Size::B05, test) else {
        return;
    };
    let c = &m.weights.config;
    assert_eq!(c.arch, Arch::Qwen2);
    assert_eq!(
        (
            c.layers, c.dim, c.heads, c.kv_heads, c.head_dim, c.hidden, c.vocab
        ),
        (24, 896, 14, 2, 64, 4864, 151_936)
    );
    assert_eq!(c.rope_pairing, RopePairing::Halves);
    assert_eq!(c.rope_theta, 1.0e6);
    assert!((c.norm_eps - 1e-6).abs() < 1e-12);
    assert!(c.qkv_bias && !m.weights.tied());
    // Layer 0's key bias has a few channels far larger than the rest (the recipe's outliers).
    let bk = &m.weights.layers[0].bk;
    let big = bk.iter().fold(0f32, |a, &x| a.max(x.abs()));
    let mut sorted: Vec<f32> = bk.iter().map(|x| x.abs()).collect();
    sorted.sort_by(f32::total_cmp);
    eprintln!(
        "qwen2.5-coder-0.5b layer 0 key bias: |max| {big:.1}, median |b| {:.3}",
        sorted[sorted.len() / 2]
    );
}

/// Tokenizer ids equal Hugging Face `tokenizers`' (set up as llama.cpp's qwen2 pre-tokenizer) on
/// code, prose with contractions, whitespace runs, digits, unicode and user-defined tokens; they
/// decode back to the text; no BOS.
#[test]
fn qwen05b_tokenizer_ids() {
    let Some(m) = model(Size::B05, "qwen05b_tokenizer_ids") else {
        return;
    };
    let Tokenizer::Bpe(bpe) = &m.tokenizer else {
        panic!("a GGUF model has a BPE tokenizer");
    };
    assert_eq!(bpe.pre_tokenizer(), PreTokenizer::Qwen2);
    assert_eq!(m.tokenizer.bos(), None, "add_bos_token = false");
    assert_eq!(
        bpe.user_defined().collect::<Vec<_>>(),
        vec![151_658, 151_657]
    );
    let cases = json("qwen_tokens.json");
    for case in cases.as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let text = case["text"].as_str().unwrap();
        let expected: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let t0 = Instant::now();
        let ids = m.tokenizer.encode(text);
        let us = t0.elapsed().as_secs_f64() * 1e6;
        if ids != expected {
            let first = ids.iter().zip(&expected).position(|(a, b)| a != b);
            panic!(
                "{name}: ids differ (first at {first:?}):\n kvpack {ids:?}\n reference {expected:?}"
            );
        }
        assert_eq!(m.tokenizer.decode(&ids), text, "{name}: decode");
        eprintln!("tokenizer {name}: {} ids equal, {us:.0} µs", ids.len());
    }
    // Control tokens are not parsed from text; stop tokens are EOS and <|endoftext|>.
    assert_eq!(bpe.token_id("<|im_end|>"), Some(151_645));
    assert_eq!(m.tokenizer.stop_tokens(), vec![151_645, 151_643]);
}

/// The short text token by token and as one chunk: perplexity and last logits against the
/// float32 reference.
#[test]
fn qwen05b_short_text_perplexity_and_logits() {
    let Some(m) = model(Size::B05, "qwen05b_short_text_perplexity_and_logits") else {
        return;
    };
    let ids = m.tokenizer.encode(&text("text_short.txt"));
    let vocab = m.weights.config.vocab;
    // Token by token, as real decoding runs.
    let mut s = session(m);
    let t0 = Instant::now();
    let mut nll = 0.0;
    let mut last = Vec::new();
    for (i, &id) in ids.iter().enumerate() {
        last = s.forward_token(id).unwrap();
        if let Some(&next) = ids.get(i + 1) {
            nll -= log_softmax_at(&last, next as usize);
        }
    }
    let ppl = (nll / (ids.len() - 1) as f64).exp();
    let secs = t0.elapsed().as_secs_f64();
    check_against_reference(
        m,
        "short",
        &ids,
        ppl,
        &last,
        0.005,
        0.05,
        "token by token",
        secs,
    );
    // One chunk gives the same numbers.
    let mut s = session(m);
    let t0 = Instant::now();
    let all = s.forward_chunk(&ids).unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let ppl_chunk = chunk_perplexity(&all, &ids, vocab);
    let last_chunk = &all[(ids.len() - 1) * vocab..];
    check_against_reference(
        m,
        "short",
        &ids,
        ppl_chunk,
        last_chunk,
        0.005,
        0.05,
        "one chunk",
        secs,
    );
    assert!(
        (ppl_chunk / ppl - 1.0).abs() < 1e-3,
        "chunk {ppl_chunk} vs token by token {ppl}"
    );
}

/// The 619-token Python file as one chunk.
#[test]
fn qwen05b_code_perplexity() {
    let Some(m) = model(Size::B05, "qwen05b_code_perplexity") else {
        return;
    };
    let ids = m.tokenizer.encode(&text("text_code.py.txt"));
    let vocab = m.weights.config.vocab;
    let mut s = session(m);
    let t0 = Instant::now();
    let all = s.forward_chunk(&ids).unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let ppl = chunk_perplexity(&all, &ids, vocab);
    let last = &all[(ids.len() - 1) * vocab..];
    check_against_reference(m, "code", &ids, ppl, last, 0.01, 0.1, "one chunk", secs);
}

fn greedy(m: &Model, prompt: &str, n: usize) -> String {
    let ids = m.tokenizer.encode(prompt);
    let mut s = session(m);
    let t0 = Instant::now();
    let out = s
        .generate(
            &ids,
            n,
            &m.tokenizer.stop_tokens(),
            &mut model::Sampler::greedy(),
            |_| {},
        )
        .unwrap();
    let text = m.tokenizer.decode(&out);
    eprintln!(
        "{} greedy: {prompt:?} -> {text:?} ({} tokens in {:.1} s)",
        m.size.name(),
        out.len(),
        t0.elapsed().as_secs_f64()
    );
    text
}

/// Greedy "The capital of France is" → " Paris.".
#[test]
fn qwen05b_greedy_capital_of_france() {
    let Some(m) = model(Size::B05, "qwen05b_greedy_capital_of_france") else {
        return;
    };
    assert_eq!(greedy(m, "The capital of France is", 2), " Paris.");
}

/// The 1.5B (where fetched): header, weights against the `gguf` package's, the first 320 tokens
/// of the Python file: perplexity within 1 % of the float32 reference (one chunk), and the
/// recipe's greedy continuation.
#[test]
fn qwen15b_code_perplexity_and_greedy() {
    let test = "qwen15b_code_perplexity_and_greedy";
    let Some(path) = present(Size::B15, test) else {
        return;
    };
    check_tensor_stats(Size::B15, &path);
    let Some(m) = model(Size::B15, test) else {
        return;
    };
    let c = &m.weights.config;
    assert_eq!(
        (c.layers, c.dim, c.heads, c.kv_heads, c.head_dim, c.hidden),
        (28, 1536, 12, 2, 128, 8960)
    );
    let mut ids = m.tokenizer.encode(&text("text_code.py.txt"));
    ids.truncate(320);
    let mut s = session(m);
    let t0 = Instant::now();
    let all = s.forward_chunk(&ids).unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let ppl = chunk_perplexity(&all, &ids, c.vocab);
    let last = &all[(ids.len() - 1) * c.vocab..];
    check_against_reference(m, "code320", &ids, ppl, last, 0.01, 0.1, "one chunk", secs);
    drop(all);
    assert_eq!(
        greedy(m, "The capital of France is", 16),
        " Paris. Paris is the largest city in France and the second-largest city in Europe"
    );
}
