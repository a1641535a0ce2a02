//! Q-Filters calibration (docs/contracts/qfilters.md, "Calibration"): per (layer, query head)
//! the first right singular vector v of Q_h (N × D post-RoPE queries, not mean-centred), in
//! f64 through the eigenvectors of Q_hᵀQ_h ([`super::eigen`]); s = +1 when more than half of
//! the entries of Q_h·v are > 0, else −1; u_h = s·v. A KV head's u is the mean of its query
//! heads' u_h (query head h belongs to KV head h / (Hq/Hkv)), renormalized.

use rayon::prelude::*;

use super::eigen::symmetric_eigen;
use super::file::HeadReport;

/// The N ≤ `max_rows` positions used: all T when T ≤ max_rows, else ⌊i·T/max_rows⌋.
pub fn rows(tokens: usize, max_rows: usize) -> Vec<usize> {
    if tokens <= max_rows {
        (0..tokens).collect()
    } else {
        (0..max_rows).map(|i| i * tokens / max_rows).collect()
    }
}

/// u_h and its report for one query head: `q` the layer's queries `[T, hq, d]`, `rows` the
/// positions used.
pub fn head_filter(
    q: &[f32],
    hq: usize,
    d: usize,
    head: usize,
    rows: &[usize],
    layer: usize,
) -> (Vec<f64>, HeadReport) {
    let row = |t: usize| &q[(t * hq + head) * d..][..d];
    let mut g = vec![0.0f64; d * d];
    for &t in rows {
        let x = row(t);
        for i in 0..d {
            let xi = x[i] as f64;
            for j in 0..d {
                g[i * d + j] += xi * x[j] as f64;
            }
        }
    }
    let (vals, vecs) = symmetric_eigen(&g, d);
    let v = &vecs[0];
    let proj: Vec<f64> = rows
        .iter()
        .map(|&t| row(t).iter().zip(v).map(|(&a, b)| a as f64 * b).sum())
        .collect();
    let positive = proj.iter().filter(|&&p| p > 0.0).count();
    let majority_sign = if 2 * positive > rows.len() { 1 } else { -1 };
    let sum: f64 = proj.iter().sum();
    let sum_sign = if sum > 0.0 {
        1
    } else if sum < 0.0 {
        -1
    } else {
        0
    };
    let sigma_ratio = if d > 1 && vals[1] > 0.0 {
        (vals[0] / vals[1]).sqrt()
    } else {
        f64::INFINITY
    };
    let u = v.iter().map(|x| x * majority_sign as f64).collect();
    let report = HeadReport {
        layer,
        head,
        positive_fraction: positive as f64 / rows.len().max(1) as f64,
        majority_sign,
        sum_sign,
        sigma_ratio,
    };
    (u, report)
}

/// One layer's filters: (u per KV head `[hkv, d]`, u_h per query head `[hq, d]`, reports).
pub fn layer_filters(
    q: &[f32],
    hq: usize,
    hkv: usize,
    d: usize,
    rows: &[usize],
    layer: usize,
) -> (Vec<f32>, Vec<f32>, Vec<HeadReport>) {
    let per_head: Vec<(Vec<f64>, HeadReport)> = (0..hq)
        .into_par_iter()
        .map(|h| head_filter(q, hq, d, h, rows, layer))
        .collect();
    let group = hq / hkv;
    let mut kv = Vec::with_capacity(hkv * d);
    for g in 0..hkv {
        let mut m = vec![0.0f64; d];
        for (u, _) in &per_head[g * group..(g + 1) * group] {
            for (a, b) in m.iter_mut().zip(u) {
                *a += b / group as f64;
            }
        }
        let n = m.iter().map(|x| x * x).sum::<f64>().sqrt();
        kv.extend(m.iter().map(|x| if n > 0.0 { (x / n) as f32 } else { 0.0 }));
    }
    let qf = per_head
        .iter()
        .flat_map(|(u, _)| u.iter().map(|&x| x as f32))
        .collect();
    let reports = per_head.into_iter().map(|(_, r)| r).collect();
    (kv, qf, reports)
}

/// Two references for a calibrated filter's Spearman ρ on one text: per KV head of one
/// layer, ρ against `mass` ([`crate::policy::spearman::attention_mass`] of the same
/// `q` `[T, hq, d]` and `k` `[T, hkv, d]`) of
/// - `in_sample`: the filters calibrated on this very text (the spec's SVD and majority rule
///   over ≤ `max_rows` evenly spaced positions): what a calibration text exactly like the
///   evaluated one gives;
/// - `mean_logit`: [`crate::policy::spearman::mean_logit`], the score the filter approximates
///   with one direction per head, from the later queries themselves.
///
/// Neither bounds ρ (on stories260K the in-sample filters beat the mean logit; on SmolLM2's
/// story the mean logit is higher). `kvpack eval` reports both beside a calibrated filter's ρ.
#[derive(Clone, Debug, PartialEq)]
pub struct References {
    /// ρ of ⟨k, u⟩ with u calibrated on this text, per KV head.
    pub in_sample: Vec<Option<f64>>,
    /// ρ of the mean logit from the later queries, per KV head.
    pub mean_logit: Vec<Option<f64>>,
}

/// See [`References`].
#[allow(clippy::too_many_arguments)]
pub fn references(
    q: &[f32],
    k: &[f32],
    hq: usize,
    hkv: usize,
    d: usize,
    layer: usize,
    max_rows: usize,
    mass: &[Vec<f64>],
) -> References {
    use crate::policy::spearman;
    let t = k.len() / (hkv * d);
    let (u, _, _) = layer_filters(q, hq, hkv, d, &rows(t, max_rows), layer);
    References {
        in_sample: spearman::filter_spearman_with_mass(k, hkv, d, &u, mass),
        mean_logit: spearman::scores_spearman(&spearman::mean_logit(q, k, hq, hkv, d), mass),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majority_orients_towards_most_rows() {
        // 2-D queries: most rows near +(1, 0) with a few large ones near −(1, 0) whose sum
        // outweighs them: the majority rule points at +x, the sum rule at −x.
        let mut q = Vec::new();
        for i in 0..10 {
            let y = 0.01 * i as f32;
            if i < 7 {
                q.extend([1.0, y])
            } else {
                q.extend([-5.0, y])
            }
        }
        let r: Vec<usize> = (0..10).collect();
        let (u, rep) = head_filter(&q, 1, 2, 0, &r, 0);
        assert!(u[0] > 0.99, "{u:?}");
        assert!(
            (rep.positive_fraction - 0.7).abs() < 1e-12
                || (rep.positive_fraction - 0.3).abs() < 1e-12
        );
        assert!(rep.disagree(), "{rep:?}");
        assert_eq!(rows(10, 4), [0, 2, 5, 7]);
    }
}
