//! CPU reference of `wgsl/kivi/kivi_dequant_keys.wgsl`: reconstructs quantized keys.

use super::kivi_group as g;
use crate::codecs::kivi::layout::Layout;

/// Reconstructs `blocks` key blocks into `out` `[blocks·Gk][H][D]` f32.
pub fn kivi_dequant_keys(
    l: &Layout,
    blocks: usize,
    codes: &[u32],
    params: &[u32],
    out: &mut [f32],
) {
    let (gk, bits, wpg, pw) = (
        l.key_group,
        l.key_bits,
        l.key_group_words(),
        l.params.words(),
    );
    for t in 0..blocks * gk {
        let j = t / gk;
        for h in 0..l.heads {
            for d in 0..l.dim {
                let gi = (j * l.heads + h) * l.dim + d;
                let (scale, lo) = g::load_params(&params[gi * pw..], l.params);
                let q = g::get_code(&codes[gi * wpg..], t % gk, bits);
                out[(t * l.heads + h) * l.dim + d] = g::reconstruct(q, scale, lo);
            }
        }
    }
}
