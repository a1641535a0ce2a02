//! Token eviction over any layer (docs/contracts/qfilters.md): Q-Filters (calibrated filters,
//! keep the keys that project most on the direction the layer's queries concentrate on),
//! StreamingLLM (sinks + the most recent tokens) and key norm (keep the smallest ‖k‖), each
//! combinable with every codec (`kivi-4+qfilters:budget=256,calib=FILE`, or `--evict` in the
//! CLI). Scores are kept per (token, KV head) beside the cache; a head past its budget evicts
//! whole units (one block of the codecs), whose stored words move down; kept tokens keep their
//! absolute positions, which attention reads.
//!
//! - [`config`]: the policy grammar and its checks;
//! - [`score`]: the scoring at append (CPU reference: `crate::cpu::policy::evict_score`);
//! - [`kernels`]: the GPU kernels (`evict_score`, `evict_select`, `evict_compact`; WGSL subgroup
//!   and workgroup variants, MSL) and their plans;
//! - [`select`]: which units each head evicts (CPU reference of `evict_select`);
//! - [`layer`]: [`EvictingLayer`], the layer that applies it;
//! - [`spearman`]: the quality check (score vs. the attention mass each key receives).
//!
//! On WGSL paths the layer's words and tables stay on the device and an eviction reads
//! nothing back: scoring (`evict_score`, or the CPU twin's scores queued for host appends),
//! selection (`evict_select`) and compaction (`evict_compact`) run there, and attention reads
//! the held tokens' positions from a positions stream (`ATT_POS`); see [`layer`].

pub mod config;
pub(crate) mod device;
pub mod kernels;
pub mod layer;
pub mod score;
pub mod select;
pub mod spearman;

pub use config::{Eviction, POLICY_NAMES, Policy};
pub use layer::{EvictingLayer, EvictionState};
