//! One folder per codec (DESIGN.md's naming rule: `src/codecs/<codec>/`, its CPU references
//! in `src/cpu/<codec>/`, its kernels in `wgsl/<codec>/` and `msl/<codec>/`). A codec folder
//! holds its configuration, its method-table row, its storage layout and dispatch plans, and
//! its [`crate::codec::Codec`] implementation; never store, ring, append or memory code.

pub mod f16;
pub mod kivi;
pub mod qjl;
pub mod turboquant;
pub mod vecinfer;
