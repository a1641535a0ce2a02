//! Hyper-parameters and f32 weights of a llama-family model, filled by the loaders
//! ([`super::llama2c`], and the GGUF reader) and read by the forward pass ([`super::forward`]).
//!
//! One forward serves every architecture: what differs between them is data here, not code
//! there. Llama (llama2.c, SmolLM2): no projection biases, RoPE on adjacent pairs (the GGUF
//! converter permuted q/k rows into that order), tied or untied output head. Qwen2
//! (Qwen2.5-Coder): biases on the q, k and v projections (added before RoPE), RoPE on the
//! halves `(i, i + D/2)` (NeoX order, no permutation in the file), an untied output head.

use crate::error::{Error, Result};

/// Which channels RoPE rotates together within a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RopePairing {
    /// Channels (2i, 2i+1) with frequency θ^(−2i/D): llama2.c's `run.c`, and GGUF llama
    /// checkpoints (whose q/k rows the converter permuted into this order).
    #[default]
    Adjacent,
    /// Channels (i, i + D/2) with frequency θ^(−2i/D): Hugging Face `rotate_half` order.
    Halves,
}

/// Which architecture a checkpoint declares (GGUF `general.architecture`); informative: the
/// forward reads the fields that follow from it ([`Config::qkv_bias`], [`Config::rope_pairing`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Arch {
    /// `llama` (and llama2.c checkpoints).
    #[default]
    Llama,
    /// `qwen2`.
    Qwen2,
}

impl Arch {
    /// The GGUF name (`llama`, `qwen2`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
        }
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The shape of a llama-family model.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The architecture the checkpoint declares.
    pub arch: Arch,
    /// Model (residual stream) width.
    pub dim: usize,
    /// FFN hidden width.
    pub hidden: usize,
    /// Transformer blocks.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention: `heads % kv_heads == 0`).
    pub kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Vocabulary size (rows of the embedding and of the output head).
    pub vocab: usize,
    /// Longest sequence the model was trained for; the forward pass refuses positions past it.
    pub max_seq: usize,
    /// RMSNorm epsilon.
    pub norm_eps: f32,
    /// RoPE base θ.
    pub rope_theta: f32,
    /// RoPE channel pairing.
    pub rope_pairing: RopePairing,
    /// The q, k and v projections have biases ([`LayerWeights::bq`], ...), added before RoPE.
    pub qkv_bias: bool,
}

