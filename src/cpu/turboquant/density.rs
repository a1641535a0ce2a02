//! The f64 densities behind the codebooks (docs/contracts/turboquant.md, "Codebook" and
//! "TurboQuant-RVQ"), with integrals accurate to ~1e-15:
//!
//! - [`CoordDensity`]: one coordinate t of a uniform random unit vector in R^P,
//!   `f(t) ∝ (1 − t²)^((P−3)/2)` on [−1, 1]. With t = sin θ, `f(t) dt ∝ cos^(P−2) θ dθ`, a
//!   smooth integrand without the endpoint singularity: the CDF is tabulated once by adaptive
//!   Gauss–Legendre quadrature in θ and completed by one Gauss–Legendre rule inside a table
//!   step; the first moment has the closed form `∫ t f = −(1 − t²)^((P−1)/2) / ((P−1)·Z)`.
//! - [`ResidualDensity`]: e = y − ŷ₁(y) for y ~ f, the mixture of f shifted into each
//!   stage-1 cell.

use std::f64::consts::{FRAC_PI_2, PI};
use std::sync::OnceLock;

/// A density symmetric about 0 on [−top, top], through its CDF and partial first moment.
pub(crate) trait SymmetricDensity {
    /// The upper end of the support.
    fn top(&self) -> f64;
    /// `P(X ≤ x)`.
    fn cdf(&self, x: f64) -> f64;
    /// `∫_{−top}^{x} t f(t) dt`.
    fn partial_moment(&self, x: f64) -> f64;
}

/// Gauss–Legendre rule of `N_GL` points on [−1, 1]: (nodes, weights).
const N_GL: usize = 12;

fn gauss_legendre() -> &'static ([f64; N_GL], [f64; N_GL]) {
    static RULE: OnceLock<([f64; N_GL], [f64; N_GL])> = OnceLock::new();
    RULE.get_or_init(|| {
        let (mut x, mut w) = ([0.0; N_GL], [0.0; N_GL]);
        let n = N_GL as f64;
        for i in 0..N_GL {
            // Newton on P_n from the classical first guess; P_n and P_n' by the recurrence.
            let mut z = (PI * (i as f64 + 0.75) / (n + 0.5)).cos();
            let mut dp = 0.0;
            for _ in 0..100 {
                let (mut p0, mut p1) = (1.0, z);
                for k in 2..=N_GL {
                    let k = k as f64;
                    (p0, p1) = (p1, ((2.0 * k - 1.0) * z * p1 - (k - 1.0) * p0) / k);
                }
                dp = n * (z * p1 - p0) / (z * z - 1.0);
                let dz = p1 / dp;
                z -= dz;
                if dz.abs() < 1e-16 {
                    break;
                }
            }
            x[i] = z;
            w[i] = 2.0 / ((1.0 - z * z) * dp * dp);
        }
        (x, w)
    })
}

/// `(∫_a^b g, ∫_a^b |g|)` by the fixed Gauss–Legendre rule.
fn gl_abs(g: &impl Fn(f64) -> f64, a: f64, b: f64) -> (f64, f64) {
    let (x, w) = gauss_legendre();
    let (mid, half) = ((a + b) / 2.0, (b - a) / 2.0);
    let (mut s, mut s_abs) = (0.0, 0.0);
    for (&x, &w) in x.iter().zip(w) {
        let v = w * g(mid + half * x);
        s += v;
        s_abs += v.abs();
    }
    (half * s, half.abs() * s_abs)
}

/// `∫_a^b g` by the fixed Gauss–Legendre rule.
fn gl(g: &impl Fn(f64) -> f64, a: f64, b: f64) -> f64 {
    gl_abs(g, a, b).0
}

/// `∫_a^b g` by adaptive bisection: a piece is accepted when the rule on its halves agrees
/// with the rule on the whole piece to `tol` (absolute, per piece) or to 1e-15 of `∫|g|`
/// over the piece (rounding noise), or when it is narrower than 1e-9.
pub(crate) fn adaptive(g: &impl Fn(f64) -> f64, a: f64, b: f64, tol: f64) -> f64 {
    fn go(g: &impl Fn(f64) -> f64, a: f64, b: f64, whole: f64, tol: f64) -> f64 {
        let m = (a + b) / 2.0;
        let ((l, la), (r, ra)) = (gl_abs(g, a, m), gl_abs(g, m, b));
        if (l + r - whole).abs() <= tol.max(1e-15 * (la + ra)) || (b - a).abs() < 1e-9 {
            l + r
        } else {
            go(g, a, m, l, tol) + go(g, m, b, r, tol)
        }
    }
    go(g, a, b, gl(g, a, b), tol)
}

