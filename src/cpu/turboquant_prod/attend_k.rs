//! CPU twin of `wgsl/turboquant_prod/attend_k.wgsl` and `msl/turboquant_prod/attend_k.metal`
//! (TurboQuant-Prod's key hooks, docs/contracts/turboquant.md "Attention on TurboQuant codes"):
//! TurboQuant's rotated query ([`crate::cpu::turboquant::attend_k`]) and QJL's `S q`, once per
//! query row; the score of a stored key adds `n·ρ·√(π/2)/m·⟨S q, 2σ − 1⟩` to the MSE score.

use crate::codecs::turboquant::layout::{Layout, norm_at};
use crate::cpu::common::sketch::{scale, signed_sum};
use crate::cpu::common::vector::dot;
use crate::cpu::turboquant::attend_k::{decode, prepare_query};

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

/// The Prod scores of stored token `j`, head `h` (docs/contracts/turboquant.md): for each
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