impl Config {
    /// Width of all query heads together, `heads · head_dim`.
    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Width of all key (or value) heads together, `kv_heads · head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// Checks that the sizes are positive, consistent and not absurdly large.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(format!("model config: {m}")));
        for (name, v) in [
            ("dim", self.dim),
            ("hidden", self.hidden),
            ("layers", self.layers),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("head_dim", self.head_dim),
            ("vocab", self.vocab),
            ("max_seq", self.max_seq),
        ] {
            if v == 0 {
                return bad(format!("{name} must be positive"));
            }
            if v > 1 << 24 {
                return bad(format!("{name} = {v} is too large"));
            }
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return bad(format!(
                "{} query heads is not a multiple of {} KV heads",
                self.heads, self.kv_heads
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad(format!(
                "head_dim {} is odd (RoPE rotates pairs)",
                self.head_dim
            ));
        }
        if !(self.norm_eps.is_finite() && self.norm_eps >= 0.0) {
            return bad(format!(
                "norm_eps {} is not a finite non-negative number",
                self.norm_eps
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return bad(format!(
                "rope_theta {} is not a finite positive number",
                self.rope_theta
            ));
        }
        Ok(())
    }
}

/// One transformer block's weights, f32, matrices row-major `[out, in]` (`y = W x`).
#[derive(Clone, Debug, Default)]
pub struct LayerWeights {
    /// RMSNorm gain before attention, `[dim]`.
    pub attn_norm: Vec<f32>,
    /// Query projection, `[heads·head_dim, dim]`.
    pub wq: Vec<f32>,
    /// Key projection, `[kv_heads·head_dim, dim]`.
    pub wk: Vec<f32>,
    /// Value projection, `[kv_heads·head_dim, dim]`.
    pub wv: Vec<f32>,
    /// Query bias `[heads·head_dim]` when [`Config::qkv_bias`], else empty.
    pub bq: Vec<f32>,
    /// Key bias `[kv_heads·head_dim]` when [`Config::qkv_bias`], else empty.
    pub bk: Vec<f32>,
    /// Value bias `[kv_heads·head_dim]` when [`Config::qkv_bias`], else empty.
    pub bv: Vec<f32>,
    /// Attention output projection, `[dim, heads·head_dim]`.
    pub wo: Vec<f32>,
    /// RMSNorm gain before the FFN, `[dim]`.
    pub ffn_norm: Vec<f32>,
    /// FFN gate, `[hidden, dim]`.
    pub w1: Vec<f32>,
    /// FFN down projection, `[dim, hidden]`.
    pub w2: Vec<f32>,
    /// FFN up projection, `[hidden, dim]`.
    pub w3: Vec<f32>,
}

/// All weights of a model, f32.
#[derive(Clone, Debug)]
pub struct Weights {
    /// The shape.
    pub config: Config,
    /// Token embedding, `[vocab, dim]`.
    pub token_embedding: Vec<f32>,
    /// One entry per block.
    pub layers: Vec<LayerWeights>,
    /// Final RMSNorm gain, `[dim]`.
    pub final_norm: Vec<f32>,
    /// Output head `[vocab, dim]`; `None` when tied to the embedding.
    pub output: Option<Vec<f32>>,
}

impl Weights {
    /// Assembles and validates weights (every tensor's length against `config`, every value
    /// finite).
    pub fn from_parts(
        config: Config,
        token_embedding: Vec<f32>,
        layers: Vec<LayerWeights>,
        final_norm: Vec<f32>,
        output: Option<Vec<f32>>,
    ) -> Result<Self> {
        let w = Self {
            config,
            token_embedding,
            layers,
            final_norm,
            output,
        };
        w.validate()?;
        Ok(w)
    }

    /// The output head `[vocab, dim]` (the embedding when tied).
    pub fn output_head(&self) -> &[f32] {
        self.output.as_deref().unwrap_or(&self.token_embedding)
    }

    /// True when the output head is the embedding.
    pub fn tied(&self) -> bool {
        self.output.is_none()
    }

    /// Number of f32 parameters held (a tied head counted once).
    pub fn parameters(&self) -> usize {
        let per_layer: usize = self
            .layers
            .iter()
            .map(|l| {
                l.attn_norm.len()
                    + l.wq.len()
                    + l.wk.len()
                    + l.wv.len()
                    + l.bq.len()
                    + l.bk.len()
                    + l.bv.len()
                    + l.wo.len()
                    + l.ffn_norm.len()
                    + l.w1.len()
                    + l.w2.len()
                    + l.w3.len()
            })
            .sum();
        self.token_embedding.len()
            + per_layer
            + self.final_norm.len()
            + self.output.as_ref().map_or(0, Vec::len)
    }

    /// Checks every tensor's length against the config and that all values are finite.
    pub fn validate(&self) -> Result<()> {
        let c = &self.config;
        c.validate()?;
        let check = |what: &'static str, t: &[f32], expected: usize| -> Result<()> {
            if t.len() != expected {
                return Err(Error::LengthMismatch {
                    what,
                    expected,
                    actual: t.len(),
                });
            }
            if let Some(i) = t.iter().position(|x| !x.is_finite()) {
                return Err(Error::NonFinite {
                    what,
                    index: i,
                    value: t[i],
                });
            }
            Ok(())
        };
        if self.layers.len() != c.layers {
            return Err(Error::LengthMismatch {
                what: "model layers",
                expected: c.layers,
                actual: self.layers.len(),
            });
        }
        check("token embedding", &self.token_embedding, c.vocab * c.dim)?;
        for l in &self.layers {
            check("attention norm", &l.attn_norm, c.dim)?;
            check("wq", &l.wq, c.q_dim() * c.dim)?;
            check("wk", &l.wk, c.kv_dim() * c.dim)?;
            check("wv", &l.wv, c.kv_dim() * c.dim)?;
            let bias = |n: usize| if c.qkv_bias { n } else { 0 };
            check("q bias", &l.bq, bias(c.q_dim()))?;
            check("k bias", &l.bk, bias(c.kv_dim()))?;
            check("v bias", &l.bv, bias(c.kv_dim()))?;
            check("wo", &l.wo, c.dim * c.q_dim())?;
            check("ffn norm", &l.ffn_norm, c.dim)?;
            check("w1 (gate)", &l.w1, c.hidden * c.dim)?;
            check("w2 (down)", &l.w2, c.dim * c.hidden)?;
            check("w3 (up)", &l.w3, c.hidden * c.dim)?;
        }
        check("final norm", &self.final_norm, c.dim)?;
        if let Some(o) = &self.output {
            check("output head", o, c.vocab * c.dim)?;
        }
        Ok(())
    }
}
