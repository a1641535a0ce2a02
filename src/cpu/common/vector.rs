//! f32 vector arithmetic in the order the specs fix (docs/contracts/turboquant.md and
//! docs/contracts/qjl.md, "Notation"): sums in index order, each product and each sum rounded
//! to f32 (Rust never contracts `a * b + c` into an FMA), and the input and norm checks.

use half::f16;

use crate::error::{Error, Result};
use crate::store::Input;

/// `Σ_i a_i·b_i` in f32, in index order.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0.0f32, |acc, (&x, &y)| acc + x * y)
}

/// `‖x‖₂` in f32: the sum of squares in index order, then a correctly rounded square root.
pub fn norm(x: &[f32]) -> f32 {
    dot(x, x).sqrt()
}

/// `S·v` with `S` `[rows][cols]` row-major and `v` of length `cols`: entry i is
/// `Σ_j S[i][j]·v_j` in f32, in index order.
pub fn mat_vec(s: &[f32], rows: usize, cols: usize, v: &[f32]) -> Result<Vec<f32>> {
    check_len("matrix entries", rows * cols, s.len())?;
    check_len("vector length", cols, v.len())?;
    if cols == 0 {
        return Ok(vec![0.0; rows]);
    }
    Ok(s.chunks_exact(cols).map(|row| dot(row, v)).collect())
}

/// A norm as stored: the nearest f16, or an error naming the vector when f16 cannot hold it.
pub fn store_norm(n: f32, what: &str, token: usize, head: usize) -> Result<f16> {
    let h = f16::from_f32(n);
    if h.is_finite() {
        Ok(h)
    } else {
        Err(Error::Config(format!(
            "the norm {n} of {what} token {token}, head {head} is beyond f16's range \
             (max 65504); scale the input down"
        )))
    }
}

/// The input rounded to f16 once on entry and returned as f32 (a no-op for values that are
/// already f16): NaN, ±Inf or a finite value beyond f16's range is [`Error::NonFinite`].
pub fn f16_input(x: &[f32], what: &'static str) -> Result<Vec<f32>> {
    Ok(Input::F32(x)
        .to_f16(what)?
        .into_iter()
        .map(f16::to_f32)
        .collect())
}

/// The number of vectors in a flat `[n, heads, dim]` input of length `len`.
pub fn batch_len(len: usize, heads: usize, dim: usize, what: &'static str) -> Result<usize> {
    let row = heads * dim;
    if row == 0 || !len.is_multiple_of(row) {
        return Err(Error::Shape {
            what,
            message: format!("length {len} is not a multiple of heads·dim = {heads}·{dim}"),
        });
    }
    Ok(len / row)
}

/// `Err(LengthMismatch)` unless `actual == expected`.
pub fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<()> {
    if expected == actual {
        Ok(())
    } else {
        Err(Error::LengthMismatch {
            what,
            expected,
            actual,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_order_and_rounding() {
        // 1 + 2^-24 rounds back to 1 in f32 each step; in index order the small terms vanish,
        // summed first they would not.
        let a = [1.0f32, 2f32.powi(-24), 2f32.powi(-24)];
        assert_eq!(dot(&a, &[1.0, 1.0, 1.0]), 1.0);
        assert_eq!(norm(&[3.0, 4.0]), 5.0);
        let s = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(mat_vec(&s, 2, 3, &[1.0, 0.0, -1.0]).unwrap(), [-2.0, -2.0]);
        assert!(mat_vec(&s, 3, 3, &[1.0, 0.0, -1.0]).is_err());
        assert!(mat_vec(&s, 2, 3, &[1.0, 0.0]).is_err());
    }

    #[test]
    fn bad_values() {
        assert!(store_norm(65504.0, "key", 0, 0).is_ok());
        assert!(matches!(
            store_norm(70000.0, "key", 3, 2),
            Err(Error::Config(m)) if m.contains("token 3, head 2")
        ));
        for bad in [f32::NAN, f32::INFINITY, 1e6] {
            assert!(matches!(
                f16_input(&[0.0, bad], "x"),
                Err(Error::NonFinite { index: 1, .. })
            ));
        }
        assert_eq!(
            f16_input(&[0.1], "x").unwrap(),
            [f16::from_f32(0.1).to_f32()]
        );
        assert!(matches!(batch_len(10, 2, 3, "x"), Err(Error::Shape { .. })));
        assert_eq!(batch_len(12, 2, 3, "x").unwrap(), 2);
    }
}
