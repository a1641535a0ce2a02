//! CPU twin of `wgsl/vecinfer/attend_k.wgsl` (docs/contracts/vecinfer.md, "Attention"): per
//! query head, q̃ = H_P·(q ⊙ λ)/√P with its KV head's λ, then the LUT `[n_sub][C]`,
//! `LUT[s][c] = Σ_i q̃[s·d_s + i]·cb[c][i]` (f32, index order); the score of a stored key is
//! `Σ_s LUT[s][index_s]` in s order. No key is ever reconstructed.

use super::Preset;
use super::transform::transform_query;
use super::vecinfer_quant::index_at;

/// The LUT (`[n_sub][C]` into `out`) of one query `q` (D values) against its KV head's λ (D
/// values) and key codebook (`[C, d_s]`).
pub fn prepare_query(
    q: &[f32],
    lambda: &[f32],
    codebook: &[f32],
    preset: Preset,
    padded: usize,
    out: &mut Vec<f32>,
) {
    let mut qt = Vec::with_capacity(padded);
    transform_query(q, lambda, padded, &mut qt);
    lut_of(&qt, codebook, preset, out);
}

/// The LUT of an already transformed query q̃ (P values).
pub fn lut_of(qt: &[f32], codebook: &[f32], preset: Preset, out: &mut Vec<f32>) {
    let ds = preset.sub_dim;
    out.clear();
    for sub in qt.chunks_exact(ds) {
        for row in codebook.chunks_exact(ds) {
            out.push(sub.iter().zip(row).fold(0.0f32, |a, (x, y)| a + x * y));
        }
    }
}

/// The score of one packed index row against a LUT: `Σ_s LUT[s][index_s]`.
pub fn lut_score(lut: &[f32], row: &[u32], preset: Preset) -> f32 {
    let (c, bits) = (preset.centroids, preset.index_bits());
    (0..lut.len() / c).fold(0.0f32, |a, s| a + lut[s * c + index_at(row, s, bits)])
}
