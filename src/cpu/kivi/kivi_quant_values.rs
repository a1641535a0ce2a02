//! CPU reference of `wgsl/kivi/kivi_quant_values.wgsl`: per-token value quantization
//! (docs/contracts/kivi.md; layout in `src/codecs/kivi/layout.rs`).
//!
//! One "workgroup" owns one (token, head, group) of `Gv` consecutive channels (the last one
//! of a row ragged when `Gv ∤ D`): min/max over its channels, then its code words and its
//! (scale, lo).

use super::kivi_group as g;
use super::kivi_quant_keys::ParamOverflow;
use crate::codecs::kivi::layout::Layout;

/// Quantizes `tokens` tokens. `x(t, h, d)` gives the (f16-rounded) input; `codes` is
/// `[tokens][H][value_row_words]`, `params` `[tokens][H][value_groups][params.words()]`,
/// both fully overwritten.
pub fn kivi_quant_values(
    l: &Layout,
    tokens: usize,
    x: impl Fn(usize, usize, usize) -> f32,
    codes: &mut [u32],
    params: &mut [u32],
) -> Result<(), ParamOverflow> {
    let (gv, bits, pw) = (l.value_group, l.value_bits, l.params.words());
    let (row_words, gw, ng) = (l.value_row_words(), l.value_group_words(), l.value_groups());
    for t in 0..tokens {
        for h in 0..l.heads {
            let row = &mut codes[(t * l.heads + h) * row_words..][..row_words];
            row.fill(0);
            for j in 0..ng {
                let (c0, c1) = (j * gv, ((j + 1) * gv).min(l.dim));
                let (lo, hi) = g::min_max((c0..c1).map(|d| x(t, h, d)));
                let (scale, lo) = g::group_params(lo, hi, bits);
                let stored = g::store_params(scale, lo, l.params).ok_or(ParamOverflow {
                    token: t,
                    head: h,
                    index: j,
                })?;
                let pi = ((t * l.heads + h) * ng + j) * pw;
                params[pi..pi + pw].copy_from_slice(&stored[..pw]);
                let words = &mut row[j * gw..];
                for d in c0..c1 {
                    g::put_code(words, d - c0, g::code(x(t, h, d), scale, lo, bits), bits);
                }
            }
        }
    }
    Ok(())
}
