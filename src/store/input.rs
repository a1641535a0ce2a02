//! One append's input and its conversion to what the store keeps: every token is rounded to
//! f16 once, on entry (the residual window stores f16, and a token must be quantized from the
//! same value whether it arrives in a prefill or waited in the window), so any chunking of the
//! same appends gives the same stored words. An f32 that f16 cannot hold (|x| > 65504), NaN
//! and ±Inf are rejected before anything is stored.

use half::f16;

use crate::error::{Error, Result};

/// One append's input: `[n, H, D]` row-major, f16 or f32.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Input<'a> {
    /// f16 values.
    F16(&'a [f16]),
    /// f32 values (rounded to f16 on entry).
    F32(&'a [f32]),
}

impl Input<'_> {
    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            Input::F16(x) => x.len(),
            Input::F32(x) => x.len(),
        }
    }

    /// True when there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rounds to f16, rejecting NaN, ±Inf and values f16 cannot hold (`what` names the input
    /// in the error).
    pub fn to_f16(self, what: &'static str) -> Result<Vec<f16>> {
        let bad = |index: usize, value: f32| Error::NonFinite { what, index, value };
        match self {
            Input::F16(x) => match x.iter().position(|v| !v.is_finite()) {
                Some(i) => Err(bad(i, x[i].to_f32())),
                None => Ok(x.to_vec()),
            },
            Input::F32(x) => x
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let h = f16::from_f32(v);
                    if h.is_finite() { Ok(h) } else { Err(bad(i, v)) }
                })
                .collect(),
        }
    }
}

/// f16 rows of `row` elements as u32 words, `ceil(row / 2)` per row (element 2i in the low
/// half; an odd row is padded with a zero half): the layout of every f16 row kvpack keeps on
/// a GPU (the residual ring, the f16 codec's segments).
pub fn f16_rows_to_words(row: usize, x: &[f16]) -> Vec<u32> {
    let rw = row.div_ceil(2);
    let n = x.len() / row.max(1);
    let mut out = vec![0u32; n * rw];
    for t in 0..n {
        for (e, v) in x[t * row..(t + 1) * row].iter().enumerate() {
            out[t * rw + e / 2] |= u32::from(v.to_bits()) << (16 * (e % 2));
        }
    }
    out
}

/// The inverse of [`f16_rows_to_words`]: `n` rows of `row` f16 values from their words.
pub fn words_to_f16_rows(row: usize, words: &[u32], n: usize) -> Vec<f16> {
    let rw = row.div_ceil(2);
    let mut out = Vec::with_capacity(n * row);
    for t in 0..n {
        let w = &words[t * rw..];
        out.extend((0..row).map(|e| f16::from_bits((w[e / 2] >> (16 * (e % 2))) as u16)));
    }
    out
}
