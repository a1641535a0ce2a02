//! Attention over a cache that evicted tokens: the cases and the check that
//! tests/attend_positions.rs runs on every target and tests/mutants.rs runs under its
//! position mutants (see tests/attend_positions.rs for what is checked).

use super::Target;
use super::attend_plans::{Case, qkv};
use super::rel_l2_rows;
use kvpack::cpu::attend::{Positions, SideView, attend_at};
use kvpack::store::Side;
use kvpack::{AttendOptions, Context, Input, KvLayer, Layer, Method, PathChoice};
use rand::Rng;
use rand::seq::SliceRandom;

/// A case and its positions: `rows` slots with a table entry, `evicted` tokens evicted.
pub struct PosCase {
    pub case: Case,
    pub rows: usize,
    pub evicted: usize,
}

pub fn cases() -> Vec<PosCase> {
    let w = |window, sinks| AttendOptions::default().window(Some(window)).sinks(sinks);
    let base = Case {
        what: "",
        method: "f16",
        t: 300,
        tq: 1,
        hq: 8,
        hkv: 2,
        d: 64,
        opts: w(150, 4),
        seg_tokens: 1 << 20,
        ring_extra: 0,
        target: 256,
    };
    vec![
        PosCase {
            case: Case {
                what: "f16 decode, window 150 sinks 4",
                ..base
            },
            rows: 200,
            evicted: 500,
        },
        PosCase {
            case: Case {
                what: "kivi-2 prefill Tq=3, two segments, wrapped ring, window 100 sinks 4",
                method: "kivi:bits=2,group=32,residual=32",
                t: 333,
                tq: 3,
                hq: 9,
                hkv: 3,
                seg_tokens: 256,
                ring_extra: 7,
                opts: w(100, 4),
                target: 40,
                ..base
            },
            rows: 256,
            evicted: 1000,
        },
        PosCase {
            case: Case {
                what: "turboquant-mse-3 keys (query transformed), Tq=2, window 50 sinks 2",
                method: "turboquant-mse:bits=3,residual=24",
                t: 200,
                tq: 2,
                hq: 4,
                hkv: 2,
                d: 32,
                opts: w(50, 2),
                ..base
            },
            rows: 160,
            evicted: 77,
        },
        PosCase {
            case: Case {
                what: "kivi-4 keys, f16 values, many splits, window 40 sinks 8",
                method: "kivi:bits=4,group=32/f16:residual=32",
                t: 480,
                tq: 1,
                hq: 4,
                hkv: 4,
                d: 32,
                opts: w(40, 8),
                target: 1024,
                ..base
            },
            rows: 448,
            evicted: 29,
        },
    ]
}

/// Per head, `rows` distinct ascending positions below `rows + evicted` (the first later slot's
/// position), `[rows][H]`; about half the heads keep the first tokens (the sinks).
fn table(rng: &mut impl Rng, rows: usize, evicted: usize, heads: usize) -> Vec<u32> {
    let mut t = vec![0u32; rows * heads];
    for h in 0..heads {
        let mut all: Vec<u32> = (0..(rows + evicted) as u32).collect();
        all.shuffle(rng);
        let mut kept = all[..rows].to_vec();
        if h % 2 == 0 {
            // The sinks among the kept positions (replacing the largest others).
            kept.sort_unstable();
            for s in 0..8u32.min(rows as u32) {
                if !kept.contains(&s) {
                    kept.pop();
                    kept.push(s);
                    kept.sort_unstable();
                }
            }
        }
        kept.sort_unstable();
        for (j, p) in kept.into_iter().enumerate() {
            t[j * heads + h] = p;
        }
    }
    t
}

/// Exact f64 attention over uncompressed K/V `[T, Hkv, D]` whose slot j of head h sits at
/// `pos(j, h)`; query row i at `appended − Tq + i`. Its own visibility rule (causal, window
/// with sinks), independent of the library's.
#[allow(clippy::too_many_arguments)]
fn exact_at(
    k: &[f32],
    v: &[f32],
    hkv: usize,
    q: &[f32],
    hq: usize,
    d: usize,
    opts: &AttendOptions,
    appended: usize,
    pos: impl Fn(usize, usize) -> usize,
) -> Vec<f32> {
    let t = k.len() / (hkv * d);
    let tq = q.len() / (hq * d);
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0f32; q.len()];
    for i in 0..tq {
        let p = appended - tq + i;
        for qh in 0..hq {
            let h = qh / (hq / hkv);
            let qrow = &q[(i * hq + qh) * d..][..d];
            let seen: Vec<(usize, f64)> = (0..t)
                .filter(|&j| {
                    let kp = pos(j, h);
                    let w = opts.window.expect("every case has a window");
                    kp <= p && (p - kp < w || kp < opts.sinks)
                })
                .map(|j| {
                    let kr = &k[(j * hkv + h) * d..][..d];
                    let s: f64 = qrow
                        .iter()
                        .zip(kr)
                        .map(|(a, b)| f64::from(*a) * f64::from(*b))
                        .sum();
                    (j, s * scale)
                })
                .collect();
            let m = seen.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = seen.iter().map(|s| (s.1 - m).exp()).sum();
            for c in 0..d {
                let y: f64 = seen
                    .iter()
                    .map(|&(j, s)| (s - m).exp() * f64::from(v[(j * hkv + h) * d + c]))
                    .sum();
                out[(i * hq + qh) * d + c] = (y / z) as f32;
            }
        }
    }
    out
}

