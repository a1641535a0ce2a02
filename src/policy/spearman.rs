//! The Q-Filters quality check (docs/contracts/qfilters.md, "Quality checks"): per (layer, KV
//! head), the Spearman correlation between each key's score ⟨k_j, u⟩ and the attention mass
//! the key receives, averaged over the later queries i > j (exact causal softmax attention on
//! the uncompressed post-RoPE q and k, scale 1/√D, averaged over the KV head's query heads).

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

    #[test]
    fn mass_matches_a_direct_recomputation() {
        let (t, hq, hkv, d) = (6, 2, 1, 3);
        let q: Vec<f32> = (0..t * hq * d)
            .map(|i| ((i * 7 % 11) as f32 - 5.0) / 3.0)
            .collect();
        let k: Vec<f32> = (0..t * hkv * d)
            .map(|i| ((i * 5 % 13) as f32 - 6.0) / 4.0)
            .collect();
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
