//! VecInfer (docs/contracts/vecinfer.md): keys smoothed by a calibrated λ and both sides
//! rotated by the Sylvester–Hadamard transform, then stored as n_sub = P/d_s indices into a
//! calibrated codebook of sub-vectors per (layer, KV head); attention sums per-query LUT
//! entries for keys and accumulates values in the transformed space.
//!
//! - [`config`]: one side's settings ([`VecSide`]: preset, the calibration file);
//! - [`method`]: the `vecinfer` row of the method table (`bits`, `kbits`, `vbits`, `calib`);
//! - [`codec`]: the [`crate::codec::Codec`] of one side;
//! - [`kernels`], [`plans`]: the fused quantize kernel and its dispatch plans.
//!
//! The CPU references are in [`crate::cpu::vecinfer`]; the calibration in [`crate::calib`].

pub mod codec;
pub mod config;
pub mod kernels;
pub mod method;
pub mod plans;

pub use codec::VecInferCodec;
pub use config::VecSide;
pub use method::ROW;
