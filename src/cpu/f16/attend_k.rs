//! CPU twin of `wgsl/f16/attend_k.wgsl`: the key of token `j` is its stored f16 row.

use half::f16;

/// The f16 values of head `h` (`out`: D of them) of row `j` of `rows`
/// (`[rows][row_words]`, two f16 per word, element 2i in the low half).
pub fn f16_row(rows: &[u32], row_words: usize, dim: usize, j: usize, h: usize, out: &mut [f32]) {
    let w = &rows[j * row_words..(j + 1) * row_words];
    for (d, o) in out.iter_mut().enumerate() {
        let e = h * dim + d;
        *o = f16::from_bits((w[e / 2] >> (16 * (e % 2))) as u16).to_f32();
    }
}
