//! CPU twin of `wgsl/kivi/attend_v.wgsl` (the value hook of attention): the value of token `j`
//! reconstructed from its groups' (scale, lo) and codes, exactly by the spec, one row at a
//! time; the core accumulates it with the softmax weight (the GPU folds (scale, lo) into the
//! weight: the same value up to f32 rounding). Values stay in the output space: no finish.

use super::kivi_group as g;
use crate::codecs::kivi::layout::Layout;

/// v̂ of quantized token `j`, head `h` (`out`: D values) from the value streams `codes`
/// `[tokens][H][value_row_words]` and `params` `[tokens][H][value_groups][1 or 2]`.
pub fn value_row(l: &Layout, codes: &[u32], params: &[u32], j: usize, h: usize, out: &mut [f32]) {
    let (gv, gw, ng, rw, pw) = (
        l.value_group,
        l.value_group_words(),
        l.value_groups(),
        l.value_row_words(),
        l.params.words(),
    );
    let row = &codes[(j * l.heads + h) * rw..][..rw];
    for (d, o) in out.iter_mut().enumerate() {
        let jg = d / gv;
        let (scale, lo) = g::load_params(&params[((j * l.heads + h) * ng + jg) * pw..], l.params);
        *o = g::reconstruct(
            g::get_code(&row[jg * gw..], d - jg * gv, l.value_bits),
            scale,
            lo,
        );
    }
}
