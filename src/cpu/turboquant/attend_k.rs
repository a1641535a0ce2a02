//! CPU twin of `wgsl/turboquant/attend_k.wgsl` (the key hooks of attention on TurboQuant
//! codes, docs/contracts/turboquant.md "Attention on TurboQuant codes"): the query is rotated
//! once per row with its KV head's key signs (`q′ = rotate(q)`, D → P zero-padded), and the
//! score of a stored key is `n_j · Σ_i q′_i·ŷ_{j,i}` (f32, index order) with ŷ the centroids
//! of its codes (RVQ: ŷ₁ + ê₂ per coordinate, in f32). No key is ever rotated back. The GPU
//! folds the same products in another order (rel. 1e-4 per attention row).

use super::rotation::rotate_in_place;
use crate::codecs::turboquant::layout::{Layout, code_at, norm_at};

/// `q′ = rotate(q)`: `q` (D values) zero-padded to P = `signs.len()`, then signs, butterflies
/// and × 1/√P ([`super::rotation`]); into `out` (P values).
pub fn prepare_query(q: &[f32], signs: &[f32], out: &mut Vec<f32>) {
    out.clear();
    out.extend_from_slice(q);
    out.resize(signs.len(), 0.0);
    rotate_in_place(out, signs);
}

/// ŷ of stored token `j`, head `h` (`out`: P values): the centroids of its S code rows of
/// `codes` `[tokens][H][S][row_words]`, summed in stage order (`centroids[s]`: stage s's 2^b
/// f32 centroids).
pub fn decode(
    l: &Layout,
    codes: &[u32],
    centroids: &[Vec<f32>],
    j: usize,
    h: usize,
    out: &mut [f32],
) {
    let rw = l.row_words();
    for (s, cb) in centroids.iter().enumerate() {
        let row = &codes[l.row_at(j, h, s)..][..rw];
        for (i, o) in out.iter_mut().enumerate() {
            let c = cb[code_at(row, i, l.bits)];
            *o = if s == 0 { c } else { *o + c };
        }
    }
}

/// The scores of stored token `j`, head `h` for the prepared queries `preps` (P values each):
/// `out[i] = n_j · Σ_c preps[i][c]·ŷ_c`, with `codes` and `norms` the side's streams
/// ([`Layout`]); `yhat` is scratch (P values).
#[allow(clippy::too_many_arguments)]
pub fn score(
    l: &Layout,
    codes: &[u32],
    norms: &[u32],
    centroids: &[Vec<f32>],
    preps: &[Vec<f32>],
    j: usize,
    h: usize,
    yhat: &mut Vec<f32>,
    out: &mut [f32],
) {
    yhat.resize(l.padded, 0.0);
    decode(l, codes, centroids, j, h, yhat);
    let n = norm_at(norms, l.norm_words(), j, h);
    for (o, p) in out.iter_mut().zip(preps) {
        let dot = p
            .iter()
            .zip(yhat.iter())
            .fold(0.0f32, |a, (x, y)| a + x * y);
        *o = n * dot;
    }
}
