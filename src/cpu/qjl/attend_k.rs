//! CPU twin of `wgsl/qjl/attend_k.wgsl` (attention on QJL keys, docs/contracts/qjl.md
//! "Kernels"): the query is sketched once per row (`S q`, m values: [`prepare_query`]), and the
//! score of stored key j is `n_j · (√(π/2)/m · (2·Σ_{σ_i=1} (S q)_i − Σ_i (S q)_i))` from its
//! sign row and f16 norm ([`super::score::qjl_score`], sums in index order). No key is ever
//! reconstructed. The GPU folds the constant into `S q` and sums per lane slice (another f32
//! order: attention rows agree within 1e-4).

use half::f16;

use super::score::qjl_score;
use crate::cpu::common::vector::mat_vec;

/// `S q` for one query row `q` (D values) with the layer's sketch `[m][D]`, into `out`
/// (m values; each entry summed in index order).
pub fn prepare_query(sketch: &[f32], m: usize, q: &[f32], out: &mut Vec<f32>) {
    out.clear();
    // Lengths are the codec's own (m·D sketch, D-wide rows): the product cannot fail.
    if let Ok(sq) = mat_vec(sketch, m, q.len(), q) {
        out.extend(sq);
    }
}

/// The scores of stored token `j`, head `h` for the prepared queries `preps` (m values
/// each): `signs` `[tokens][H][m/32]`, `norms` `[tokens][ceil(H/2)]` (two f16 per word, head
/// 2i in the low half).
pub fn score(
    signs: &[u32],
    norms: &[u32],
    heads: usize,
    preps: &[Vec<f32>],
    j: usize,
    h: usize,
    out: &mut [f32],
) {
    let Some(p0) = preps.first() else {
        return;
    };
    let sw = p0.len() / 32;
    let row = &signs[(j * heads + h) * sw..][..sw];
    let nw = norms[j * heads.div_ceil(2) + h / 2];
    let n = f16::from_bits((nw >> (16 * (h % 2))) as u16);
    for (o, p) in out.iter_mut().zip(preps) {
        // The row has m/32 words for m-value preps: the estimate cannot fail.
        *o = qjl_score(p, row, n).unwrap_or(f32::NAN);
    }
}