/// Every case on `t` (the CPU: `attend_at` against exact f64 attention; a kernel target: its
/// kernels against `attend_at`); panics on a mismatch.
pub fn check_all(t: &Target, rng: &mut impl Rng) {
    let mut any_last_moves = false;
    for pc in cases() {
        let c = pc.case;
        let (q, k, v) = qkv(rng, &c);
        let method = Method::parse(c.method).expect("method");
        let cpu = Context::cpu()
            .with_max_workgroup_storage_size(16 * 1024)
            .expect("limit");
        let mut layer = Layer::new(&cpu, c.hkv, c.d, &method, PathChoice::Cpu).expect("layer");
        layer
            .append(Input::F32(&k), Input::F32(&v))
            .expect("append");
        let snap = layer.snapshot().expect("snapshot");
        assert!(
            pc.rows <= snap.keys.quantized.min(c.seg_tokens),
            "{}: the table covers quantized slots of segment 0",
            c.what
        );
        let kv = SideView::new(layer.codec(Side::Keys), &snap.keys);
        let vv = SideView::new(layer.codec(Side::Values), &snap.values);
        // The positions must matter: the same words at positions 0..T give another output.
        // A random table can keep exactly the positions that the window and the sinks see
        // at slots 0..T (about one draw in twenty for the many-splits case), so a table that
        // changes nothing is drawn again.
        let slots = attend_at(&kv, &vv, c.t, None, &q, c.hq, &c.opts);
        // The table's last row must matter too where a draw allows it (a kernel that reads
        // that slot as past the table, at slot + evicted, must be caught: in a random sorted
        // table its kept position is often that one already). Draws until both hold; else the
        // first draw whose positions matter. At least one case must have such a last row
        // (checked after the loop).
        let (mut tab, mut reference, mut moved) = (Vec::new(), Vec::new(), 0.0);
        let mut first: Option<(Vec<u32>, Vec<f32>, f64)> = None;
        let mut last_moves = false;
        for _ in 0..32 {
            let tb = table(rng, pc.rows, pc.evicted, c.hkv);
            let at = Positions {
                table: &tb,
                appended: c.t + pc.evicted,
            };
            let r = attend_at(&kv, &vv, c.t, Some(&at), &q, c.hq, &c.opts);
            let mv = rel_l2_rows(&slots, &r, c.d);
            if mv <= 1e-2 {
                continue;
            }
            let mut tl = tb.clone();
            for h in 0..c.hkv {
                tl[(pc.rows - 1) * c.hkv + h] = (pc.rows - 1 + pc.evicted) as u32;
            }
            let at_last = Positions {
                table: &tl,
                appended: c.t + pc.evicted,
            };
            let lm = rel_l2_rows(
                &r,
                &attend_at(&kv, &vv, c.t, Some(&at_last), &q, c.hq, &c.opts),
                c.d,
            );
            if lm > 1e-3 {
                (tab, reference, moved, last_moves) = (tb, r, mv, true);
                break;
            }
            if first.is_none() {
                first = Some((tb, r, mv));
            }
        }
        if !last_moves {
            if let Some((tb, r, mv)) = first {
                (tab, reference, moved) = (tb, r, mv);
            }
        }
        any_last_moves |= last_moves;
        let at = Positions {
            table: &tab,
            appended: c.t + pc.evicted,
        };
        assert!(
            moved > 1e-2,
            "{}: positions change the output by only {moved:e} (a test that cannot fail)",
            c.what
        );
        if let Target::Cpu(_) = t {
            let (kh, vh) = layer.reconstruct().expect("reconstruct");
            let pos = |j: usize, h: usize| {
                if j < pc.rows {
                    tab[j * c.hkv + h] as usize
                } else {
                    j + pc.evicted
                }
            };
            let exact = exact_at(&kh, &vh, c.hkv, &q, c.hq, c.d, &c.opts, at.appended, pos);
            let err = rel_l2_rows(&reference, &exact, c.d);
            eprintln!(
                "attend_positions[cpu] {}: worst row rel L2 {err:e} (positions move it by {moved:e})",
                c.what
            );
            assert!(err <= 1e-4, "cpu {}: worst row rel L2 {err:e}", c.what);
            continue;
        }
        super::attend_plans::check_case_at(t, &c, &layer, &q, &reference, 1e-4, Some(&at));
    }
    assert!(
        any_last_moves,
        "no case drew a table whose last row's position changes the output (a check that cannot fail)"
    );
}
