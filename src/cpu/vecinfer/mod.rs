//! CPU reference of VecInfer (docs/contracts/vecinfer.md): outlier smoothing (λ) and a
//! Sylvester–Hadamard transform, product vector quantization of the transformed vectors into
//! indices of a per-(layer, KV head) codebook of sub-vectors, the reconstruction, and the
//! look-up-table (LUT) score of attention.
//!
//! Shapes (one layer): keys and values `[T, H, D]`; λ `[H, D]`; a codebook `[H, C, d_s]`
//! (f32, row c of head h at `(h·C + c)·d_s`); P = next power of two ≥ D; n_sub = P/d_s indices
//! per vector, `[T, H, n_sub]` before packing (bitpack.md, log2 C bits each, one row of n_sub
//! per vector). Arithmetic in f32, sums in index order, no fused multiply-add.

pub mod attend_k;
pub mod attend_v;
pub mod preset;
pub mod transform;
pub mod vecinfer_dequant;
pub mod vecinfer_quant;

pub use preset::Preset;
