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
            Input::F16(x) => match first_non_finite(x) {
                Some(i) => Err(bad(i, x[i].to_f32())),
                None => Ok(x.to_vec()),
            },
            // The slice conversion (half's: the CPU's f16 conversion instructions where it
            // has them, F16C on x86-64; round to nearest even like `f16::from_f32`), then one
            // scan for what f16 cannot hold: a per-element conversion with its check took
            // ~25 % of a one-token append's host time (benches/host_encode.rs, lavapipe).
            Input::F32(x) => {
                use half::slice::HalfFloatSliceExt;
                let mut out = vec![f16::ZERO; x.len()];
                out.convert_from_f32_slice(x);
                match first_non_finite(&out) {
                    Some(i) => Err(bad(i, x[i])),
                    None => Ok(out),
                }
            }
        }
    }
}

/// The index of the first NaN or ±Inf in `x`: blocks of 256 values tested without an early
/// exit (the compiler makes that a vector loop), then the hit's block searched. A scan with
/// `position` stopped at every element's test: ~20 % of a one-token append's host time in a
/// profile (benches/host_encode.rs, lavapipe).
fn first_non_finite(x: &[f16]) -> Option<usize> {
    const EXP: u16 = 0x7c00;
    x.chunks(256).enumerate().find_map(|(b, c)| {
        let hit = c.iter().fold(false, |a, h| a | (h.to_bits() & EXP == EXP));
        hit.then(|| b * 256 + c.iter().position(|h| h.to_bits() & EXP == EXP).unwrap_or(0))
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The slice conversion gives `f16::from_f32`'s bits (round to nearest even) on ties,
    /// f16 subnormals, the largest finite values, signed zeros, f32 subnormals and random
    /// bits, and rejects what f16 cannot hold at the first such index with its value.
    #[test]
    fn to_f16_rounds_like_from_f32() {
        let mut x: Vec<f32> = vec![
            0.0,
            -0.0,
            1.0 + 2f32.powi(-11),       // a tie: to even (1.0)
            1.0 + 3.0 * 2f32.powi(-11), // a tie: to even (up)
            2f32.powi(-24),             // the smallest f16 subnormal
            3.0 * 2f32.powi(-26),       // between subnormals
            2f32.powi(-25),             // a tie with zero
            65504.0,                    // the largest finite f16
            65519.99,                   // rounds down to it
            -65519.99,
            f32::from_bits(1), // an f32 subnormal
            6.1e-5,            // near the smallest normal f16
        ];
        let mut z = 0x9e37_79b9_7f4a_7c15u64;
        while x.len() < 4099 {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            let v = f32::from_bits(z as u32);
            // Random bits, kept where f16 holds them (|v| < 65520), else scaled into range.
            x.push(if v.is_finite() && v.abs() < 65520.0 {
                v
            } else {
                (z >> 40) as f32 / 4096.0 - 2048.0
            });
        }
        let want: Vec<u16> = x.iter().map(|&v| f16::from_f32(v).to_bits()).collect();
        let got: Vec<u16> = Input::F32(&x)
            .to_f16("x")
            .expect("finite")
            .iter()
            .map(|h| h.to_bits())
            .collect();
        assert_eq!(got, want);
        for (bad, at) in [
            (65520.0f32, 7usize),
            (f32::NAN, 3000),
            (f32::NEG_INFINITY, 4098),
            (f32::INFINITY, 0),
            (-1.0e6, 255), // the last of a scan block
            (f32::NAN, 256),
        ] {
            let mut y = x.clone();
            y[at] = bad;
            y[4000] = f32::INFINITY; // a later bad value: the first one is reported
            match Input::F32(&y).to_f16("y") {
                Err(Error::NonFinite { what, index, value }) => {
                    assert_eq!((what, index), ("y", at.min(4000)));
                    assert_eq!(value.to_bits(), y[index].to_bits());
                }
                other => panic!("{bad} at {at}: {other:?}"),
            }
            // The same values as f16 input (a value beyond f16 becomes its infinity).
            let h: Vec<f16> = y.iter().map(|&v| f16::from_f32(v)).collect();
            match Input::F16(&h).to_f16("h") {
                Err(Error::NonFinite { what, index, .. }) => {
                    assert_eq!((what, index), ("h", at.min(4000)));
                }
                other => panic!("f16 {bad} at {at}: {other:?}"),
            }
        }
        assert!(
            Input::F16(&want.iter().map(|&b| f16::from_bits(b)).collect::<Vec<_>>())
                .to_f16("w")
                .is_ok()
        );
    }
}
