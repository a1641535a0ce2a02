//! One entry point for every model kvpack runs: [`load_model`] takes a `.gguf` path, a
//! llama2.c v0 `.bin` path, or the name of a model that `scripts/fetch-models.sh` fetches
//! (`smollm2`, `qwen2.5-coder-0.5b`, `qwen2.5-coder-1.5b`: [`super::fetched`]), and returns the
//! config, the f32 weights and the model's own tokenizer.
//!
//! ```no_run
//! use std::sync::Arc;
//! use kvpack::model::{Sampler, Session, load_model};
//! let m = load_model("smollm2", None)?;
//! let prompt = m.tokenizer.encode("The capital of France is");
//! let ctx = kvpack::Context::cpu();
//! let method = kvpack::Method::parse("kivi-4")?;
//! let mut s = Session::new(Arc::new(m.weights), &ctx, method, kvpack::PathChoice::Cpu)?;
//! let out = s.generate(&prompt, 8, &m.tokenizer.stop_tokens(), &mut Sampler::greedy(), |_| {})?;
//! println!("{}", m.tokenizer.decode(&out));
//! # Ok::<(), kvpack::Error>(())
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::bpe::Bpe;
use super::config::{Arch, Config, LayerWeights, RopePairing, Weights};
use super::fetched;
use super::gguf::{GgufFile, Tensor};
use super::llama2c;
use super::tokenizer_llama2c;
use crate::error::{Error, Result};

/// A model's tokenizer: llama2.c's SentencePiece-style `tokenizer.bin`, or the GPT-2
/// byte-level BPE stored in a GGUF.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)] // one per loaded model
pub enum Tokenizer {
    /// llama2.c `tok*.bin` (BOS 1, EOS 2; `encode` prepends BOS as `run.c` does).
    Llama2c(tokenizer_llama2c::Tokenizer),
    /// Byte-level BPE from the GGUF (SmolLM2 and Qwen2.5 add no BOS).
    Bpe(Bpe),
}

/// `<|endoftext|>`: GPT-2-family vocabularies end documents with it.
const END_OF_TEXT: &str = "<|endoftext|>";

impl Tokenizer {
    /// Encodes text the way the model was trained to see it: llama2.c prepends BOS (id 1) and
    /// a space; the GGUF BPEs (SmolLM2, Qwen2.5) add nothing.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        match self {
            Self::Llama2c(t) => t.encode(text, true, false),
            Self::Bpe(b) => b.encode(text),
        }
    }

    /// Decodes ids to text (BOS/EOS print nothing for llama2.c; ids outside the vocabulary are
    /// skipped; a UTF-8 character cut off at the end becomes U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> String {
        match self {
            Self::Llama2c(t) => t.decode(ids),
            Self::Bpe(b) => {
                let n = b.vocab_size() as u32;
                let kept: Vec<u32> = ids.iter().copied().filter(|&i| i < n).collect();
                b.decode(&kept).unwrap_or_default()
            }
        }
    }

    /// The BOS id that [`Tokenizer::encode`] prepends, `None` when it prepends none.
    pub fn bos(&self) -> Option<u32> {
        match self {
            Self::Llama2c(_) => Some(1),
            Self::Bpe(_) => None,
        }
    }

    /// Ids that end a generation: BOS and EOS for llama2.c; EOS (`<|im_end|>` in SmolLM2),
    /// `<|endoftext|>` and BOS (`<|im_start|>`) for a GGUF BPE.
    pub fn stop_tokens(&self) -> Vec<u32> {
        match self {
            Self::Llama2c(_) => vec![1, 2],
            Self::Bpe(b) => {
                let mut v: Vec<u32> = [b.eos(), b.token_id(END_OF_TEXT), b.bos()]
                    .into_iter()
                    .flatten()
                    .collect();
                v.dedup();
                v
            }
        }
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        match self {
            Self::Llama2c(t) => t.vocab_size(),
            Self::Bpe(b) => b.vocab_size(),
        }
    }
}

/// A model ready to run: its name, shape, f32 weights and tokenizer.
#[derive(Clone, Debug)]
pub struct LoadedModel {
    /// A display name: the file stem (`SmolLM2-135M-Instruct.Q4_1`, `stories260K`,
    /// `qwen2.5-coder-0.5b-instruct-q4_k_m`).
    pub name: String,
    /// The shape (also in `weights.config`).
    pub config: Config,
    /// The f32 weights (wrap in an `Arc` for [`super::Session::new`]).
    pub weights: Weights,
    /// The model's tokenizer.
    pub tokenizer: Tokenizer,
}

