//! The eviction selection kernel's cases and check (tests/evict_select.rs says what is
//! checked), shared with tests/mutants.rs.

use super::{POISON, Target, run_plan};
use kvpack::cpu::policy::evict_select::evict_select;
use kvpack::policy::kernels::plan_select;
use kvpack::policy::select::{Held, Order, keep_lists};
use rand::Rng;

/// One selection: `[held][H]` scores, units of `unit` tokens, `n` of `[first, end)` evicted.
struct Case {
    what: String,
    heads: usize,
    unit: usize,
    first: usize,
    end: usize,
    n: usize,
    order: Order,
    scores: Vec<f32>,
}

/// Scores of `held` tokens × `heads`: drawn by `draw`; the tokens outside the candidates
/// (sinks before `first`, the window and residual after `end`) NaN, which neither the
/// reference nor the kernel may read.
fn scores(
    held: usize,
    heads: usize,
    (unit, first, end): (usize, usize, usize),
    mut draw: impl FnMut() -> f32,
) -> Vec<f32> {
    (0..held * heads)
        .map(|i| {
            let t = i / heads;
            if t < first * unit || t >= end * unit {
                f32::NAN
            } else {
                draw()
            }
        })
        .collect()
}

fn cases(rng: &mut impl Rng) -> Vec<Case> {
    let mut out = Vec::new();
    // (heads, unit, first, end, extra tokens after the candidates).
    let shapes = [
        (3, 1, 4, 300, 7),  // more candidates than a workgroup: two chunks
        (2, 1, 0, 40, 0),   // fewer than a workgroup, no sinks
        (5, 1, 1, 600, 3),  // three chunks
        (3, 32, 1, 20, 31), // KIVI units (G = 32)
        (2, 48, 0, 9, 47),  // a unit no power of two (lcm of 16 and 24)
        (4, 1, 2, 258, 0),  // exactly one chunk of candidates (256)
        // 8,192 candidates: many chunks, every radix digit populated (the former O(C²) kernel
        // returned wrong lists at this size on lavapipe: its lanes' loops ran past Mesa's
        // 65,535 iterations per invocation, README "Status").
        (2, 1, 3, 8195, 5),
    ];
    for &(heads, unit, first, end, extra) in &shapes {
        let held = end * unit + extra;
        let c = end - first;
        for (label, tied) in [("random", false), ("tied", true)] {
            // Tied: a handful of values, -0.0 and +0.0 among them (total order tells them apart).
            let pool = [-1.5f32, -0.0, 0.0, 0.25, 0.25, 2.0];
            let s = scores(held, heads, (unit, first, end), || {
                if tied {
                    pool[rng.random_range(0..pool.len())]
                } else {
                    rng.random_range(-4.0f32..4.0)
                }
            });
            for n in [0, 1, c / 3, c - 1, c, rng.random_range(0..=c)] {
                for order in [Order::Score, Order::Oldest] {
                    out.push(Case {
                        what: format!(
                            "{label} H={heads} unit={unit} units [{first}, {end}) +{extra} tokens, n={n}, {order:?}"
                        ),
                        heads,
                        unit,
                        first,
                        end,
                        n,
                        order,
                        scores: s.clone(),
                    });
                }
            }
        }
    }
    out
}

/// Real scores: key norms (−‖k‖, as the key-norm policy scores) of SmolLM2's keys over
/// story-512 in layers 0, 10 and 20 (3 KV heads), evicting a quarter.
fn real_cases(cases: &mut Vec<Case>) {
    let Some(path) = super::shared_fixture("story-512.safetensors", "evict_select") else {
        return;
    };
    let (shape, k) = super::load_f16(&path, "k");
    let (tokens, heads, dim) = (shape[1], shape[2], shape[3]);
    for layer in [0, 10, 20] {
        let per = tokens * heads * dim;
        let kl = &k[layer * per..(layer + 1) * per];
        let s: Vec<f32> = kl
            .chunks(dim)
            .map(|row| -row.iter().map(|x| x.to_f32().powi(2)).sum::<f32>().sqrt())
            .collect();
        for unit in [1, 32] {
            let (first, end) = (4usize.div_ceil(unit), (tokens - 32) / unit);
            let n = (end - first) / 4;
            cases.push(Case {
                what: format!("SmolLM2 story-512 layer {layer} key norms, unit {unit}, n={n}"),
                heads,
                unit,
                first,
                end,
                n,
                order: Order::Score,
                scores: s.clone(),
            });
        }
    }
}

