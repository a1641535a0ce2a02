//! llama2.c legacy "v0" checkpoints (`run.c`'s format): a header of seven little-endian i32
//! (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len), then f32 tensors in
//! `run.c`'s `memory_map_weights` order: token embedding, all layers' attention norms, wq, wk,
//! wv, wo, FFN norms, w1, w2, w3, the final norm, two RoPE tables of `seq_len · head_size / 2`
//! floats each (skipped: the forward pass computes RoPE), and the classifier when the header's
//! vocab is negative (untied); a positive vocab means the classifier is the embedding.
//!
//! The file carries no eps or θ: llama2.c uses RMSNorm eps 1e-5 and RoPE θ 10000 with adjacent
//! pairs.

use std::path::Path;

use super::config::{Arch, Config, LayerWeights, RopePairing, Weights};
use crate::error::{Error, Result};

const HEADER_BYTES: usize = 7 * 4;

/// Reads a llama2.c v0 checkpoint from a file.
pub fn load(path: impl AsRef<Path>) -> Result<Weights> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse(&bytes).map_err(|e| match e {
        Error::Config(m) => Error::Config(format!("{}: {m}", path.display())),
        other => other,
    })
}

/// Parses a llama2.c v0 checkpoint held in memory.
pub fn parse(bytes: &[u8]) -> Result<Weights> {
    let bad = |m: String| Error::Config(format!("not a llama2.c v0 checkpoint: {m}"));
    if bytes.len() < HEADER_BYTES {
        return Err(bad(format!(
            "{} bytes is shorter than the 28-byte header",
            bytes.len()
        )));
    }
    let h: Vec<i32> = bytes[..HEADER_BYTES]
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let names = [
        "dim",
        "hidden_dim",
        "n_layers",
        "n_heads",
        "n_kv_heads",
        "vocab_size",
        "seq_len",
    ];
    for (i, (&v, name)) in h.iter().zip(names).enumerate() {
        let v = if i == 5 {
            v.unsigned_abs()
        } else {
            v.max(0) as u32
        };
        if v == 0 || v > 1 << 20 {
            return Err(bad(format!("header {name} = {} is out of range", h[i])));
        }
    }
    let shared = h[5] > 0;
    let (dim, hidden, layers, heads, kv_heads, vocab, max_seq) = (
        h[0] as usize,
        h[1] as usize,
        h[2] as usize,
        h[3] as usize,
        h[4] as usize,
        h[5].unsigned_abs() as usize,
        h[6] as usize,
    );
    if dim % heads != 0 {
        return Err(bad(format!(
            "dim {dim} is not a multiple of n_heads {heads}"
        )));
    }
    let head_dim = dim / heads;
    let config = Config {
        dim,
        hidden,
        layers,
        heads,
        kv_heads,
        head_dim,
        vocab,
        max_seq,
        norm_eps: 1e-5,
        rope_theta: 10000.0,
        rope_pairing: RopePairing::Adjacent,
        arch: Arch::Llama,
        qkv_bias: false,
    };
    config.validate().map_err(|e| bad(e.to_string()))?;

    // Sizes in floats, in file order (u64: a hostile header cannot overflow them).
    let (d, hd, l, q, kv, v, s) = (
        dim as u64,
        hidden as u64,
        layers as u64,
        config.q_dim() as u64,
        config.kv_dim() as u64,
        vocab as u64,
        max_seq as u64,
    );
    let rope_tables = 2 * s * (head_dim as u64 / 2);
    let floats = v * d
        + l * (d + d * q + 2 * d * kv + q * d + d + 3 * d * hd)
        + d
        + rope_tables
        + if shared { 0 } else { v * d };
    let expected = HEADER_BYTES as u64 + 4 * floats;
    let actual = bytes.len() as u64;
    if actual != expected {
        return Err(bad(format!(
            "the header (dim {dim}, hidden {hidden}, layers {layers}, heads {heads}, kv heads {kv_heads}, vocab {}, seq {max_seq}) needs {expected} bytes but the file has {actual}",
            h[5]
        )));
    }

    let mut r = Reader {
        bytes,
        at: HEADER_BYTES,
    };
    let token_embedding = r.take(vocab * dim);
    let mut per_layer = |n: usize| -> Vec<Vec<f32>> { (0..layers).map(|_| r.take(n)).collect() };
    let attn_norm = per_layer(dim);
    let wq = per_layer(dim * config.q_dim());
    let wk = per_layer(dim * config.kv_dim());
    let wv = per_layer(dim * config.kv_dim());
    let wo = per_layer(config.q_dim() * dim);
    let ffn_norm = per_layer(dim);
    let w1 = per_layer(dim * hidden);
    let w2 = per_layer(hidden * dim);
    let w3 = per_layer(dim * hidden);
    let final_norm = r.take(dim);
    r.skip(rope_tables as usize);
    let output = if shared {
        None
    } else {
        Some(r.take(vocab * dim))
    };
    debug_assert_eq!(r.at, bytes.len());

    let mut layer_weights = Vec::with_capacity(layers);
    let iters = attn_norm
        .into_iter()
        .zip(wq)
        .zip(wk)
        .zip(wv)
        .zip(wo)
        .zip(ffn_norm)
        .zip(w1)
        .zip(w2)
        .zip(w3);
    for ((((((((attn_norm, wq), wk), wv), wo), ffn_norm), w1), w2), w3) in iters {
        layer_weights.push(LayerWeights {
            attn_norm,
            wq,
            wk,
            wv,
            wo,
            ffn_norm,
            w1,
            w2,
            w3,
            ..Default::default()
        });
    }
    Weights::from_parts(config, token_embedding, layer_weights, final_norm, output)
}

/// Sequential f32 reads over a buffer whose length was checked up front.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Vec<f32> {
        let end = self.at + 4 * n;
        let out = self.bytes[self.at..end]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        self.at = end;
        out
    }

    fn skip(&mut self, n: usize) {
        self.at += 4 * n;
    }
}
