//! CPU twin of `wgsl/vecinfer/attend_v.wgsl` (docs/contracts/vecinfer.md, "Attention"): values
//! accumulate in the transformed space, `acc += p_j · ṽ̂_j` with ṽ̂_j the value codebook rows
//! of token j's indices (P values), and the normalized output is transformed back once.

use super::Preset;
use super::transform::inverse_value;
use super::vecinfer_quant::index_at;

/// `acc[s·d_s + i] += p · cb[index_s][i]` for one packed row (`acc`: P values).
pub fn accumulate(acc: &mut [f32], p: f32, row: &[u32], codebook: &[f32], preset: Preset) {
    let ds = preset.sub_dim;
    for (s, a) in acc.chunks_exact_mut(ds).enumerate() {
        let c = index_at(row, s, preset.index_bits());
        for (x, y) in a.iter_mut().zip(&codebook[c * ds..][..ds]) {
            *x += p * y;
        }
    }
}

/// The output (`out`: D values) of a normalized accumulator (P values, consumed).
pub fn finish(acc: &mut [f32], out: &mut [f32]) {
    inverse_value(acc);
    let d = out.len();
    out.copy_from_slice(&acc[..d]);
}