/// Every case on `t` against `keep_lists`; panics on a mismatch. The keep output and the
/// scratch are poisoned; the CPU target checks the reference against a sort-free oracle.
pub fn check_all(t: &Target, rng: &mut impl Rng) {
    let mut all = cases(rng);
    real_cases(&mut all);
    for c in &all {
        let held = c.scores.len() / c.heads;
        let positions: Vec<u32> = (0..held as u32)
            .flat_map(|p| std::iter::repeat_n(p * 3 + 1, c.heads))
            .collect();
        let h = Held {
            heads: c.heads,
            scores: &c.scores,
            positions: &positions,
        };
        let want: Vec<u32> = keep_lists(&h, c.unit, c.first, c.end, c.n, c.order)
            .into_iter()
            .flatten()
            .map(|u| u as u32)
            .collect();
        // The kernel's CPU twin (its output layout, positions from the slot order).
        assert_eq!(
            evict_select(&c.scores, c.heads, c.unit, (c.first, c.end, c.n), c.order),
            want,
            "{}: the CPU twin",
            c.what
        );
        assert_eq!(
            want.len(),
            c.heads * (c.end - c.n),
            "{}: reference length",
            c.what
        );
        let got = match t {
            Target::Cpu(_) => oracle(c),
            _ => {
                let plan = plan_select(c.heads, c.unit, c.first, c.end, c.n, c.order)
                    .unwrap_or_else(|e| panic!("{}: plan: {e}", c.what));
                let scratch = (c.heads * (c.end - c.first)).max(1);
                let mut storage = vec![
                    bytemuck::cast_slice(&c.scores).to_vec(),
                    bytemuck::cast_slice(&vec![POISON; scratch]).to_vec(),
                    bytemuck::cast_slice(&vec![POISON; want.len().max(1)]).to_vec(),
                ];
                run_plan(t, &plan, &mut storage)
                    .unwrap_or_else(|e| panic!("{} {}: {e}", t.name(), c.what));
                let mut got: Vec<u32> = bytemuck::pod_collect_to_vec(&storage[2]);
                got.truncate(want.len());
                got
            }
        };
        assert_eq!(
            got,
            want,
            "{} {}: keep lists [H][end − n]",
            t.name(),
            c.what
        );
    }
    assert!(all.len() > 100, "{} cases", all.len());
}

/// The spec's selection without sorting (the CPU target's check of the reference): per head,
/// a candidate goes when fewer than n candidates go before it, by the unit sum in total
/// order (ties: the later unit first) or by age.
fn oracle(c: &Case) -> Vec<u32> {
    // The f32 chain in token order from the first token's score (the spec's sum).
    let sum = |h: usize, u: usize| {
        let v = |t: usize| c.scores[t * c.heads + h];
        (u * c.unit + 1..(u + 1) * c.unit).fold(v(u * c.unit), |a, t| a + v(t))
    };
    let mut out = Vec::new();
    for h in 0..c.heads {
        out.extend(0..c.first as u32);
        for u in c.first..c.end {
            let goes_before = |j: usize| match c.order {
                Order::Oldest => j < u,
                Order::Score => match sum(h, j).total_cmp(&sum(h, u)) {
                    std::cmp::Ordering::Less => true,
                    std::cmp::Ordering::Equal => j > u,
                    std::cmp::Ordering::Greater => false,
                },
            };
            if (c.first..c.end).filter(|&j| goes_before(j)).count() >= c.n {
                out.push(u as u32);
            }
        }
    }
    out
}
