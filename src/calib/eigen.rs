//! Eigen-decomposition of a small symmetric matrix in f64 by cyclic Jacobi rotations, for the
//! first right singular vector of a query matrix Q (N × D, D ≤ 256): v₁ of Q = the eigenvector
//! of the Gram matrix QᵀQ with the largest eigenvalue, σᵢ = √λᵢ.
//!
//! Why not a crate: Q-Filters needs one dominant direction of a D × D (64..256) symmetric
//! matrix per head; a ~60-line Jacobi solver in f64 is exact to ~1e-15 relative on such
//! matrices, needs no dependency (nalgebra / faer would be the only users of a linear-algebra
//! crate in kvpack), and its sweeps are deterministic, which the reproducibility test relies
//! on. Forming QᵀQ squares the condition number, which matters only for the small singular
//! values, not for v₁ when σ₁ > σ₂ (the report prints σ₁/σ₂).

/// Eigenvalues (descending) and eigenvectors (row i = the unit eigenvector of eigenvalue i)
/// of the symmetric `n × n` matrix `a` (row-major; only symmetry up to rounding is assumed).
pub fn symmetric_eigen(a: &[f64], n: usize) -> (Vec<f64>, Vec<Vec<f64>>) {
    assert_eq!(a.len(), n * n, "symmetric_eigen: a must be n × n");
    let mut m = a.to_vec();
    let mut v = vec![0.0f64; n * n];
    for i in 0..n {
        v[i * n + i] = 1.0;
    }
    let total: f64 = m.iter().map(|x| x * x).sum::<f64>().sqrt();
    for _sweep in 0..100 {
        let off: f64 = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| m[i * n + j] * m[i * n + j])
            .sum::<f64>()
            .sqrt();
        if off <= 1e-15 * total || total == 0.0 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = m[p * n + q];
                if apq == 0.0 {
                    continue;
                }
                let (app, aqq) = (m[p * n + p], m[q * n + q]);
                let theta = (aqq - app) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..n {
                    let (mkp, mkq) = (m[k * n + p], m[k * n + q]);
                    m[k * n + p] = c * mkp - s * mkq;
                    m[k * n + q] = s * mkp + c * mkq;
                }
                for k in 0..n {
                    let (mpk, mqk) = (m[p * n + k], m[q * n + k]);
                    m[p * n + k] = c * mpk - s * mqk;
                    m[q * n + k] = s * mpk + c * mqk;
                }
                for k in 0..n {
                    let (vkp, vkq) = (v[k * n + p], v[k * n + q]);
                    v[k * n + p] = c * vkp - s * vkq;
                    v[k * n + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| m[j * n + j].total_cmp(&m[i * n + i]).then(i.cmp(&j)));
    let values = order.iter().map(|&i| m[i * n + i]).collect();
    let vectors = order
        .iter()
        .map(|&i| (0..n).map(|k| v[k * n + i]).collect())
        .collect();
    (values, vectors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_spectrum() {
        // A = R·diag(5, 2, 1)·Rᵀ with R a rotation by 30° in the (0, 1) plane.
        let (c, s) = (30f64.to_radians().cos(), 30f64.to_radians().sin());
        let r = [[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]];
        let d = [5.0, 2.0, 1.0];
        let mut a = vec![0.0; 9];
        for i in 0..3 {
            for j in 0..3 {
                a[i * 3 + j] = (0..3).map(|k| r[i][k] * d[k] * r[j][k]).sum();
            }
        }
        let (vals, vecs) = symmetric_eigen(&a, 3);
        for (x, y) in vals.iter().zip(d) {
            assert!((x - y).abs() < 1e-12, "{vals:?}");
        }
        let dot = (vecs[0][0] * c + vecs[0][1] * s).abs();
        assert!((dot - 1.0).abs() < 1e-12, "{vecs:?}");
    }
}
