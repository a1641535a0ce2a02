//! CPU twin of `wgsl/turboquant/attend_k.wgsl` (the key hooks of attention on TurboQuant
//! codes, ../shared/spec/turboquant.md "Attention on TurboQuant codes"): the query is rotated
//! once per row with its KV head's key signs (`q′ = rotate(q)`, D → P zero-padded), and the
//! score of a stored key is `n_j · Σ_i q′_i·ŷ_{j,i}` (f32, index order) with ŷ the centroids
//! of its codes (RVQ: ŷ₁ + ê₂ per coordinate, in f32). No key is ever rotated back. The GPU
//! folds the same products in another order (rel. 1e-4 per attention row).

use super::rotation::rotate_in_place;
use crate::codecs::turboquant::layout::{Layout, code_at, norm_at};
use crate::cpu::common::sketch::{scale, signed_sum};
use crate::cpu::common::vector::dot;

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

/// TurboQuant-Prod's prepared query: `out` = `[q′ (P) | S q (m)]`, q′ from [`prepare_query`]
/// and `S q` the rows of `sketch` S `[m][P]` dotted with q zero-padded to P (f32, index order,
/// as [`crate::cpu::common::vector::mat_vec`]).
pub fn prepare_prod_query(q: &[f32], signs: &[f32], sketch: &[f32], m: usize, out: &mut Vec<f32>) {
    prepare_query(q, signs, out);
    let p = signs.len();
    let mut v = q.to_vec();
    v.resize(p, 0.0);
    for row in sketch.chunks_exact(p).take(m) {
        out.push(dot(row, &v));
    }
}

/// One Prod key's streams as [`score_prod`] reads them: the stage-1 `codes` and the `norms`,
/// `residual_norms` streams whole, `signs` the key's own sign row (m/32 words).
#[derive(Clone, Copy, Debug)]
pub struct ProdWords<'a> {
    /// Stage-1 codes `[tokens][H][row_words]`.
    pub codes: &'a [u32],
    /// This key's sign row.
    pub signs: &'a [u32],
    /// Norms `[tokens][ceil(H/2)]`.
    pub norms: &'a [u32],
    /// Residual norms ρ, packed as the norms.
    pub residual_norms: &'a [u32],
}

/// The Prod scores of stored token `j`, head `h` (../shared/spec/turboquant.md): for each
/// prepared query `[q′ | S q]` ([`prepare_prod_query`]),
/// `n · (Σ_i q′_i·ŷ₁_i + ρ · (√(π/2)/m · (2·Σ_{σ_i=1} (S q)_i − Σ_i (S q)_i)))`, in this order
/// (as [`crate::cpu::turboquant::score::prod_score`]); `yhat` is scratch (P values).
#[allow(clippy::too_many_arguments)]
pub fn score_prod(
    l: &Layout,
    w: ProdWords<'_>,
    centroids: &[Vec<f32>],
    preps: &[Vec<f32>],
    j: usize,
    h: usize,
    yhat: &mut Vec<f32>,
    out: &mut [f32],
) {
    yhat.resize(l.padded, 0.0);
    decode(l, w.codes, centroids, j, h, yhat);
    let n = norm_at(w.norms, l.norm_words(), j, h);
    let rho = norm_at(w.residual_norms, l.norm_words(), j, h);
    for (o, p) in out.iter_mut().zip(preps) {
        let (q_rot, sq) = p.split_at(l.padded);
        let mse = dot(q_rot, yhat);
        // The sign row is the layout's m/32 words: the sum cannot fail.
        let t = scale(sq.len()) * signed_sum(sq, w.signs).unwrap_or(f32::NAN);
        *o = n * (mse + rho * t);
    }
}
