//! The CPU reference: one folder per codec (`src/cpu/<codec>/<kernel>.rs`), one file per
//! kernel with the same stem as `wgsl/<codec>/<kernel>.wgsl` and `msl/<codec>/<kernel>.metal`,
//! keeping the GPU loop structure so the three can be read side by side. These functions
//! define the contract; GPU paths are tested against them. [`attend`] is the shared core of
//! attention (its codec hooks are the codecs' own); [`common`] holds what the per-token codecs
//! share (SplitMix64 streams, sketches, f32 vector arithmetic in the specs' order).
//!
//! **Unstable.** This module is kvpack's machinery, public so that its tests, benches and tools
//! can drive single kernels; it is not part of the supported API and may change in any release
//! (the supported surface is what `kvpack`'s crate root re-exports).

pub mod attend;
pub mod bitpack;
pub mod common;
pub mod f16;
pub mod kivi;
pub mod policy;
pub mod qjl;
pub mod turboquant;
pub mod turboquant_prod;
pub mod vecinfer;

pub use bitpack::bitunpack;
