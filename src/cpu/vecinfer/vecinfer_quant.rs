//! CPU twin of `wgsl/vecinfer/vecinfer_quant.wgsl` (docs/contracts/vecinfer.md, "Quantize"):
//! every transformed vector (P values) is cut into n_sub = P/d_s sub-vectors and each takes the
//! index of its nearest codebook row: `argmin_c Σ_i (x_i − cb[c][i])²` over the d_s
//! coordinates in index order, f32, ties to the lower index. Indices are packed per
//! bitpack.md, log2 C bits each, one row of n_sub per vector (`row_words` u32 words).

use super::Preset;
use super::transform::{transform_key, transform_value};

/// The index of the codebook row (`codebook` `[C, d_s]`) nearest to `x` (d_s values).
pub fn nearest(x: &[f32], codebook: &[f32], sub_dim: usize) -> u32 {
    let mut best = f32::INFINITY;
    let mut arg = 0u32;
    for (c, row) in codebook.chunks_exact(sub_dim).enumerate() {
        let mut d = 0.0f32;
        for (a, b) in x.iter().zip(row) {
            let e = a - b;
            d += e * e;
        }
        if d < best {
            best = d;
            arg = c as u32;
        }
    }
    arg
}

/// The n_sub indices of one transformed vector `x` (P values).
pub fn quantize_vector(x: &[f32], codebook: &[f32], preset: Preset, out: &mut [u32]) {
    for (o, sub) in out.iter_mut().zip(x.chunks_exact(preset.sub_dim)) {
        *o = nearest(sub, codebook, preset.sub_dim);
    }
}

/// u32 words of one packed row of n_sub indices.
pub fn row_words(n_sub: usize, preset: Preset) -> usize {
    (n_sub * preset.index_bits() as usize).div_ceil(32)
}

/// Packs one row of indices (bitpack.md: LSB-first, code i at bit i·b) into `out`.
pub fn pack_row(indices: &[u32], bits: u32, out: &mut [u32]) {
    out.fill(0);
    for (i, &c) in indices.iter().enumerate() {
        let bit = i * bits as usize;
        out[bit / 32] |= c << (bit % 32);
        if bit % 32 + bits as usize > 32 {
            out[bit / 32 + 1] |= c >> (32 - bit % 32);
        }
    }
}

/// The index `s` of a packed row.
pub fn index_at(row: &[u32], s: usize, bits: u32) -> usize {
    let bit = s * bits as usize;
    let mask = (1u64 << bits) - 1;
    let lo = row[bit / 32] as u64 >> (bit % 32);
    let hi = if bit % 32 + bits as usize > 32 {
        (row[bit / 32 + 1] as u64) << (32 - bit % 32)
    } else {
        0
    };
    ((lo | hi) & mask) as usize
}

/// Quantizes `[n, heads, dim]` keys (`lambda` `[heads, dim]`, `codebooks` `[heads, C, d_s]`)
/// or values (`lambda` = None) into packed rows `[n, heads, row_words]`.
pub fn vecinfer_quant(
    x: &[f32],
    heads: usize,
    dim: usize,
    lambda: Option<&[f32]>,
    codebooks: &[f32],
    preset: Preset,
    padded: usize,
) -> Vec<u32> {
    let n_sub = padded / preset.sub_dim;
    let rw = row_words(n_sub, preset);
    let cb_len = preset.centroids * preset.sub_dim;
    let mut out = vec![0u32; x.len() / dim * rw];
    let (mut t, mut idx) = (Vec::with_capacity(padded), vec![0u32; n_sub]);
    for (r, (v, o)) in x
        .chunks_exact(dim)
        .zip(out.chunks_exact_mut(rw))
        .enumerate()
    {
        let h = r % heads;
        match lambda {
            Some(l) => transform_key(v, &l[h * dim..][..dim], padded, &mut t),
            None => transform_value(v, padded, &mut t),
        }
        quantize_vector(&t, &codebooks[h * cb_len..][..cb_len], preset, &mut idx);
        pack_row(&idx, preset.index_bits(), o);
    }
    out
}
