//! The eviction scoring kernel's cases and check (tests/evict_score.rs says what is checked),
//! shared with tests/mutants.rs.

use super::{POISON, Target, run_plan};
use half::f16;
use kvpack::cpu::policy::evict_score::evict_score;
use kvpack::policy::kernels::plan_score;
use rand::Rng;

struct Case {
    n: usize,
    heads: usize,
    dim: usize,
    row0: usize,
}

const CASES: &[Case] = &[
    Case {
        n: 37,
        heads: 3,
        dim: 64,
        row0: 0,
    },
    Case {
        n: 5,
        heads: 1,
        dim: 41,
        row0: 3,
    },
    Case {
        n: 200,
        heads: 2,
        dim: 128,
        row0: 11,
    },
    Case {
        n: 3,
        heads: 4,
        dim: 256,
        row0: 1,
    },
];

/// f16 rows `[row0 + n][H·D]` packed two halves a word, each row starting at a word.
fn pack(k: &[f16], row: usize) -> Vec<u32> {
    let rw = row.div_ceil(2);
    let mut w = vec![0u32; k.len() / row * rw];
    for (r, x) in k.chunks_exact(row).enumerate() {
        for (e, h) in x.iter().enumerate() {
            w[r * rw + e / 2] |= u32::from(h.to_bits()) << (16 * (e % 2));
        }
    }
    w
}

/// |a − b| ≤ the bound of the module docs for scores of `terms` (per (token, head): Σ|term|
/// and the exact f64 score).
fn within(a: f32, b: f64, abs_sum: f64, dim: usize, norm: bool) -> bool {
    let eps = 2f64.powi(-24);
    let bound = if norm {
        2.0 * dim as f64 * eps * abs_sum / (2.0 * b.abs().max(1e-30)) + 2.0 * eps * b.abs()
    } else {
        2.0 * dim as f64 * eps * abs_sum
    } + 1e-30;
    (f64::from(a) - b).abs() <= bound
}

/// Every case on `t` (see tests/evict_score.rs); panics on a mismatch.
pub fn check_all(t: &Target, rng: &mut impl Rng) {
    for c in CASES {
        let row = c.heads * c.dim;
        let all: Vec<f16> = (0..(c.row0 + c.n) * row)
            .map(|_| f16::from_f32(rng.random_range(-4.0..4.0)))
            .collect();
        let keys = &all[c.row0 * row..];
        let filters: Vec<f32> = (0..row).map(|_| rng.random_range(-1.0..1.0)).collect();
        for norm in [false, true] {
            let what = format!(
                "n {} H {} D {} row0 {} {}",
                c.n,
                c.heads,
                c.dim,
                c.row0,
                if norm { "key norm" } else { "q-filters" }
            );
            let reference = evict_score(keys, (!norm).then_some(&filters[..]), c.heads, c.dim);
            assert_eq!(
                reference.len(),
                c.n * c.heads,
                "{what}: one score per (token, head)"
            );
            // Per (token, head): Σ|term| and the exact score.
            let exact: Vec<(f64, f64)> = keys
                .chunks_exact(c.dim)
                .enumerate()
                .map(|(i, r)| {
                    let h = i % c.heads;
                    let terms: Vec<f64> = r
                        .iter()
                        .enumerate()
                        .map(|(j, x)| {
                            let x = f64::from(x.to_f32());
                            if norm {
                                x * x
                            } else {
                                x * f64::from(filters[h * c.dim + j])
                            }
                        })
                        .collect();
                    let s: f64 = terms.iter().sum();
                    (
                        terms.iter().map(|x| x.abs()).sum(),
                        if norm { -s.sqrt() } else { s },
                    )
                })
                .collect();
            let got = match t {
                Target::Cpu(_) => {
                    // The layer's scorer is the twin.
                    let scorer = if norm {
                        kvpack::policy::score::Scorer::NegNorm
                    } else {
                        kvpack::policy::score::Scorer::Filter(filters.clone())
                    };
                    assert_eq!(scorer.score(keys, c.heads, c.dim), reference, "{what}");
                    reference.clone()
                }
                _ => {
                    let plan = plan_score(c.n, c.heads, c.dim, c.row0, norm).expect("plan");
                    let mut storage = vec![
                        bytemuck::cast_slice(&pack(&all, row)).to_vec(),
                        bytemuck::cast_slice(&filters).to_vec(),
                        bytemuck::cast_slice(&vec![POISON; c.n * c.heads]).to_vec(),
                    ];
                    run_plan(t, &plan, &mut storage)
                        .unwrap_or_else(|e| panic!("{} {what}: {e}", t.name()));
                    bytemuck::pod_collect_to_vec(&storage[2])
                }
            };
            let mut worst = 0f64;
            for (i, ((g, r), (abs, ex))) in got.iter().zip(&reference).zip(&exact).enumerate() {
                // Against the CPU twin (GPU) or the exact sum (CPU): the twin is itself within
                // half the bound of the exact score, so a GPU score within the bound of the twin
                // is checked by the stated rule.
                let ok = match t {
                    Target::Cpu(_) => within(*g, *ex, *abs, c.dim, norm),
                    _ => within(*g, f64::from(*r), *abs, c.dim, norm),
                };
                assert!(
                    ok,
                    "{} {what}: score {i} (token {}, head {}) {g} against {r} (exact {ex})",
                    t.name(),
                    i / c.heads,
                    i % c.heads
                );
                worst = worst.max((f64::from(*g) - f64::from(*r)).abs());
            }
            eprintln!(
                "evict_score[{}] {what}: worst |target - twin| {worst:e}",
                t.name()
            );
        }
    }
}
