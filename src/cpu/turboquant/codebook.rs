//! Scalar Lloyd–Max codebooks (docs/contracts/turboquant.md, "Codebook" and
//! "TurboQuant-RVQ"), computed in f64 and handed to every path as f32 tables.
//!
//! Procedure, for a density symmetric about 0 (`density.rs`) and b bits: only the
//! positive half is iterated; its 2^(b−1) centroids start at the (k + ½)/2^b quantiles
//! (k = 2^(b−1) … 2^b − 1), then Lloyd's steps (boundaries = midpoints of neighbouring
//! centroids, the first positive cell starting at exactly 0; centroid = conditional mean of
//! its cell) repeat until no centroid moves by more than 1e-12. The negative half is the
//! mirror image (c_{2^b−1−i} = −c_i), so the middle boundary is exactly 0. Tables are cached
//! per (P, b) for the process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::density::{CoordDensity, ResidualDensity, SymmetricDensity};
use crate::cpu::bitpack::check_bits;
use crate::error::{Error, Result};

/// Lloyd's stopping rule: no centroid moved by more than this.
pub const LLOYD_TOLERANCE: f64 = 1e-12;

/// The largest P the codebooks are computed for.
pub const MAX_P: usize = 1 << 20;

/// A b-bit scalar codebook: 2^b centroids and 2^b − 1 boundaries, ascending.
#[derive(Clone, Debug, PartialEq)]
pub struct Codebook {
    /// The dimension P of the rotated space.
    pub p: usize,
    /// Bits per coordinate.
    pub bits: u32,
    /// The f32 centroids handed to every path (`[2^b]`, ascending, antisymmetric).
    pub centroids: Vec<f32>,
    /// The f32 boundaries (`[2^b − 1]`, ascending, antisymmetric, the middle one 0).
    pub boundaries: Vec<f32>,
    /// The f64 centroids before rounding.
    pub centroids_f64: Vec<f64>,
    /// The f64 boundaries (midpoints of the f64 centroids).
    pub boundaries_f64: Vec<f64>,
    /// Lloyd iterations run.
    pub iterations: usize,
}

impl Codebook {
    /// The code of one rotated coordinate: see [`code`].
    pub fn code(&self, y: f32) -> u32 {
        code(y, &self.boundaries)
    }

    /// The f32 centroid of `code`.
    ///
    /// # Panics
    /// If `code` ≥ 2^b (codes from [`Codebook::code`] or a checked unpack never are).
    pub fn centroid(&self, code: u32) -> f32 {
        self.centroids[code as usize]
    }
}

/// The code of `y`: the number of `boundaries` (ascending) strictly less than `y`; a value on a
/// boundary takes the lower cell.
pub fn code(y: f32, boundaries: &[f32]) -> u32 {
    boundaries.partition_point(|&b| b < y) as u32
}

fn check(p: usize, bits: u32) -> Result<()> {
    check_bits(bits)?;
    if !(4..=MAX_P).contains(&p) {
        return Err(Error::Config(format!(
            "TurboQuant codebooks need 4 ≤ P ≤ {MAX_P}, got P = {p}"
        )));
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Mse,
    Rvq,
}

fn cached(kind: Kind, p: usize, bits: u32, make: impl FnOnce() -> Codebook) -> Arc<Codebook> {
    type Cache = Mutex<HashMap<(Kind, usize, u32), Arc<Codebook>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (kind, p, bits);
    if let Some(c) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return c.clone();
    }
    // Computed without the lock (the RVQ codebook asks for its stage-1 table); a race only
    // computes the same table twice.
    let made = Arc::new(make());
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key)
        .or_insert(made)
        .clone()
}

/// The b-bit codebook of one coordinate of a random unit vector in R^P
/// (`f(t) ∝ (1 − t²)^((P−3)/2)`), for 4 ≤ P ≤ [`MAX_P`] and b = 1..=8. Cached.
/// Cost: Lloyd needs ~45·4^(b−2) iterations (~10^5 and 2–8 s at b = 8, release).
pub fn codebook(p: usize, bits: u32) -> Result<Arc<Codebook>> {
    check(p, bits)?;
    Ok(cached(Kind::Mse, p, bits, || {
        lloyd(&CoordDensity::new(p), p, bits)
    }))
}

