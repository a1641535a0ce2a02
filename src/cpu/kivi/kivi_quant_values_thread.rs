//! CPU twin of `wgsl/kivi/kivi_quant_values_thread.wgsl`: the same contract as
//! `kivi_quant_values` (per-token value quantization, docs/contracts/kivi.md) with another GPU
//! mapping (one invocation per group instead of a slice of 32), so the same reference.

pub use super::kivi_quant_values::kivi_quant_values as kivi_quant_values_thread;
