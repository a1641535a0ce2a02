//! A read-only view of a KIVI layer's stored words, for attention on the CPU: it
//! reconstructs one token's key or value row at a time from the packed codes (or the f16
//! residual), never the whole cache.

use half::f16;
use half::slice::HalfFloatSliceExt;

use super::RawKivi;
use super::layout::Layout;
use crate::cpu::attend::TokenSource;
use crate::cpu::kivi_group as g;

/// Borrowed stored words of one layer (layout of [`super::layout`]).
#[derive(Clone, Copy, Debug)]
pub struct KiviView<'a> {
    /// Geometry.
    pub layout: &'a Layout,
    /// Tokens held.
    pub tokens: usize,
    /// `[Q/Gk][H][D][key_group_words]`.
    pub key_codes: &'a [u32],
    /// `[Q/Gk][H][D][param words]`.
    pub key_params: &'a [u32],
    /// `[Q][H][value_row_words]`.
    pub value_codes: &'a [u32],
    /// `[Q][H][value_groups][param words]`.
    pub value_params: &'a [u32],
    /// f16 K of tokens `[Q, T)`.
    pub residual_k: &'a [f16],
    /// f16 V of tokens `[Q, T)`.
    pub residual_v: &'a [f16],
}

impl<'a> KiviView<'a> {
    /// A view over words read back from a layer.
    pub fn of_raw(layout: &'a Layout, tokens: usize, raw: &'a RawKivi) -> Self {
        Self {
            layout,
            tokens,
            key_codes: &raw.key_codes,
            key_params: &raw.key_params,
            value_codes: &raw.value_codes,
            value_params: &raw.value_params,
            residual_k: &raw.residual_k,
            residual_v: &raw.residual_v,
        }
    }

    fn residual(&self, rows: &[f16], j: usize, h: usize, out: &mut [f32]) {
        let l = self.layout;
        let q = l.quantized_len(self.tokens);
        // Slice conversion: F16C/NEON instructions where the CPU has them.
        rows[(j - q) * l.token_elems() + h * l.dim..][..l.dim].convert_to_f32_slice(out);
    }
}

impl TokenSource for KiviView<'_> {
    fn tokens(&self) -> usize {
        self.tokens
    }

    fn heads(&self) -> usize {
        self.layout.heads
    }

    fn dim(&self) -> usize {
        self.layout.dim
    }

    fn key(&self, j: usize, h: usize, out: &mut [f32]) {
        let l = self.layout;
        if j >= l.quantized_len(self.tokens) {
            return self.residual(self.residual_k, j, h, out);
        }
        let (gk, wpg, pw) = (l.key_group, l.key_group_words(), l.params.words());
        let blk = j / gk;
        for (d, o) in out.iter_mut().enumerate() {
            let gi = (blk * l.heads + h) * l.dim + d;
            let (scale, lo) = g::load_params(&self.key_params[gi * pw..], l.params);
            *o = g::reconstruct(
                g::get_code(&self.key_codes[gi * wpg..], j % gk, l.key_bits),
                scale,
                lo,
            );
        }
    }

    fn value(&self, j: usize, h: usize, out: &mut [f32]) {
        let l = self.layout;
        if j >= l.quantized_len(self.tokens) {
            return self.residual(self.residual_v, j, h, out);
        }
        let (gv, gw, ng, rw, pw) = (
            l.value_group,
            l.value_group_words(),
            l.value_groups(),
            l.value_row_words(),
            l.params.words(),
        );
        let row = &self.value_codes[(j * l.heads + h) * rw..][..rw];
        for (d, o) in out.iter_mut().enumerate() {
            let jg = d / gv;
            let (scale, lo) = g::load_params(
                &self.value_params[((j * l.heads + h) * ng + jg) * pw..],
                l.params,
            );
            *o = g::reconstruct(
                g::get_code(&row[jg * gw..], d - jg * gv, l.value_bits),
                scale,
                lo,
            );
        }
    }
}
