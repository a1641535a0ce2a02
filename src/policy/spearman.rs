//! The Q-Filters quality check (docs/contracts/qfilters.md, "Quality checks"): per (layer, KV
//! head), the Spearman correlation between each key's score ⟨k_j, u⟩ and the attention mass
//! the key receives, averaged over the later queries i > j (exact causal softmax attention on
//! the uncompressed post-RoPE q and k, scale 1/√D, averaged over the KV head's query heads);
//! and [`mean_logit`], the score a filter stands in for, as a reference for what a
//! position-free key score reaches on a text.

/// Ranks of `x` from 1, ties sharing their average rank.
pub fn ranks(x: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..x.len()).collect();
    idx.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
    let mut r = vec![0.0; x.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && x[idx[j + 1]] == x[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            r[k] = avg;
        }
        i = j + 1;
    }
    r
}

/// Spearman's ρ of `a` and `b` (the Pearson correlation of their ranks); `None` when fewer
/// than two pairs or either side is constant.
pub fn spearman(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() != b.len() || a.len() < 2 {
        return None;
    }
    let (ra, rb) = (ranks(a), ranks(b));
    let n = a.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in ra.iter().zip(&rb) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma) * (x - ma);
        sbb += (y - mb) * (y - mb);
    }
    (saa > 0.0 && sbb > 0.0).then(|| sab / (saa * sbb).sqrt())
}

/// The mean attention mass each key receives from the later queries: `q` `[T][Hq][D]`, `k`
/// `[T][Hkv][D]`; returns `[Hkv][T − 1]` (key j < T − 1: the mean over i in (j, T) of p_i(j),
/// p_i the causal softmax of query row i, averaged over the KV head's query heads).
pub fn attention_mass(q: &[f32], k: &[f32], hq: usize, hkv: usize, d: usize) -> Vec<Vec<f64>> {
    let t = k.len() / (hkv * d);
    let group = hq / hkv;
    let scale = 1.0 / (d as f64).sqrt();
    let mut mass = vec![vec![0.0f64; t.saturating_sub(1)]; hkv];
    let mut s = vec![0.0f64; t];
    for i in 1..t {
        for qh in 0..hq {
            let h = qh / group;
            let qr = &q[(i * hq + qh) * d..][..d];
            for (j, sj) in s[..=i].iter_mut().enumerate() {
                let kr = &k[(j * hkv + h) * d..][..d];
                *sj = scale * qr.iter().zip(kr).map(|(a, b)| a * b).sum::<f32>() as f64;
            }
            let m = s[..=i].iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = s[..=i].iter().map(|x| (x - m).exp()).sum();
            for j in 0..i {
                mass[h][j] += (s[j] - m).exp() / z / (group * (t - 1 - j)) as f64;
            }
        }
    }
    mass
}

/// The mean scaled logit each key receives from the later queries: `q` `[T][Hq][D]`, `k`
/// `[T][Hkv][D]`; returns `[Hkv][T − 1]` (key j < T − 1: the mean over i in (j, T) and over
/// the KV head's query heads of ⟨q_i, k_j⟩/√D). This is what Q-Filters' ⟨k_j, u⟩ stands in
/// for with one direction per head, computed from the very queries that attend: a reference
/// for how well a position-free key score follows the attention mass on a text (measured, not
/// a bound). Suffix sums of the queries: O(T·(Hq + Hkv)·D).
pub fn mean_logit(q: &[f32], k: &[f32], hq: usize, hkv: usize, d: usize) -> Vec<Vec<f64>> {
    let t = k.len() / (hkv * d);
    let group = hq / hkv;
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![vec![0.0f64; t.saturating_sub(1)]; hkv];
    for (h, row) in out.iter_mut().enumerate() {
        // The sum of the head's query rows at positions > j, built from the end.
        let mut later = vec![0.0f64; d];
        for j in (0..t.saturating_sub(1)).rev() {
            for qh in h * group..(h + 1) * group {
                let qr = &q[((j + 1) * hq + qh) * d..][..d];
                for (a, &x) in later.iter_mut().zip(qr) {
                    *a += f64::from(x);
                }
            }
            let kr = &k[(j * hkv + h) * d..][..d];
            let dot: f64 = later.iter().zip(kr).map(|(a, &b)| a * f64::from(b)).sum();
            row[j] = scale * dot / (group * (t - 1 - j)) as f64;
        }
    }
    out
}

/// Per KV head, ρ(`scores[h]`, `mass[h]`) (both `[Hkv][T − 1]`); `None` where undefined.
pub fn scores_spearman(scores: &[Vec<f64>], mass: &[Vec<f64>]) -> Vec<Option<f64>> {
    scores
        .iter()
        .zip(mass)
        .map(|(s, m)| spearman(s, m))
        .collect()
}

/// Per KV head, ρ(⟨k_j, u_h⟩, mass_j) over the keys j < T − 1 (`filters` `[Hkv][D]`);
/// `None` for a head where it is undefined.
pub fn filter_spearman(
    q: &[f32],
    k: &[f32],
    hq: usize,
    hkv: usize,
    d: usize,
    filters: &[f32],
) -> Vec<Option<f64>> {
    filter_spearman_with_mass(k, hkv, d, filters, &attention_mass(q, k, hq, hkv, d))
}