/// The RVQ second-stage codebook for P and b bits: Lloyd–Max for the density of
/// `e = y − ŷ₁(y)` with y ~ f and ŷ₁ the f64 b-bit stage-1 codebook ([`codebook`]). Cached.
/// Cost: each step sums over the 2^b stage-1 cells; 0.2 s at P = 128, b = 5 (release), and
/// roughly 10× more per further bit.
pub fn rvq_codebook(p: usize, bits: u32) -> Result<Arc<Codebook>> {
    let stage1 = codebook(p, bits)?;
    Ok(cached(Kind::Rvq, p, bits, || {
        let f = CoordDensity::new(p);
        let e = ResidualDensity::new(&f, &stage1.centroids_f64, &stage1.boundaries_f64);
        lloyd(&e, p, bits)
    }))
}

/// The x in [0, top] with `cdf(x) = q` (q ≥ ½), by bisection to the last bit.
fn quantile(d: &impl SymmetricDensity, q: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, d.top());
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if mid <= lo || mid >= hi {
            break;
        }
        if d.cdf(mid) < q {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

/// Lloyd–Max on the positive half, mirrored (see the module documentation).
fn lloyd(d: &impl SymmetricDensity, p: usize, bits: u32) -> Codebook {
    let n = 1usize << bits;
    let half = n / 2;
    let mut c: Vec<f64> = (0..half)
        .map(|j| quantile(d, ((half + j) as f64 + 0.5) / n as f64))
        .collect();
    let mut iterations = 0;
    let mut edges = vec![0.0; half + 1];
    loop {
        iterations += 1;
        edges[half] = d.top();
        for j in 1..half {
            edges[j] = (c[j - 1] + c[j]) / 2.0;
        }
        let at: Vec<(f64, f64)> = edges
            .iter()
            .map(|&x| (d.cdf(x), d.partial_moment(x)))
            .collect();
        let mut step: f64 = 0.0;
        for (j, cj) in c.iter_mut().enumerate() {
            let mass = at[j + 1].0 - at[j].0;
            if mass > 0.0 {
                let next = (at[j + 1].1 - at[j].1) / mass;
                step = step.max((next - *cj).abs());
                *cj = next;
            }
        }
        if step <= LLOYD_TOLERANCE || iterations >= 10_000_000 {
            break;
        }
    }
    let mut centroids_f64: Vec<f64> = c.iter().rev().map(|&x| -x).collect();
    centroids_f64.extend_from_slice(&c);
    let pos: Vec<f64> = c.windows(2).map(|w| (w[0] + w[1]) / 2.0).collect();
    let mut boundaries_f64: Vec<f64> = pos.iter().rev().map(|&x| -x).collect();
    boundaries_f64.push(0.0);
    boundaries_f64.extend_from_slice(&pos);
    Codebook {
        p,
        bits,
        centroids: centroids_f64.iter().map(|&x| x as f32).collect(),
        boundaries: boundaries_f64.iter().map(|&x| x as f32).collect(),
        centroids_f64,
        boundaries_f64,
        iterations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_counts_boundaries_strictly_below() {
        let b = [-1.0f32, 0.0, 1.0];
        assert_eq!(code(-2.0, &b), 0);
        assert_eq!(code(-1.0, &b), 0, "on a boundary: the lower cell");
        assert_eq!(code(-0.5, &b), 1);
        assert_eq!(code(0.0, &b), 1);
        assert_eq!(code(-0.0, &b), 1);
        assert_eq!(code(0.25, &b), 2);
        assert_eq!(code(1.0, &b), 2);
        assert_eq!(code(7.0, &b), 3);
    }

    #[test]
    fn bad_arguments() {
        assert!(matches!(
            codebook(128, 0),
            Err(Error::BitsOutOfRange { bits: 0 })
        ));
        assert!(matches!(
            codebook(128, 9),
            Err(Error::BitsOutOfRange { bits: 9 })
        ));
        assert!(matches!(codebook(3, 2), Err(Error::Config(_))));
        assert!(matches!(rvq_codebook(2, 1), Err(Error::Config(_))));
    }

    #[test]
    fn b1_is_mean_abs() {
        // E|t| = 2·∫_0^1 t f = 2 / ((P − 1)·Z); one Lloyd step reaches it exactly.
        for p in [4, 16, 128] {
            let d = CoordDensity::new(p);
            let cb = codebook(p, 1).unwrap();
            let want = 2.0 / ((p - 1) as f64 * d.z());
            assert!((cb.centroids_f64[1] - want).abs() < 1e-14, "P = {p}");
            assert_eq!(cb.boundaries, [0.0]);
        }
        // P = 4: f(t) = 1/(π/2)·(1 − t²)^½, E|t| = 4/(3π).
        let cb = codebook(4, 1).unwrap();
        assert!((cb.centroids_f64[1] - 4.0 / (3.0 * std::f64::consts::PI)).abs() < 1e-14);
    }
}
