//! k-means of docs/contracts/vecinfer.md, "Codebooks", in f64: k-means++ seeding from a
//! SplitMix64 stream, then Lloyd iterations until no assignment changes or `max_iters`.
//! The details the spec leaves open, fixed here (every path that trains codebooks follows
//! them, so a calibration is reproducible bit for bit):
//! - a uniform u ∈ (0, 1] is [`SplitMix64::next_uniform`];
//! - the first centre is point ⌊u·n⌋ (clamped to n − 1);
//! - each next centre: D²(i) = the squared distance of point i to its nearest chosen centre
//!   (f64, sums over coordinates in index order); S = Σ D² in index order; the centre is the
//!   smallest i whose prefix sum is ≥ u·S (S = 0, i.e. fewer distinct points than centres:
//!   point ⌊u·n⌋);
//! - an assignment is the nearest centre in f64, ties to the lower index; iteration 1 always
//!   counts as a change; after every assignment that changed something the centres become the
//!   means of their points (f64 sums in point order);
//! - an empty cluster (in index order) takes the point farthest from its assigned centre
//!   (ties to the lower point index, a point taken once per iteration), which moves to it.
//!
//! Assignment runs in parallel over points (rayon); each point's result does not depend on the
//! split, so the result is the same on any number of threads.

use rayon::prelude::*;

use crate::cpu::common::splitmix::SplitMix64;
use crate::error::{Error, Result};

/// The centres `[c, d]` (f64), the Lloyd iterations run and whether assignments converged.
#[derive(Clone, Debug, PartialEq)]
pub struct Kmeans {
    /// Centres, row-major `[c, d]`.
    pub centres: Vec<f64>,
    /// Assignment passes run (≤ max_iters).
    pub iterations: usize,
    /// No assignment changed in the last pass.
    pub converged: bool,
    /// Mean squared distance of the points to their centres.
    pub mse: f64,
}

fn dist2(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).fold(0.0, |s, (x, y)| s + (x - y) * (x - y))
}

fn nearest(p: &[f64], centres: &[f64], d: usize) -> (u32, f64) {
    let mut best = (0u32, f64::INFINITY);
    for (c, row) in centres.chunks_exact(d).enumerate() {
        let e = dist2(p, row);
        if e < best.1 {
            best = (c as u32, e);
        }
    }
    best
}

fn pick(u: f64, n: usize) -> usize {
    ((u * n as f64) as usize).min(n - 1)
}