/// Loads a model by `spec`:
/// - a name from [`fetched::FETCHED`] (`smollm2`, `qwen2.5-coder-0.5b`, `qwen2.5-coder-1.5b`,
///   any ASCII case): that model's GGUF in the model cache ([`fetched::find`]: an error that
///   says to run `scripts/fetch-models.sh NAME` when it is missing);
/// - a `.gguf` path (or any file that starts with the GGUF magic): a llama or qwen2 GGUF, its
///   tokenizer the BPE stored in it (`tokenizer` must be `None`);
/// - any other path: a llama2.c v0 checkpoint, its tokenizer from `tokenizer`, else the
///   `tok*.bin` beside it whose vocabulary size matches the model.
pub fn load_model(spec: &str, tokenizer: Option<&Path>) -> Result<LoadedModel> {
    if fetched::path(spec).is_some() {
        let path = fetched::find(spec)?;
        return load_gguf(&path, tokenizer);
    }
    let path = Path::new(spec);
    if !path.is_file() {
        return Err(Error::Config(format!(
            "model {spec:?} is neither a fetched model's name ({}) nor an existing file (a .gguf \
             or a llama2.c .bin)",
            fetched::names()
        )));
    }
    if is_gguf(path)? {
        load_gguf(path, tokenizer)
    } else {
        load_llama2c(path, tokenizer)
    }
}

fn io_err(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        source,
    }
}

