//! CPU reference of TurboQuant (docs/contracts/turboquant.md): a random rotation, then a
//! scalar Lloyd–Max codebook per coordinate. MSE (b bits), RVQ (two stages of b bits) and
//! Prod (keys: MSE at b − 1 bits plus a 1-bit sketch of the residual).
//!
//! - [`rotation`]: P, c = 1/√P, the rotation and its inverse.
//! - [`codebook`]: the f64 Lloyd–Max tables, rounded to f32, cached per (P, b).
//! - [`layout`]: shapes of codes, norms, signs and sketches.
//! - [`turboquant_quant`], [`turboquant_prod_quant`], [`turboquant_dequant`]: twins of the
//!   kernels of the same names (`wgsl/turboquant/`, `msl/turboquant/`).
//! - [`attend_k`], [`attend_v`]: twins of the attention hooks (`wgsl/turboquant/attend_{k,v}.wgsl`):
//!   the rotated query and the score on codes; values in the rotated space and the inverse
//!   rotation of the output.
//! - [`score`]: the same attention side as batch helpers (and Prod's estimator).

pub mod attend_k;
pub mod attend_v;
pub mod codebook;
mod density;
pub mod layout;
pub mod rotation;
pub mod score;
pub mod turboquant_dequant;
pub mod turboquant_prod_quant;
pub mod turboquant_quant;
