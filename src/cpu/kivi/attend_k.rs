//! CPU twin of `wgsl/kivi/attend_k.wgsl` (the key hook of attention): the key of token `j`
//! reconstructed from its block's (scale, lo) and code, exactly by the spec (f32(q·scale) + lo),
//! one row at a time. The core (src/cpu/attend.rs) takes its dot products with the queries; the
//! GPU folds (scale, lo) into the query instead (a·x + β), the same value up to f32 rounding.

use super::kivi_group as g;
use crate::codecs::kivi::layout::Layout;

/// k̂ of quantized token `j`, head `h` (`out`: D values) from the key streams `codes`
/// `[blocks][H][D][key_group_words]` and `params` `[blocks][H][D][1 or 2]`.
pub fn key_row(l: &Layout, codes: &[u32], params: &[u32], j: usize, h: usize, out: &mut [f32]) {
    let (gk, wpg, pw) = (l.key_group, l.key_group_words(), l.params.words());
    let blk = j / gk;
    for (d, o) in out.iter_mut().enumerate() {
        let gi = (blk * l.heads + h) * l.dim + d;
        let (scale, lo) = g::load_params(&params[gi * pw..], l.params);
        *o = g::reconstruct(
            g::get_code(&codes[gi * wpg..], j % gk, l.key_bits),
            scale,
            lo,
        );
    }
}
