//! CPU twin of `wgsl/turboquant/attend_v.wgsl` (the value hooks of attention on TurboQuant
//! codes): a stored value contributes `n_j·ŷ_j` in the rotated space (P values; the core
//! accumulates Σ_j p_j·n_j·ŷ_j there), and the normalized accumulator is inverse-rotated once
//! per output row with its KV head's value signs (butterflies, × 1/√P, × s_i; the first D
//! values). The GPU folds n_j into the softmax weight (p_j·n_j)·ŷ_j: the same up to f32
//! rounding.

use super::attend_k::decode;
use super::rotation::inverse_rotate_in_place;
use crate::codecs::turboquant::layout::{Layout, norm_at};

/// `n_j·ŷ_j` of stored token `j`, head `h` (`out`: P values) from the side's streams.
pub fn value(
    l: &Layout,
    codes: &[u32],
    norms: &[u32],
    centroids: &[Vec<f32>],
    j: usize,
    h: usize,
    out: &mut [f32],
) {
    decode(l, codes, centroids, j, h, out);
    let n = norm_at(norms, l.norm_words(), j, h);
    for o in out.iter_mut() {
        *o *= n;
    }
}

/// The output `out` (D values) of a normalized rotated accumulator `acc` (P values):
/// the inverse rotation with the head's value `signs` (P of ±1), truncated to D.
pub fn finish(acc: &[f32], signs: &[f32], out: &mut [f32]) {
    let mut v = acc.to_vec();
    inverse_rotate_in_place(&mut v, signs);
    out.copy_from_slice(&v[..out.len()]);
}
