//! Which units each head evicts (docs/contracts/qfilters.md, "Scoring and eviction"): the
//! CPU reference of the selection (its GPU twin: `evict_select`, [`super::kernels`]). A unit is
//! `U` consecutive held tokens (1 for per-token codecs, a whole key block for KIVI), scored by
//! the mean of its tokens' scores. Units all hold `U` tokens, so the means rank as their f32
//! sums do (in token order, from the first token's score): the sum is what is compared, exactly
//! as the GPU compares it; a rounded quotient would add a division GPUs need not round alike.
//! Among the candidate units, each head evicts the `n` lowest scores (IEEE total order); on
//! equal scores the unit at the higher position goes first (ties keep the lower position).
//! StreamingLLM evicts the `n` oldest candidates instead.

/// The order units are evicted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Lowest score first, ties: higher position first.
    Score,
    /// Oldest first (StreamingLLM).
    Oldest,
}

/// What a head's held tokens look like to the selection: `scores` and `positions` are
/// `[held][H]` (token-major, one entry per head).
#[derive(Clone, Copy, Debug)]
pub struct Held<'a> {
    /// KV heads.
    pub heads: usize,
    /// Per (token, head) scores.
    pub scores: &'a [f32],
    /// Per (token, head) absolute positions.
    pub positions: &'a [u32],
}

/// The score sum of unit `u` (`unit` ≥ 1 tokens) of head `h`: its first token's score, then
/// each later token's added in token order (f32; the mean times `unit`, ranked alike).
pub fn unit_score(held: &Held<'_>, unit: usize, u: usize, h: usize) -> f32 {
    let s = |t: usize| held.scores[t * held.heads + h];
    (u * unit + 1..(u + 1) * unit).fold(s(u * unit), |a, t| a + s(t))
}

/// Per head, the units of `[0, end)` it keeps (ascending) after evicting `n` of the candidate
/// units `[first, end)` (`n ≤ end − first`).
pub fn keep_lists(
    held: &Held<'_>,
    unit: usize,
    first: usize,
    end: usize,
    n: usize,
    order: Order,
) -> Vec<Vec<usize>> {
    debug_assert!(first <= end && n <= end - first);
    (0..held.heads)
        .map(|h| {
            let pos = |u: usize| held.positions[u * unit * held.heads + h];
            let mut cand: Vec<(f32, u32, usize)> = (first..end)
                .map(|u| (unit_score(held, unit, u, h), pos(u), u))
                .collect();
            match order {
                Order::Score => cand.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1))),
                Order::Oldest => cand.sort_by_key(|c| c.1),
            }
            let mut gone = vec![false; end];
            for c in &cand[..n] {
                gone[c.2] = true;
            }
            (0..end).filter(|&u| !gone[u]).collect()
        })
        .collect()
}

/// Compacts a `[held][H]` table in place after each head kept `keep[h]` of the first `end`
/// units (`unit` tokens each); tokens after them move down; returns the new length in tokens.
pub fn compact_table<T: Copy>(
    table: &mut Vec<T>,
    heads: usize,
    unit: usize,
    end: usize,
    keep: &[Vec<usize>],
) -> usize {
    let held = table.len() / heads;
    let kept = keep.first().map_or(end, Vec::len);
    for (h, units) in keep.iter().enumerate() {
        for (i, &u) in units.iter().enumerate() {
            for t in 0..unit {
                table[(i * unit + t) * heads + h] = table[(u * unit + t) * heads + h];
            }
        }
    }
    table.copy_within(end * unit * heads.., kept * unit * heads);
    let new_len = held - (end - kept) * unit;
    table.truncate(new_len * heads);
    new_len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_scores_go_and_ties_keep_the_lower_position() {
        // 1 head, unit 1: scores 5, 1, 3, 1, 9 at positions 0..5; evict 2 of units 1..5.
        let scores = [5.0, 1.0, 3.0, 1.0, 9.0];
        let positions = [0, 1, 2, 3, 4];
        let held = Held {
            heads: 1,
            scores: &scores,
            positions: &positions,
        };
        assert_eq!(keep_lists(&held, 1, 1, 5, 2, Order::Score), [vec![0, 2, 4]]);
        // One of the two 1.0s: the higher position (3) goes first.
        assert_eq!(
            keep_lists(&held, 1, 1, 5, 1, Order::Score),
            [vec![0, 1, 2, 4]]
        );
        assert_eq!(
            keep_lists(&held, 1, 1, 5, 2, Order::Oldest),
            [vec![0, 3, 4]]
        );
    }

    #[test]
    fn units_are_scored_by_their_mean_and_heads_choose_alone() {
        // 2 heads, unit 2, 3 units; head 0 sums 4, 1, 6; head 1 sums 2, 8, 0.
        let s = [1.0, 2.0, 3.0, 0.0, 0.0, 8.0, 1.0, 0.0, 4.0, 0.0, 2.0, 0.0];
        let p: Vec<u32> = (0..6u32).flat_map(|t| [t, t]).collect();
        let held = Held {
            heads: 2,
            scores: &s,
            positions: &p,
        };
        let keep = keep_lists(&held, 2, 0, 3, 1, Order::Score);
        assert_eq!(keep, [vec![0, 2], vec![0, 1]]);
        let mut t: Vec<u32> = p.clone();
        assert_eq!(compact_table(&mut t, 2, 2, 3, &keep), 4);
        assert_eq!(t, [0, 0, 1, 1, 4, 2, 5, 3]);
    }
}