/// One coordinate of a random unit vector in R^P: `f(t) ∝ (1 − t²)^((P−3)/2)`.
pub(crate) struct CoordDensity {
    p: usize,
    /// `Z = ∫ cos^(P−2) θ dθ` over [−π/2, π/2] (by the same quadrature as the table).
    z: f64,
    /// Table step in θ; knots at −π/2 + j·h, j = 0..=K, the last one at 0.
    h: f64,
    /// `cum[j]` = the CDF at knot j.
    cum: Vec<f64>,
}

impl CoordDensity {
    /// The density for `p ≥ 4` (callers check).
    pub(crate) fn new(p: usize) -> Self {
        let n = (p - 2) as f64;
        // A step of at most half the θ-width (≈ 1/√n) of the peak.
        let steps = (FRAC_PI_2 / (0.5 / n.sqrt()).min(0.1)).ceil() as usize;
        let h = FRAC_PI_2 / steps as f64;
        // Unnormalized first (z = 1); Z is then twice the left half's integral, so the
        // tabulated CDF reaches exactly ½ at 0 and the moments use the same Z.
        let mut d = Self {
            p,
            z: 1.0,
            h,
            cum: Vec::with_capacity(steps + 1),
        };
        let mut acc = 0.0;
        d.cum.push(0.0);
        for j in 0..steps {
            let a = -FRAC_PI_2 + j as f64 * h;
            acc += adaptive(&|t| d.weight(t), a, a + h, 1e-18);
            d.cum.push(acc);
        }
        d.z = 2.0 * acc;
        for c in d.cum.iter_mut() {
            *c /= d.z;
        }
        d
    }

    /// The normalized integrand in θ: `cos^(P−2) θ / Z`.
    pub(crate) fn weight(&self, theta: f64) -> f64 {
        theta.cos().powi((self.p - 2) as i32) / self.z
    }

    /// The normalization constant Z.
    #[cfg(test)]
    pub(crate) fn z(&self) -> f64 {
        self.z
    }

    /// The CDF at θ ≤ 0.
    fn cdf_left(&self, theta: f64) -> f64 {
        let from = theta + FRAC_PI_2;
        let j = ((from / self.h).floor() as usize).min(self.cum.len() - 1);
        let knot = -FRAC_PI_2 + j as f64 * self.h;
        self.cum[j] + gl(&|t| self.weight(t), knot, theta)
    }
}

impl SymmetricDensity for CoordDensity {
    fn top(&self) -> f64 {
        1.0
    }

    fn cdf(&self, x: f64) -> f64 {
        let x = x.clamp(-1.0, 1.0);
        if x <= 0.0 {
            self.cdf_left(x.asin())
        } else {
            1.0 - self.cdf_left(-x.asin())
        }
    }

    fn partial_moment(&self, x: f64) -> f64 {
        let x = x.clamp(-1.0, 1.0);
        let q = (1.0 - x) * (1.0 + x);
        -q.powf((self.p - 1) as f64 / 2.0) / ((self.p - 1) as f64 * self.z)
    }
}

/// The stage-2 residual `e = y − c_k` for y ~ f in stage-1 cell k = [B_k, B_{k+1}].
pub(crate) struct ResidualDensity<'a> {
    f: &'a CoordDensity,
    /// Stage-1 centroids (f64), ascending.
    c: Vec<f64>,
    /// Stage-1 cell edges: −1, the boundaries, 1.
    edge: Vec<f64>,
    /// `F(B_k)` and `M(B_k)` at each lower edge.
    f_lo: Vec<f64>,
    m_lo: Vec<f64>,
    top: f64,
}

impl<'a> ResidualDensity<'a> {
    /// From the f64 stage-1 centroids and boundaries (2^b and 2^b − 1 of them).
    pub(crate) fn new(f: &'a CoordDensity, centroids: &[f64], boundaries: &[f64]) -> Self {
        let mut edge = vec![-1.0];
        edge.extend_from_slice(boundaries);
        edge.push(1.0);
        let f_lo = edge[..centroids.len()].iter().map(|&b| f.cdf(b)).collect();
        let m_lo = edge[..centroids.len()]
            .iter()
            .map(|&b| f.partial_moment(b))
            .collect();
        let top = centroids
            .iter()
            .enumerate()
            .map(|(k, &c)| (edge[k + 1] - c).max(c - edge[k]))
            .fold(0.0, f64::max);
        Self {
            f,
            c: centroids.to_vec(),
            edge,
            f_lo,
            m_lo,
            top,
        }
    }

    /// (CDF, partial moment) at `x`: the sums over stage-1 cells of the mass and the first
    /// moment of e on `{y ∈ cell k, y − c_k ≤ x}`.
    fn both(&self, x: f64) -> (f64, f64) {
        let (mut mass, mut moment) = (0.0, 0.0);
        for (k, &c) in self.c.iter().enumerate() {
            let hi = (c + x).min(self.edge[k + 1]);
            if hi > self.edge[k] {
                let dm = self.f.cdf(hi) - self.f_lo[k];
                mass += dm;
                moment += (self.f.partial_moment(hi) - self.m_lo[k]) - c * dm;
            }
        }
        (mass, moment)
    }
}