/// k-means of `points` `[n, d]` into `c` centres (n ≥ c required: an error otherwise).
pub fn kmeans(
    points: &[f64],
    d: usize,
    c: usize,
    rng: &mut SplitMix64,
    max_iters: usize,
) -> Result<Kmeans> {
    let n = points.len() / d.max(1);
    if d == 0 || !points.len().is_multiple_of(d) || c == 0 {
        return Err(Error::Config(format!("k-means: bad shape (d {d}, c {c})")));
    }
    if n < c {
        return Err(Error::Config(format!(
            "k-means needs at least C = {c} sub-vectors, the calibration text gave {n} \
             (use a longer text)"
        )));
    }
    let pt = |i: usize| &points[i * d..][..d];
    // k-means++ seeding.
    let mut centres = Vec::with_capacity(c * d);
    centres.extend_from_slice(pt(pick(rng.next_uniform(), n)));
    let mut d2: Vec<f64> = (0..n)
        .into_par_iter()
        .map(|i| dist2(pt(i), &centres[..d]))
        .collect();
    while centres.len() < c * d {
        let u = rng.next_uniform();
        let total: f64 = d2.iter().sum();
        let i = if total > 0.0 {
            let target = u * total;
            let mut acc = 0.0;
            let mut chosen = None;
            for (i, &x) in d2.iter().enumerate() {
                acc += x;
                if acc >= target && x > 0.0 {
                    chosen = Some(i);
                    break;
                }
            }
            chosen.unwrap_or_else(|| d2.iter().rposition(|&x| x > 0.0).unwrap_or(0))
        } else {
            pick(u, n)
        };
        let start = centres.len();
        centres.extend_from_slice(pt(i));
        let new = centres[start..].to_vec();
        d2.par_iter_mut()
            .enumerate()
            .for_each(|(j, x)| *x = x.min(dist2(pt(j), &new)));
    }
    // Lloyd.
    let mut assign = vec![u32::MAX; n];
    let mut dists = vec![0.0f64; n];
    let (mut iterations, mut converged) = (0, false);
    while iterations < max_iters {
        iterations += 1;
        let next: Vec<(u32, f64)> = (0..n)
            .into_par_iter()
            .map(|i| nearest(pt(i), &centres, d))
            .collect();
        let changed = next.iter().zip(&assign).any(|(a, &b)| a.0 != b);
        for (i, (a, e)) in next.into_iter().enumerate() {
            assign[i] = a;
            dists[i] = e;
        }
        if !changed {
            converged = true;
            break;
        }
        let mut sums = vec![0.0f64; c * d];
        let mut counts = vec![0usize; c];
        for (i, &a) in assign.iter().enumerate() {
            let a = a as usize;
            counts[a] += 1;
            for (s, x) in sums[a * d..][..d].iter_mut().zip(pt(i)) {
                *s += x;
            }
        }
        let mut taken = vec![false; n];
        for k in 0..c {
            if counts[k] == 0 {
                let mut far = None::<(usize, f64)>;
                for i in 0..n {
                    if !taken[i]
                        && counts[assign[i] as usize] > 1
                        && far.is_none_or(|f| dists[i] > f.1)
                    {
                        far = Some((i, dists[i]));
                    }
                }
                if let Some((i, _)) = far {
                    taken[i] = true;
                    let old = assign[i] as usize;
                    counts[old] -= 1;
                    for (s, x) in sums[old * d..][..d].iter_mut().zip(pt(i)) {
                        *s -= x;
                    }
                    assign[i] = k as u32;
                    dists[i] = 0.0;
                    counts[k] = 1;
                    sums[k * d..][..d].copy_from_slice(pt(i));
                }
            }
        }
        for k in 0..c {
            if counts[k] > 0 {
                for j in 0..d {
                    centres[k * d + j] = sums[k * d + j] / counts[k] as f64;
                }
            }
        }
    }
    let mse = (0..n)
        .into_par_iter()
        .map(|i| nearest(pt(i), &centres, d).1)
        .collect::<Vec<_>>()
        .iter()
        .sum::<f64>()
        / n as f64;
    Ok(Kmeans {
        centres,
        iterations,
        converged,
        mse,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separated_clusters_are_found() {
        // Four tight clusters around (±10, ±10): the centres land on them in any order.
        let mut rng = SplitMix64::new(1, 0, 0, 9);
        let mut pts = Vec::new();
        for i in 0..400 {
            let (cx, cy) = [(10.0, 10.0), (-10.0, 10.0), (10.0, -10.0), (-10.0, -10.0)][i % 4];
            pts.push(cx + rng.next_uniform() - 0.5);
            pts.push(cy + rng.next_uniform() - 0.5);
        }
        let k = kmeans(&pts, 2, 4, &mut SplitMix64::new(7, 0, 0, 4), 50).unwrap();
        assert!(k.converged);
        let mut found: Vec<(i32, i32)> = k
            .centres
            .chunks(2)
            .map(|c| (c[0].round() as i32, c[1].round() as i32))
            .collect();
        found.sort();
        assert_eq!(found, [(-10, -10), (-10, 10), (10, -10), (10, 10)]);
        assert!(k.mse < 0.2, "{}", k.mse);
        // Deterministic: the same draws give the same centres.
        let k2 = kmeans(&pts, 2, 4, &mut SplitMix64::new(7, 0, 0, 4), 50).unwrap();
        assert_eq!(k, k2);
        assert!(kmeans(&pts[..6], 2, 4, &mut SplitMix64::new(7, 0, 0, 4), 50).is_err());
    }

    #[test]
    fn duplicates_fill_every_centre() {
        // 3 distinct points, 4 centres: seeding falls back to uniform picks, Lloyd empties a
        // duplicate centre and refills it; no NaN, every point at distance 0.
        let pts = [0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 1.0, 1.0, 2.0, 2.0];
        let k = kmeans(&pts, 2, 4, &mut SplitMix64::new(3, 0, 0, 4), 50).unwrap();
        assert!(k.centres.iter().all(|x| x.is_finite()));
        assert_eq!(k.mse, 0.0);
    }
}
