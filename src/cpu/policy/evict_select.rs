//! CPU twin of the `evict_select` kernel (wgsl/policy/evict_select_io.wgsl): the keep lists
//! `[H][end − n]` u32 of a selection over `[held][H]` scores, in the kernel's output layout.
//! The selection itself is the reference `crate::policy::select::keep_lists` (held positions
//! increase with the slot, as the layer keeps them, so a unit's index stands for its position).

use crate::policy::select::{Held, Order, keep_lists};

/// Each of `heads` heads evicts `n` of the candidate units `[first, end)` of `unit` tokens
/// (`scores` `[held][H]`, `held ≥ end·unit`, `n ≤ end − first`); returns the units each head
/// keeps of `[0, end)`, ascending, head after head.
pub fn evict_select(
    scores: &[f32],
    heads: usize,
    unit: usize,
    (first, end, n): (usize, usize, usize),
    order: Order,
) -> Vec<u32> {
    let held = scores.len() / heads.max(1);
    let positions: Vec<u32> = (0..held as u32)
        .flat_map(|t| std::iter::repeat_n(t, heads))
        .collect();
    let h = Held {
        heads,
        scores,
        positions: &positions,
    };
    keep_lists(&h, unit, first, end, n, order)
        .into_iter()
        .flatten()
        .map(|u| u as u32)
        .collect()
}