impl SymmetricDensity for ResidualDensity<'_> {
    fn top(&self) -> f64 {
        self.top
    }

    fn cdf(&self, x: f64) -> f64 {
        self.both(x).0
    }

    fn partial_moment(&self, x: f64) -> f64 {
        self.both(x).1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauss_legendre_rule() {
        let (x, w) = gauss_legendre();
        assert!((w.iter().sum::<f64>() - 2.0).abs() < 1e-14);
        // Exact for polynomials of degree 2N − 1.
        let deg = 2 * N_GL as i32 - 2;
        let got: f64 = x.iter().zip(w).map(|(x, w)| w * x.powi(deg)).sum();
        assert!((got - 2.0 / f64::from(deg + 1)).abs() < 1e-14, "{got}");
    }

    #[test]
    fn cdf_and_moments() {
        for p in [4, 5, 64, 128, 1024] {
            let d = CoordDensity::new(p);
            let full = adaptive(&|t| d.weight(t), -FRAC_PI_2, FRAC_PI_2, 1e-17);
            assert!((full - 1.0).abs() < 1e-14, "P = {p}: total mass {full}");
            assert!((d.cdf(0.0) - 0.5).abs() < 1e-15, "P = {p}: cdf(0)");
            assert_eq!(d.cdf(-1.0), 0.0);
            assert!((d.cdf(1.0) - 1.0).abs() < 1e-15);
            // The tabulated CDF against one adaptive integral from −π/2.
            for x in [-0.9, -0.3, -0.1, -0.05, -0.011, 0.02, 0.07, 0.25, 0.6] {
                let direct = adaptive(&|t| d.weight(t), -FRAC_PI_2, f64::asin(x), 1e-17);
                assert!(
                    (d.cdf(x) - direct).abs() < 5e-15,
                    "P = {p}, x = {x}: {} vs {direct}",
                    d.cdf(x)
                );
                // The closed-form moment against quadrature of sin θ·weight.
                let m = adaptive(&|t| t.sin() * d.weight(t), -FRAC_PI_2, f64::asin(x), 1e-17);
                assert!((d.partial_moment(x) - m).abs() < 2e-15, "P = {p}, x = {x}");
            }
        }
        // Wallis: Z_0 = π, Z_1 = 2, Z_n = Z_{n−2}·(n−1)/n (this product's own rounding
        // grows with n, hence the tolerance).
        for p in [4, 5, 6, 64, 128, 1024] {
            let n = p - 2;
            let mut z = if n % 2 == 0 { PI } else { 2.0 };
            for k in (2 + n % 2..=n).step_by(2) {
                z *= (k - 1) as f64 / k as f64;
            }
            let got = CoordDensity::new(p).z();
            assert!(
                (got - z).abs() < 1e-14 * z,
                "P = {p}: Z {got} vs Wallis {z}"
            );
        }
    }

    #[test]
    fn cdf_against_incomplete_beta() {
        // Computed once with mpmath (30 digits): t² ~ Beta(½, (P−1)/2), so
        // P(t ≤ x) = ½ ± ½·I_{x²}(½, (P−1)/2) (`mp.betainc(.., regularized=True)`).
        let want = [
            (128, -0.3, 0.00027607254234058974),
            (128, -0.05, 0.28681432209512914),
            (128, 0.02, 0.5889978497678956),
            (128, 0.1, 0.8702461760133166),
            (1024, -0.3, 4.6156573666249764e-23),
            (1024, -0.05, 0.05481831772904534),
            (1024, 0.02, 0.738782061847948),
            (1024, 0.1, 0.9993263139984566),
        ];
        for (p, x, f) in want {
            let got = CoordDensity::new(p).cdf(x);
            assert!((got - f).abs() < 5e-15, "P = {p}, x = {x}: {got} vs {f}");
        }
    }

    #[test]
    fn residual_is_a_distribution() {
        let d = CoordDensity::new(128);
        let c = [-0.1, -0.03, 0.03, 0.1];
        let b = [-0.065, 0.0, 0.065];
        let r = ResidualDensity::new(&d, &c, &b);
        assert!((r.cdf(r.top()) - 1.0).abs() < 1e-14);
        assert!(r.cdf(-r.top()).abs() < 1e-14);
        assert!((r.cdf(0.0) - 0.5).abs() < 1e-14, "symmetric");
        assert!(r.partial_moment(r.top()).abs() < 1e-14, "mean 0");
    }
}
