//! CPU twin of `wgsl/vecinfer/vecinfer_dequant.wgsl`: the reconstruction of stored vectors from
//! their packed index rows (docs/contracts/vecinfer.md): x̃̂ = the codebook rows of the n_sub
//! indices side by side (P values), then the inverse transform (keys: × λ after it).

use super::Preset;
use super::transform::{inverse_key, inverse_value};
use super::vecinfer_quant::index_at;

/// x̃̂ (P values into `out`) of one packed row.
pub fn reconstruct_transformed(row: &[u32], codebook: &[f32], preset: Preset, out: &mut [f32]) {
    let ds = preset.sub_dim;
    for (s, o) in out.chunks_exact_mut(ds).enumerate() {
        let c = index_at(row, s, preset.index_bits());
        o.copy_from_slice(&codebook[c * ds..][..ds]);
    }
}

/// `[n, heads, dim]` reconstructions of packed rows `[n, heads, row_words]` (keys with
/// `lambda` `[heads, dim]`, values with None).
pub fn vecinfer_dequant(
    rows: &[u32],
    heads: usize,
    dim: usize,
    lambda: Option<&[f32]>,
    codebooks: &[f32],
    preset: Preset,
    padded: usize,
) -> Vec<f32> {
    let rw = super::vecinfer_quant::row_words(padded / preset.sub_dim, preset);
    let cb_len = preset.centroids * preset.sub_dim;
    let mut out = vec![0.0f32; rows.len() / rw * dim];
    let mut t = vec![0.0f32; padded];
    for (r, (row, o)) in rows
        .chunks_exact(rw)
        .zip(out.chunks_exact_mut(dim))
        .enumerate()
    {
        let h = r % heads;
        reconstruct_transformed(row, &codebooks[h * cb_len..][..cb_len], preset, &mut t);
        match lambda {
            Some(l) => inverse_key(&t, &l[h * dim..][..dim], o),
            None => {
                inverse_value(&mut t);
                o.copy_from_slice(&t[..dim]);
            }
        }
    }
    out
}