/// [`filter_spearman`] with the mass already computed ([`attention_mass`]: one per layer serves
/// every filter).
pub fn filter_spearman_with_mass(
    k: &[f32],
    hkv: usize,
    d: usize,
    filters: &[f32],
    mass: &[Vec<f64>],
) -> Vec<Option<f64>> {
    (0..hkv)
        .map(|h| {
            let u = &filters[h * d..][..d];
            let scores: Vec<f64> = (0..mass[h].len())
                .map(|j| {
                    k[(j * hkv + h) * d..][..d]
                        .iter()
                        .zip(u)
                        .map(|(a, b)| (a * b) as f64)
                        .sum()
                })
                .collect();
            spearman(&scores, &mass[h])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_share_ties_and_rho_is_signed() {
        assert_eq!(ranks(&[3.0, 1.0, 3.0, 2.0]), [3.5, 1.0, 3.5, 2.0]);
        let a = [1.0, 2.0, 3.0, 4.0, 5.0];
        let up = [2.0, 4.0, 8.0, 16.0, 100.0];
        let down: Vec<f64> = up.iter().map(|x| -x).collect();
        assert!((spearman(&a, &up).unwrap() - 1.0).abs() < 1e-12);
        assert!((spearman(&a, &down).unwrap() + 1.0).abs() < 1e-12);
        assert_eq!(spearman(&a, &[1.0; 5]), None);
        // A known value: one swap in five ranks: 1 − 6·2/(5·24) = 0.9.
        let r = spearman(&a, &[1.0, 2.0, 3.0, 5.0, 4.0]).unwrap();
        assert!((r - 0.9).abs() < 1e-12, "{r}");
    }

    /// Deterministic q `[t][hq][d]` and k `[t][hkv][d]` with small, varied entries.
    fn small_qk(t: usize, hq: usize, hkv: usize, d: usize) -> (Vec<f32>, Vec<f32>) {
        let q = (0..t * hq * d)
            .map(|i| ((i * 7 % 11) as f32 - 5.0) / 3.0)
            .collect();
        let k = (0..t * hkv * d)
            .map(|i| ((i * 5 % 13) as f32 - 6.0) / 4.0)
            .collect();
        (q, k)
    }

    #[test]
    fn mean_logit_matches_a_direct_recomputation() {
        let (t, hq, hkv, d) = (7, 4, 2, 3);
        let (q, k) = small_qk(t, hq, hkv, d);
        let got = mean_logit(&q, &k, hq, hkv, d);
        assert_eq!((got.len(), got[0].len()), (hkv, t - 1));
        for h in 0..hkv {
            for j in 0..t - 1 {
                let (mut sum, mut n) = (0.0f64, 0.0f64);
                for i in j + 1..t {
                    for qh in [2 * h, 2 * h + 1] {
                        sum += (0..d)
                            .map(|c| {
                                f64::from(q[(i * hq + qh) * d + c])
                                    * f64::from(k[(j * hkv + h) * d + c])
                            })
                            .sum::<f64>();
                        n += 1.0;
                    }
                }
                let want = sum / n / (d as f64).sqrt();
                assert!(
                    (got[h][j] - want).abs() < 1e-9,
                    "head {h} key {j}: {} vs {want}",
                    got[h][j]
                );
            }
        }
        // With one query direction c for every row, the mean logit ranks keys as ⟨k, c⟩ does.
        let c = [0.5f32, -1.0, 2.0];
        let q1: Vec<f32> = (0..t * hq).flat_map(|_| c).collect();
        let m = attention_mass(&q1, &k, hq, hkv, d);
        let by_filter = filter_spearman_with_mass(&k, hkv, d, &[c, c].concat(), &m);
        let by_logit = scores_spearman(&mean_logit(&q1, &k, hq, hkv, d), &m);
        assert_eq!(by_filter, by_logit);
    }

    #[test]
    fn mass_matches_a_direct_recomputation() {
        let (t, hq, hkv, d) = (6, 2, 1, 3);
        let (q, k) = small_qk(t, hq, hkv, d);
        let m = attention_mass(&q, &k, hq, hkv, d);
        let scale = 1.0 / (d as f64).sqrt();
        for j in 0..t - 1 {
            let mut want = 0.0;
            for i in j + 1..t {
                for qh in 0..hq {
                    let s: Vec<f64> = (0..=i)
                        .map(|jj| {
                            scale
                                * (0..d)
                                    .map(|c| (q[(i * hq + qh) * d + c] * k[jj * d + c]) as f64)
                                    .sum::<f64>()
                        })
                        .collect();
                    let z: f64 = s.iter().map(|x| x.exp()).sum();
                    want += s[j].exp() / z;
                }
            }
            want /= (hq * (t - 1 - j)) as f64;
            assert!(
                (m[0][j] - want).abs() < 1e-5,
                "key {j}: {} vs {want}",
                m[0][j]
            );
        }
    }
}
