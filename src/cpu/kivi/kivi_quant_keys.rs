//! CPU reference of `wgsl/kivi/kivi_quant_keys.wgsl`: per-channel key quantization of whole
//! token blocks (docs/contracts/kivi.md; layout in `src/codecs/kivi/layout.rs`).
//!
//! One "invocation" owns one (block, head, channel) group: min/max over the block's `Gk`
//! tokens of that channel, then its `key_group_words` words of codes and its (scale, lo).

use super::kivi_group as g;
use crate::codecs::kivi::layout::Layout;

/// A group whose (scale, lo) cannot be stored (f16 overflow): its position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamOverflow {
    /// Token (keys: first token of the block) and head and channel/group index.
    pub token: usize,
    /// Head.
    pub head: usize,
    /// Channel (keys) or value group index (values).
    pub index: usize,
}

/// Quantizes `blocks` whole key blocks. `x(t, h, d)` gives the (f16-rounded) input of token
/// `t` relative to the first block; `codes` is `[blocks][H][D][key_group_words]` and
/// `params` is `[blocks][H][D][params.words()]`, both fully overwritten.
pub fn kivi_quant_keys(
    l: &Layout,
    blocks: usize,
    x: impl Fn(usize, usize, usize) -> f32,
    codes: &mut [u32],
    params: &mut [u32],
) -> Result<(), ParamOverflow> {
    let (gk, bits, wpg, pw) = (
        l.key_group,
        l.key_bits,
        l.key_group_words(),
        l.params.words(),
    );
    for j in 0..blocks {
        for h in 0..l.heads {
            for d in 0..l.dim {
                let gi = (j * l.heads + h) * l.dim + d;
                let (lo, hi) = g::min_max((0..gk).map(|t| x(j * gk + t, h, d)));
                let (scale, lo) = g::group_params(lo, hi, bits);
                let stored = g::store_params(scale, lo, l.params).ok_or(ParamOverflow {
                    token: j * gk,
                    head: h,
                    index: d,
                })?;
                params[gi * pw..(gi + 1) * pw].copy_from_slice(&stored[..pw]);
                let words = &mut codes[gi * wpg..(gi + 1) * wpg];
                words.fill(0);
                for t in 0..gk {
                    g::put_code(
                        words,
                        t,
                        g::code(x(j * gk + t, h, d), scale, lo, bits),
                        bits,
                    );
                }
            }
        }
    }
    Ok(())
}
