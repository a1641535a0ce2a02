//! The CPU reference: one file per kernel, same stem as `wgsl/<kernel>.wgsl` and
//! `msl/<kernel>.metal`, keeping the GPU loop structure so the three can be read side by side.
//! These functions define the contract; GPU paths are tested against them.

pub mod attend;
pub mod bitpack;
pub mod bitunpack;
pub mod common;
pub mod kivi_dequant_keys;
pub mod kivi_dequant_values;
pub mod kivi_group;
pub mod kivi_quant_keys;
pub mod kivi_quant_values;
pub mod qjl;
pub mod turboquant;
