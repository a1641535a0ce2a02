//! CPU reference of TurboQuant (../shared/spec/turboquant.md): a random rotation, then a
//! scalar Lloyd–Max codebook per coordinate. MSE (b bits), RVQ (two stages of b bits) and
//! Prod (keys: MSE at b − 1 bits plus a 1-bit sketch of the residual).
//!
//! - [`rotation`]: P, c = 1/√P, the rotation and its inverse.
//! - [`codebook`]: the f64 Lloyd–Max tables, rounded to f32, cached per (P, b).
//! - [`layout`]: shapes of codes, norms, signs and sketches.
//! - [`quant`], [`dequant`]: twins of the kernels `turboquant_quant` and `turboquant_dequant`.
//! - [`score`]: the attention side (rotated queries, scores on codes, rotated values).

pub mod codebook;
mod density;
pub mod dequant;
pub mod layout;
pub mod quant;
pub mod rotation;
pub mod score;