fn is_gguf(path: &Path) -> Result<bool> {
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    {
        return Ok(true);
    }
    use std::io::Read;
    let mut magic = [0u8; 4];
    let mut f = std::fs::File::open(path).map_err(|e| io_err(path, e))?;
    let n = f.read(&mut magic).map_err(|e| io_err(path, e))?;
    Ok(n == 4 && &magic == b"GGUF")
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Loads a llama or qwen2 GGUF and its BPE tokenizer.
pub fn load_gguf(path: &Path, tokenizer: Option<&Path>) -> Result<LoadedModel> {
    if let Some(t) = tokenizer {
        return Err(Error::Config(format!(
            "{} is a GGUF, which carries its own tokenizer; drop the tokenizer argument {}",
            path.display(),
            t.display()
        )));
    }
    let file = GgufFile::open(path)?;
    let weights = weights_from_gguf(&file).map_err(|e| match e {
        Error::Config(m) => Error::Config(format!("{}: {m}", path.display())),
        other => other,
    })?;
    let bpe = Bpe::from_gguf(&file)?;
    if bpe.vocab_size() != weights.config.vocab {
        return Err(Error::Config(format!(
            "{}: the tokenizer has {} tokens but the model's vocabulary is {}",
            path.display(),
            bpe.vocab_size(),
            weights.config.vocab
        )));
    }
    let name = stem(path);
    Ok(LoadedModel {
        name,
        config: weights.config.clone(),
        weights,
        tokenizer: Tokenizer::Bpe(bpe),
    })
}

/// Builds f32 [`Weights`] from a llama or qwen2 GGUF: hyper-parameters from its metadata
/// (RMSNorm eps, RoPE θ, head counts, context length), tensors from
/// [`GgufFile::llama_tensors`] (already row-major `[out, in]`, the forward pass's `y = W x`
/// layout), the output head tied to the embedding when the file has no `output.weight`.
/// - `llama`: RoPE on adjacent pairs (llama.cpp's converter permuted the q/k rows into that
///   order), no projection biases.
/// - `qwen2`: RoPE on the halves `(i, i + D/2)` (llama.cpp's NeoX mode; the converter does
///   not permute qwen2's rows), q/k/v biases (required).
pub fn weights_from_gguf(file: &GgufFile) -> Result<Weights> {
    let p = file.llama_params()?;
    let (arch, rope_pairing) = match p.arch.as_str() {
        "llama" => (Arch::Llama, RopePairing::Adjacent),
        "qwen2" => (Arch::Qwen2, RopePairing::Halves),
        other => {
            return Err(Error::Config(format!(
                "architecture {other:?} is not supported (llama and qwen2 are)"
            )));
        }
    };
    if arch == Arch::Qwen2 && !p.qkv_bias {
        return Err(Error::Config(
            "a qwen2 checkpoint needs q/k/v biases, but `blk.0.attn_q.bias` is missing".into(),
        ));
    }
    if p.rope_dim != p.head_dim {
        return Err(Error::Config(format!(
            "partial RoPE (rotary dim {} of head_dim {}) is not supported",
            p.rope_dim, p.head_dim
        )));
    }
    let config = Config {
        dim: p.d_model,
        hidden: p.ffn_dim,
        layers: p.n_layers,
        heads: p.n_heads,
        kv_heads: p.n_kv_heads,
        head_dim: p.head_dim,
        vocab: p.vocab_size,
        max_seq: p.context_length,
        norm_eps: p.rms_eps,
        rope_theta: p.rope_theta,
        rope_pairing,
        arch,
        qkv_bias: p.qkv_bias,
    };
    config.validate()?;
    let mut t: HashMap<String, Tensor> = file.llama_tensors()?;
    let mut take = |name: String| -> Result<Vec<f32>> {
        t.remove(&name)
            .map(|x| x.data)
            .ok_or_else(|| Error::Config(format!("tensor `{name}` is missing")))
    };
    let token_embedding = take("token_embd.weight".into())?;
    let mut layers = Vec::with_capacity(p.n_layers);
    for l in 0..p.n_layers {
        let mut bias = |n: &str| {
            if p.qkv_bias {
                take(format!("blk.{l}.{n}.bias"))
            } else {
                Ok(Vec::new())
            }
        };
        let (bq, bk, bv) = (bias("attn_q")?, bias("attn_k")?, bias("attn_v")?);
        let mut w = |n: &str| take(format!("blk.{l}.{n}.weight"));
        layers.push(LayerWeights {
            bq,
            bk,
            bv,
            attn_norm: w("attn_norm")?,
            wq: w("attn_q")?,
            wk: w("attn_k")?,
            wv: w("attn_v")?,
            wo: w("attn_output")?,
            ffn_norm: w("ffn_norm")?,
            w1: w("ffn_gate")?,
            w2: w("ffn_down")?,
            w3: w("ffn_up")?,
        });
    }
    let final_norm = take("output_norm.weight".into())?;
    let output = if p.tied_embeddings {
        None
    } else {
        Some(take("output.weight".into())?)
    };
    Weights::from_parts(config, token_embedding, layers, final_norm, output)
}

/// Loads a llama2.c v0 checkpoint and its tokenizer (`tokenizer`, else a `tok*.bin` beside
/// the checkpoint whose vocabulary size matches).
pub fn load_llama2c(path: &Path, tokenizer: Option<&Path>) -> Result<LoadedModel> {
    let weights = llama2c::load(path)?;
    let vocab = weights.config.vocab;
    let tok = match tokenizer {
        Some(t) => {
            let tok = tokenizer_llama2c::Tokenizer::load(t)?;
            if tok.vocab_size() != vocab {
                return Err(Error::Config(format!(
                    "tokenizer {} has {} tokens but model {} has a vocabulary of {vocab}",
                    t.display(),
                    tok.vocab_size(),
                    path.display()
                )));
            }
            tok
        }
        None => find_llama2c_tokenizer(path, vocab)?,
    };
    Ok(LoadedModel {
        name: stem(path),
        config: weights.config.clone(),
        weights,
        tokenizer: Tokenizer::Llama2c(tok),
    })
}

fn find_llama2c_tokenizer(model: &Path, vocab: usize) -> Result<tokenizer_llama2c::Tokenizer> {
    let dir = match model.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut candidates: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| io_err(&dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p != model
                && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                    n.starts_with("tok") && n.to_ascii_lowercase().ends_with(".bin")
                })
        })
        .collect();
    candidates.sort();
    let mut seen = Vec::new();
    for c in &candidates {
        match tokenizer_llama2c::Tokenizer::load(c) {
            Ok(t) if t.vocab_size() == vocab => return Ok(t),
            Ok(t) => seen.push(format!("{} ({} tokens)", c.display(), t.vocab_size())),
            Err(e) => seen.push(format!("{} ({e})", c.display())),
        }
    }
    Err(Error::Config(format!(
        "no llama2.c tokenizer for {} (vocabulary {vocab}) in {}: {}; pass one explicitly",
        model.display(),
        dir.display(),
        if seen.is_empty() {
            "no tok*.bin there".to_owned()
        } else {
            format!("found only {}", seen.join(", "))
        }
    )))
}
