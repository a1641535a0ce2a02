//! CPU reference of `wgsl/kivi/kivi_dequant_values.wgsl`: reconstructs quantized values.

use super::kivi_group as g;
use crate::codecs::kivi::layout::Layout;

/// Reconstructs `tokens` value rows into `out` `[tokens][H][D]` f32.
pub fn kivi_dequant_values(
    l: &Layout,
    tokens: usize,
    codes: &[u32],
    params: &[u32],
    out: &mut [f32],
) {
    let (gv, bits, pw) = (l.value_group, l.value_bits, l.params.words());
    let (row_words, gw, ng) = (l.value_row_words(), l.value_group_words(), l.value_groups());
    for t in 0..tokens {
        for h in 0..l.heads {
            let row = &codes[(t * l.heads + h) * row_words..][..row_words];
            for d in 0..l.dim {
                let j = d / gv;
                let (scale, lo) =
                    g::load_params(&params[((t * l.heads + h) * ng + j) * pw..], l.params);
                let q = g::get_code(&row[j * gw..], d - j * gv, bits);
                out[(t * l.heads + h) * l.dim + d] = g::reconstruct(q, scale, lo);
            }
        }
    }
}
