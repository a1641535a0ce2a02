//! CPU references of KIVI's kernels (docs/contracts/kivi.md; layout in
//! [`crate::codecs::kivi::layout`]).

pub mod attend_k;
pub mod attend_v;
pub mod kivi_dequant_keys;
pub mod kivi_dequant_values;
pub mod kivi_group;
pub mod kivi_quant_keys;
pub mod kivi_quant_values;
pub mod kivi_quant_values_thread;
