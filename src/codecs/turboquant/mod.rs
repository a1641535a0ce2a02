//! TurboQuant (Zandieh et al., ICLR 2026; docs/contracts/turboquant.md): each (token, head)
//! vector is normalized, rotated by a random Hadamard rotation (signs from SplitMix64, then
//! the Sylvester–Hadamard butterflies) so that every coordinate follows one known density,
//! and quantized coordinate-wise with the Lloyd–Max codebook of that density; one f16 norm
//! per vector, no per-group parameters. MSE: one stage of b bits; RVQ: a second stage codes
//! the first one's error. Attention runs on the codes in the rotated space.
//!
//! - [`config`]: one side's settings ([`TqSide`]: variant, bits, seed);
//! - [`layout`]: how codes, norms, signs and codebooks sit in u32 words;
//! - [`kernels`], [`plans`]: the kernels (`turboquant_quant`, `turboquant_dequant`, the
//!   attention hooks) and their dispatch plans;
//! - [`codec`]: the [`crate::codec::Codec`] of one side;
//! - [`prod`]: TurboQuant-Prod keys ([`ProdCodec`]: CPU, WGSL and MSL);
//! - [`method`]: its rows of the method table (`turboquant-mse`, `turboquant-rvq`,
//!   `turboquant-prod`).
//!
//! The CPU references are in [`crate::cpu::turboquant`].

pub mod codec;
pub mod config;
pub mod kernels;
pub mod layout;
pub mod method;
pub mod plans;
pub mod prod;

pub use codec::TurboQuantCodec;
pub use config::{TqSide, Variant};
pub use layout::Layout;
pub use method::{ROW_MSE, ROW_PROD, ROW_RVQ};
pub use prod::{ProdCodec, ProdSide};
