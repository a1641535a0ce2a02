//! CPU reference of `wgsl/bitpack/bitunpack.wgsl` (docs/contracts/bitpack.md).

use super::bitpack::{check_bits, packed_words};
use crate::error::{Error, Result};

/// Checks that `words` is a well-formed stream of `n` codes of `bits` bits: exactly
/// ceil(n·b / 32) words, unused high bits of the last word zero.
pub fn check_stream(words: &[u32], bits: u32, n: usize) -> Result<()> {
    check_bits(bits)?;
    let n_words = packed_words(n, bits)?;
    if words.len() != n_words {
        return Err(Error::LengthMismatch {
            what: "packed words",
            expected: n_words,
            actual: words.len(),
        });
    }
    let used = n * bits as usize - (n_words.saturating_sub(1)) * 32;
    if let Some(&last) = words.last() {
        if used < 32 && last >> used != 0 {
            return Err(Error::NonZeroPadding {
                bits_used: used as u32,
                word: last,
            });
        }
    }
    Ok(())
}

/// Unpacks `codes.len()` codes of `bits` bits from `words`, which must pass [`check_stream`].
pub fn bitunpack(words: &[u32], bits: u32, codes: &mut [u8]) -> Result<()> {
    check_stream(words, bits, codes.len())?;
    let b = bits as usize;
    let mask = (1u32 << bits) - 1;
    for (i, out) in codes.iter_mut().enumerate() {
        let start = i * b;
        let (wi, off) = (start / 32, start % 32);
        let mut v = words[wi] >> off;
        if off + b > 32 {
            v |= words[wi + 1] << (32 - off);
        }
        *out = (v & mask) as u8;
    }
    Ok(())
}
