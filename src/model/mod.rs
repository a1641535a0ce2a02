//! Real models end to end: llama-family checkpoints (llama2.c, llama and qwen2 GGUFs), their
//! tokenizers, and a CPU f32
//! forward pass whose attention runs through kvpack's caches ([`crate::KvLayer`]: the f16
//! baseline, KIVI, ... on any path), for perplexity, fidelity and generation.
//!
//! ```no_run
//! use std::sync::Arc;
//! use kvpack::model::{self, Sampler, Session};
//! let weights = Arc::new(model::llama2c::load("stories260K.bin")?);
//! let tok = model::Tokenizer::load("tok512.bin")?;
//! let ctx = kvpack::Context::cpu();
//! let method = kvpack::Method::parse("kivi-4")?;
//! let mut s = Session::new(weights, &ctx, method, kvpack::PathChoice::Cpu)?;
//! let prompt = tok.encode("Once upon a time", true, false);
//! let out = s.generate(&prompt, 64, &[1, 2], &mut Sampler::greedy(), |_| {})?;
//! println!("{}", tok.decode(&[prompt, out].concat()));
//! # Ok::<(), kvpack::Error>(())
//! ```

pub mod bpe;
pub mod config;
#[cfg(target_arch = "x86_64")]
mod dot_avx2;
pub mod fetched;
pub mod forward;
pub mod gguf;
pub mod llama2c;
pub mod load;
pub mod quant_k;
pub mod tokenizer_llama2c;

pub use config::{Arch, Config, LayerWeights, RopePairing, Weights};
pub use forward::{QkvCapture, Sampler, Session, perplexity};
pub use load::{LoadedModel, load_model};
pub use tokenizer_llama2c::Tokenizer;
