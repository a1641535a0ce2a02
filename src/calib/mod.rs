//! Calibration shared by VecInfer (docs/contracts/vecinfer.md, "Codebooks") and Q-Filters
//! (docs/contracts/qfilters.md, "Calibration"): run a model over a text, collect every layer's
//! post-RoPE queries, keys and values, and derive per (layer, head)
//! - VecInfer: the key smoothing λ `[L, Hkv, D]` and k-means codebooks of transformed key and
//!   value sub-vectors `[L, Hkv, C, d_s]` per preset (`kmeans`);
//! - Q-Filters: the first right singular vector of each query head's queries, oriented by the
//!   majority rule, averaged over a KV head's query heads (`qfilters`, `eigen`; both need the
//!   `model` feature).
//!
//! [`file`](mod@file) (always built: codecs read it) is the versioned safetensors file; the training
//! (`train`, needs the `model` feature for the forward pass and rayon) writes it.

#[cfg(feature = "model")]
pub mod eigen;
pub mod file;
#[cfg(feature = "model")]
pub mod kmeans;
#[cfg(feature = "model")]
pub mod qfilters;
#[cfg(feature = "model")]
pub mod train;

pub use file::{
    Calibration, CenteredKeyTables, HeadReport, Meta, ModelIdentity, QfilterTables, VecinferTables,
};
