//! CPU reference of TurboQuant-Prod's attention hooks (docs/contracts/turboquant.md
//! "TurboQuant-Prod"); its encoder is [`crate::cpu::turboquant::turboquant_prod_quant`].
//!
//! - [`attend_k`]: twin of `wgsl/turboquant_prod/attend_k.wgsl` (the rotated query and `S q`
//!   once per query row, the MSE score plus the sketch correction).

pub mod attend_k;
