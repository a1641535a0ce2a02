//! The random rotation of docs/contracts/turboquant.md, "Rotation":
//! `y = (1/√P)·H_P·(s ⊙ u)` with the Sylvester–Hadamard matrix in natural order, and its
//! inverse `u = s ⊙ ((1/√P)·H_P·y)`. Every product and sum is rounded to f32, in this order:
//! forward = signs, butterflies, × c; inverse = butterflies, × c, × signs.

use crate::error::{Error, Result};

/// P = the smallest power of two ≥ `dim`; `dim` must be ≥ 3 (so P ≥ 4).
pub fn padded_dim(dim: usize) -> Result<usize> {
    if dim < 3 {
        return Err(Error::Config(format!(
            "TurboQuant needs a head dimension of at least 3, got {dim}"
        )));
    }
    dim.checked_next_power_of_two()
        .ok_or_else(|| Error::Config(format!("head dimension {dim} is too large")))
}

/// c = the f32 nearest to 1/√P (computed in f64, rounded once).
pub fn inv_sqrt(p: usize) -> f32 {
    (1.0 / (p as f64).sqrt()) as f32
}

/// The unnormalized Walsh–Hadamard transform in place: log2(P) passes of butterflies
/// `(a, b) → (a + b, a − b)` over strides 1, 2, 4, … P/2 (at stride h, index i with bit h
/// clear pairs with i + h). `v.len()` must be a power of two (an error otherwise).
pub fn butterflies(v: &mut [f32]) -> Result<()> {
    if !v.len().is_power_of_two() {
        return Err(Error::Shape {
            what: "Walsh–Hadamard input",
            message: format!("length {} is not a power of two", v.len()),
        });
    }
    wht(v);
    Ok(())
}

/// [`butterflies`] on a power-of-two length.
fn wht(v: &mut [f32]) {
    let p = v.len();
    let mut h = 1;
    while h < p {
        for i in (0..p).filter(|i| i & h == 0) {
            let (a, b) = (v[i], v[i + h]);
            v[i] = a + b;
            v[i + h] = a - b;
        }
        h *= 2;
    }
}

fn check(v: &[f32], signs: &[f32]) -> Result<()> {
    let p = v.len();
    if p < 4 || !p.is_power_of_two() {
        return Err(Error::Shape {
            what: "rotation input",
            message: format!("length {p} is not a power of two ≥ 4"),
        });
    }
    crate::cpu::common::vector::check_len("rotation signs", p, signs.len())
}

/// `y = rotate(u)` for a P-vector `u` (already zero-padded) and its ±1 `signs` (P of them):
/// `s_i·u_i`, the butterflies, then × c. Errors on lengths that are not the same power of
/// two ≥ 4.
pub fn rotate(u: &[f32], signs: &[f32]) -> Result<Vec<f32>> {
    check(u, signs)?;
    let mut y = u.to_vec();
    rotate_in_place(&mut y, signs);
    Ok(y)
}

/// The inverse: butterflies on `y`, × c, × s_i (all P coordinates; callers keep the first D).
pub fn inverse_rotate(y: &[f32], signs: &[f32]) -> Result<Vec<f32>> {
    check(y, signs)?;
    let mut u = y.to_vec();
    inverse_rotate_in_place(&mut u, signs);
    Ok(u)
}

/// [`rotate`] without the length checks (callers have checked them).
pub(crate) fn rotate_in_place(v: &mut [f32], signs: &[f32]) {
    for (x, s) in v.iter_mut().zip(signs) {
        *x *= s;
    }
    wht(v);
    let c = inv_sqrt(v.len());
    for x in v.iter_mut() {
        *x *= c;
    }
}

/// [`inverse_rotate`] without the length checks.
pub(crate) fn inverse_rotate_in_place(v: &mut [f32], signs: &[f32]) {
    wht(v);
    let c = inv_sqrt(v.len());
    for (x, s) in v.iter_mut().zip(signs) {
        *x = *x * c * s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_dims() {
        assert_eq!(padded_dim(3).unwrap(), 4);
        assert_eq!(padded_dim(64).unwrap(), 64);
        assert_eq!(padded_dim(65).unwrap(), 128);
        assert_eq!(padded_dim(96).unwrap(), 128);
        assert!(matches!(padded_dim(2), Err(Error::Config(_))));
        assert!(matches!(padded_dim(0), Err(Error::Config(_))));
    }

    #[test]
    fn constant_and_matrix() {
        assert_eq!(inv_sqrt(4), 0.5);
        assert_eq!(inv_sqrt(64), 0.125);
        assert_eq!(inv_sqrt(128), std::f32::consts::FRAC_1_SQRT_2 / 8.0);
        // Natural (Sylvester) order: column j of H_P is the transform of e_j, and
        // H[i][j] = (−1)^popcount(i & j).
        let p = 8;
        for j in 0..p {
            let mut e = vec![0.0f32; p];
            e[j] = 1.0;
            butterflies(&mut e).unwrap();
            for (i, &x) in e.iter().enumerate() {
                let want = if (i & j).count_ones() % 2 == 0 {
                    1.0
                } else {
                    -1.0
                };
                assert_eq!(x, want, "H[{i}][{j}]");
            }
        }
    }

    #[test]
    fn signs_come_first() {
        // e_1 with s_1 = −1: the signs flip the input before H, so y = −c·H[:, 1];
        // signs applied after H would flip coordinate 1 of the output instead.
        let signs = [1.0, -1.0, 1.0, 1.0];
        let y = rotate(&[0.0, 1.0, 0.0, 0.0], &signs).unwrap();
        assert_eq!(y, [-0.5, 0.5, -0.5, 0.5]);
        let u = inverse_rotate(&y, &signs).unwrap();
        assert_eq!(u, [0.0, 1.0, 0.0, 0.0]);
    }

    #[test]
    fn bad_lengths() {
        assert!(butterflies(&mut [0.0; 6]).is_err());
        assert!(rotate(&[0.0; 6], &[1.0; 6]).is_err());
        assert!(rotate(&[0.0; 2], &[1.0; 2]).is_err());
        assert!(rotate(&[0.0; 8], &[1.0; 4]).is_err());
        assert!(inverse_rotate(&[0.0; 8], &[1.0; 16]).is_err());
    }
}
