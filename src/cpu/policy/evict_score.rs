//! `evict_score` (wgsl/policy/evict_score*.wgsl, msl/policy/evict_score.metal): the eviction
//! score of every appended (token, KV head), on the key as appended (its f16 row), in f32
//! summed in channel order (../shared/spec/qfilters.md, "Scoring and eviction"). The GPU twins
//! give each (token, head) a workgroup whose lanes take channels `i, i + lanes, ...` and add
//! their sums: the same terms in another f32 order.

use half::f16;

/// Scores `[n][H]` of the rows `k` `[n][H][D]`: `⟨k, u_h⟩` with `filters` `[H][D]` (Q-Filters),
/// or `−‖k‖` without (key norm).
pub fn evict_score(k: &[f16], filters: Option<&[f32]>, heads: usize, dim: usize) -> Vec<f32> {
    k.chunks_exact(dim)
        .enumerate()
        .map(|(i, row)| {
            let h = i % heads;
            match filters {
                Some(u) => row
                    .iter()
                    .zip(&u[h * dim..(h + 1) * dim])
                    .map(|(x, y)| x.to_f32() * y)
                    .sum(),
                None => -row
                    .iter()
                    .map(|x| x.to_f32() * x.to_f32())
                    .sum::<f32>()
                    .sqrt(),
            }
        })
        .collect()
}
