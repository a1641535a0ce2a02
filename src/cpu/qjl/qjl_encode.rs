//! CPU twin of the kernel `qjl_encode` (wgsl/qjl/, msl/qjl/) (docs/contracts/qjl.md, "Stored per key").
//! One "invocation" owns one (token, head) key k (D values, rounded to f16 on entry):
//! n = ‖k‖₂ in f32 (sum of squares in index order, correctly rounded square root), stored f16;
//! σ_i = [(S k)_i ≥ 0] for i = 0..m, (S k)_i summed in index order in f32.

use half::f16;

use super::QjlLayout;
use crate::cpu::common::sketch::sign_row;
use crate::cpu::common::vector::{batch_len, check_len, f16_input, mat_vec, norm, store_norm};
use crate::error::Result;

/// QJL codes of a batch of n keys.
#[derive(Clone, Debug, PartialEq)]
pub struct QjlCodes {
    /// `[n][H][m/32]`: bit i of a row is σ_i (LSB-first), every row whole words.
    pub signs: Vec<u32>,
    /// `[n][H]`.
    pub norms: Vec<f16>,
}

/// Encodes keys `k` `[n, H, D]` with the layer's sketch `[m][D]` ([`super::sketch_table`]).
/// Errors: NaN, ±Inf or beyond-f16 input ([`crate::Error::NonFinite`]), a norm beyond f16
/// ([`crate::Error::Config`] naming token and head), bad lengths.
pub fn qjl_encode(l: &QjlLayout, sketch: &[f32], k: &[f32]) -> Result<QjlCodes> {
    check_len("QJL sketch [m][D]", l.sketch_len(), sketch.len())?;
    let n = batch_len(k.len(), l.heads, l.dim, "QJL keys")?;
    let k = f16_input(k, "QJL keys")?;
    let mut out = QjlCodes {
        signs: Vec::with_capacity(n * l.heads * l.sign_words()),
        norms: Vec::with_capacity(n * l.heads),
    };
    for (i, key) in k.chunks_exact(l.dim).enumerate() {
        out.norms
            .push(store_norm(norm(key), "QJL key", i / l.heads, i % l.heads)?);
        out.signs
            .extend(sign_row(&mat_vec(sketch, l.m, l.dim, key)?));
    }
    Ok(out)
}
