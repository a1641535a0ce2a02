//! CPU reference of `wgsl/bitpack/bitpack.wgsl` (docs/contracts/bitpack.md).

use crate::error::{Error, Result};

/// Words needed for `n` codes of `bits` bits: ceil(n·b / 32).
pub fn packed_words(n: usize, bits: u32) -> Result<usize> {
    check_bits(bits)?;
    n.checked_mul(bits as usize)
        .map(|b| b.div_ceil(32))
        .ok_or(Error::Limit {
            what: "bitstream length in bits",
            needed: u64::MAX,
            limit: usize::MAX as u64,
        })
}

/// `bits` must be 1..=8.
pub fn check_bits(bits: u32) -> Result<()> {
    if (1..=8).contains(&bits) {
        Ok(())
    } else {
        Err(Error::BitsOutOfRange { bits })
    }
}

/// Every code must be < 2^bits.
pub fn check_codes(codes: &[u8], bits: u32) -> Result<()> {
    check_bits(bits)?;
    let limit = 1u32 << bits;
    match codes.iter().position(|&c| u32::from(c) >= limit) {
        Some(index) => Err(Error::CodeOutOfRange {
            index,
            code: u32::from(codes[index]),
            bits,
            limit,
        }),
        None => Ok(()),
    }
}

/// Packs `codes` (each < 2^bits) into `words`, which must hold exactly
/// [`packed_words`]`(codes.len(), bits)` words. Validates everything before writing.
pub fn bitpack(codes: &[u8], bits: u32, words: &mut [u32]) -> Result<()> {
    check_codes(codes, bits)?;
    let n_words = packed_words(codes.len(), bits)?;
    if words.len() != n_words {
        return Err(Error::LengthMismatch {
            what: "packed words",
            expected: n_words,
            actual: words.len(),
        });
    }
    let b = bits as usize;
    let total_bits = codes.len() * b;
    // One "invocation" per output word, as on the GPU.
    for (w, out) in words.iter_mut().enumerate() {
        let bit0 = w * 32;
        let end_bit = (bit0 + 32).min(total_bits);
        let mut acc = 0u32;
        for (i, &c) in codes
            .iter()
            .enumerate()
            .take(end_bit.div_ceil(b))
            .skip(bit0 / b)
        {
            let start = i * b;
            let c = u32::from(c);
            acc |= if start >= bit0 {
                c << (start - bit0)
            } else {
                c >> (bit0 - start)
            };
        }
        *out = acc;
    }
    Ok(())
}
