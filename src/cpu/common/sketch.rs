//! The 1-bit Gaussian sketch shared by QJL keys (docs/contracts/qjl.md) and the second stage
//! of TurboQuant-Prod (docs/contracts/turboquant.md, "TurboQuant-Prod"): sign bits of S·v
//! packed LSB-first, and the estimator's `√(π/2)/m · ⟨S q, 2σ − 1⟩`.

use super::vector::check_len;
use crate::error::{Error, Result};

/// m must be a positive multiple of 32 (rows of whole u32 words).
pub fn check_sketch_rows(m: usize) -> Result<()> {
    if m == 0 || !m.is_multiple_of(32) {
        return Err(Error::Config(format!(
            "the sketch size m must be a positive multiple of 32, got {m}"
        )));
    }
    Ok(())
}

/// The estimator's constant `√(π/2)/m`, computed in f64 and rounded once to f32.
pub fn scale(m: usize) -> f32 {
    ((std::f64::consts::PI / 2.0).sqrt() / m as f64) as f32
}

/// The sign row of a projection `S·v` (m = `proj.len()`, a multiple of 32): bit i of the row
/// (bit i mod 32 of word i / 32) is `[proj_i ≥ 0]` (−0.0 counts as non-negative); m/32 words.
pub fn sign_row(proj: &[f32]) -> Vec<u32> {
    let mut words = vec![0u32; proj.len().div_ceil(32)];
    for (i, &x) in proj.iter().enumerate() {
        words[i / 32] |= u32::from(x >= 0.0) << (i % 32);
    }
    words
}

/// `⟨S q, 2σ − 1⟩` computed as `2·Σ_{σ_i=1} (S q)_i − Σ_i (S q)_i`, both sums in f32 in index
/// order (the doubling is exact). `row` must be `ceil(sq.len() / 32)` words.
pub fn signed_sum(sq: &[f32], row: &[u32]) -> Result<f32> {
    check_len("sign row words", sq.len().div_ceil(32), row.len())?;
    let (mut pos, mut all) = (0.0f32, 0.0f32);
    for (i, &x) in sq.iter().enumerate() {
        if (row[i / 32] >> (i % 32)) & 1 == 1 {
            pos += x;
        }
        all += x;
    }
    Ok(2.0 * pos - all)
}

/// `Sᵀ·(2σ − 1)` for `S` `[m][cols]` row-major: entry j is `Σ_i ±S[i][j]` in index order i.
/// `row` must be `ceil(m / 32)` words.
pub fn transpose_signed(s: &[f32], cols: usize, row: &[u32]) -> Result<Vec<f32>> {
    if cols == 0 || !s.len().is_multiple_of(cols) {
        return Err(Error::Shape {
            what: "sketch",
            message: format!("{} entries are not rows of {cols}", s.len()),
        });
    }
    check_len("sign row words", (s.len() / cols).div_ceil(32), row.len())?;
    let mut out = vec![0.0f32; cols];
    for (i, srow) in s.chunks_exact(cols).enumerate() {
        let plus = (row[i / 32] >> (i % 32)) & 1 == 1;
        for (o, &x) in out.iter_mut().zip(srow) {
            if plus {
                *o += x;
            } else {
                *o -= x;
            }
        }
    }
    Ok(out)
}

/// The GPU table of a sketch S `[m][cols]` (row-major f32): Sᵀ `[cols][m]` as f32 bits, so
/// that invocations computing consecutive sketch rows read consecutive words (the attention's
/// `S q` and the encode kernels' staged chunks are coalesced loads).
pub fn gpu_sketch_table(s: &[f32], m: usize, cols: usize) -> Vec<u32> {
    let mut t = vec![0u32; m * cols];
    for (i, row) in s.chunks_exact(cols).take(m).enumerate() {
        for (d, x) in row.iter().enumerate() {
            t[d * m + i] = x.to_bits();
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_sums() {
        let mut proj = vec![-1.0f32; 64];
        proj[0] = 0.0;
        proj[1] = -0.0;
        proj[33] = 2.5;
        let row = sign_row(&proj);
        assert_eq!(row, [0b11, 0b10]);
        let sq: Vec<f32> = (0..64).map(|i| i as f32).collect();
        // σ = {0, 1, 33}: 2·(0 + 1 + 33) − Σ 0..63.
        assert_eq!(signed_sum(&sq, &row).unwrap(), 68.0 - 2016.0);
        assert!(signed_sum(&sq, &row[..1]).is_err());
        assert!(check_sketch_rows(64).is_ok());
        for bad in [0, 16, 48, 100] {
            assert!(matches!(check_sketch_rows(bad), Err(Error::Config(_))));
        }
        let s = [1.0f32, 2.0, 3.0, 4.0];
        assert_eq!(transpose_signed(&s, 2, &[0b01]).unwrap(), [-2.0, -2.0]);
        assert!(transpose_signed(&s, 3, &[0b01]).is_err());
        assert!(transpose_signed(&s, 2, &[]).is_err());
    }
}
