//! Eviction over any layer (../shared/spec/qfilters.md, `kvpack::policy`):
//!
//! - every codec's streams are laid out per head as they declare (`Stream::rows`,
//!   `head_bits`): changing one head's input changes only that head's bits;
//! - eviction moves stored words without changing them: after evicting (chunked appends,
//!   stride > 1), each held (token, head) holds exactly the words and the reconstruction the
//!   same token had in a layer that never evicted, on the CPU and on the WGSL paths (the
//!   words compacted on the device by `evict_compact`, the ring rotated), where attention over
//!   the held tokens at their positions (`ATT_POS` kernels) matches the CPU reference on the
//!   same words within 1e-4 per row;
//! - the kept set is the spec's (an independent per-head simulation: lowest score goes, ties
//!   keep the lower position; StreamingLLM keeps sinks and the newest), and attention over it
//!   equals exact attention over the same tokens at their true positions, with windows and
//!   sinks read from those positions;
//! - memory stays flat under a long append stream with a fixed budget;
//! - bad configurations are typed errors, and a failed append changes nothing.

mod common;

use common::Target;
use half::f16;
use kvpack::calib::Calibration;
use kvpack::codec::Codec;
use kvpack::policy::EvictingLayer;
use kvpack::store::Side;
use kvpack::{AttendOptions, Context, Error, Input, KvLayer, Layer, Method, PathChoice};
use rand::Rng;

const H: usize = 2;
const D: usize = 40;

/// K/V with per-channel offsets and per-token scales (so key norms differ).
fn random(rng: &mut impl Rng, tokens: usize, h: usize, d: usize) -> (Vec<f32>, Vec<f32>) {
    let offs: Vec<f32> = (0..h * d).map(|_| rng.random_range(-2.0..2.0)).collect();
    let mut k = Vec::with_capacity(tokens * h * d);
    for _ in 0..tokens {
        let s = rng.random_range(0.2f32..2.0);
        for o in &offs {
            k.push(o + s * rng.random_range(-1.0f32..1.0));
        }
    }
    let v = (0..tokens * h * d)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    (k, v)
}

fn bit(words: &[u32], i: usize) -> u32 {
    (words[i / 32] >> (i % 32)) & 1
}

/// Tokens per eviction unit of a method (the lcm of both sides' blocks) and its window R.
fn unit_and_residual(m: &Method) -> (usize, usize) {
    let l = m.layer(&Context::cpu(), H, D, PathChoice::Cpu).unwrap();
    let (a, b) = (
        l.codec(Side::Keys).block_tokens(),
        l.codec(Side::Values).block_tokens(),
    );
    let mut u = a.max(b);
    while u % a != 0 || u % b != 0 {
        u += 1;
    }
    (u, m.residual())
}

/// Bits of head `h` in row `r` of block `b` of a codec's stream `s`.
fn head_bits(c: &dyn Codec, s: usize, words: &[u32], b: usize, r: usize, h: usize) -> Vec<u32> {
    let st = c.streams()[s];
    let row_words = st.words_per_block / st.rows;
    let first = ((b * st.rows + r) * row_words) * 32 + h * st.head_bits;
    (0..st.head_bits).map(|i| bit(words, first + i)).collect()
}

fn layouts_are_per_head(t: &Target, spec: &str) {
    if t.is_gpu() {
        // The layout is a property of the stored words (the same on every path); the GPU
        // words are checked equal to the CPU's by tests/store.rs.
        eprintln!("layouts_are_per_head[{spec}]: checked on the CPU target");
        return;
    }
    let mut rng = common::rng("layouts_are_per_head");
    let m = common::parse_method(spec, H, D).unwrap();
    let tokens = 96;
    let (k, v) = random(&mut rng, tokens, H, D);
    // The same tokens with head 1's K and V rows replaced.
    let (k2, v2) = random(&mut rng, tokens, H, D);
    let mix = |a: &[f32], b: &[f32]| -> Vec<f32> {
        a.chunks(D)
            .zip(b.chunks(D))
            .enumerate()
            .flat_map(|(i, (x, y))| if i % H == 1 { y.to_vec() } else { x.to_vec() })
            .collect()
    };
    let (km, vm) = (mix(&k, &k2), mix(&v, &v2));
    let mut a = m.layer(t.ctx(), H, D, t.path()).unwrap();
    let mut b = m.layer(t.ctx(), H, D, t.path()).unwrap();
    a.append(Input::F32(&k), Input::F32(&v)).unwrap();
    b.append(Input::F32(&km), Input::F32(&vm)).unwrap();
    let (sa, sb) = (a.snapshot().unwrap(), b.snapshot().unwrap());
    for (side, wa, wb) in [
        (Side::Keys, &sa.keys, &sb.keys),
        (Side::Values, &sa.values, &sb.values),
    ] {
        let c = a.codec(side);
        let blocks = wa.quantized / c.block_tokens();
        assert!(blocks > 0, "{spec}: no quantized block");
        for (s, st) in c.streams().iter().enumerate() {
            let (x, y) = (&wa.streams[s], &wb.streams[s]);
            let mut head1_differs = false;
            for blk in 0..blocks {
                for r in 0..st.rows {
                    for h in 0..H {
                        let (p, q) = (head_bits(c, s, x, blk, r, h), head_bits(c, s, y, blk, r, h));
                        if h == 1 {
                            head1_differs |= p != q;
                        } else {
                            assert_eq!(
                                p, q,
                                "{spec} {side:?} {}: head {h} changed (block {blk} row {r}): the stream's per-head layout is not what it declares",
                                st.name
                            );
                        }
                    }
                }
            }
            assert!(
                head1_differs,
                "{spec} {side:?} {}: head 1's declared bits never changed",
                st.name
            );
        }
    }
}
codec_tests!(layouts_are_per_head, with_qjl);

fn evicting(t: &Target, m: &Method) -> kvpack::Result<EvictingLayer> {
    let inner = Layer::new_at(t.ctx(), 0, H, D, &m.with_eviction(None), t.path())?;
    EvictingLayer::new(inner, m.clone(), 0)
}

fn eviction_keeps_exact_words(t: &Target, spec: &str) {
    let base = common::parse_method(spec, H, D).unwrap();
    let (u, r) = unit_and_residual(&base);
    let (sinks, window, stride): (usize, usize, usize) = (3, 5, 2);
    let budget = sinks.div_ceil(u) * u + window.max(r + u - 1) + 3 * u;
    let policy = format!("knorm:budget={budget},sinks={sinks},window={window},stride={stride}");
    let m = Method::parse(&format!("{base}+{policy}")).unwrap();
    let mut rng = common::rng("eviction_keeps_exact_words");
    let tokens = budget + 6 * u + 17;
    let (k, v) = random(&mut rng, tokens, H, D);
    let mut ev = evicting(t, &m).unwrap();
    // Builds the layer's pipelines (GPU: attention with positions, the compaction kernel).
    ev.prepare().unwrap();
    let mut full = base.layer(t.ctx(), H, D, t.path()).unwrap();
    let row = H * D;
    let mut a = 0;
    let mut max_held = 0;
    while a < tokens {
        let n = rng.random_range(1..=9).min(tokens - a);
        let (ks, vs) = (&k[a * row..(a + n) * row], &v[a * row..(a + n) * row]);
        ev.append(Input::F32(ks), Input::F32(vs)).unwrap();
        full.append(Input::F32(ks), Input::F32(vs)).unwrap();
        a += n;
        max_held = max_held.max(ev.len());
    }
    let held = ev.len();
    assert_eq!(ev.appended(), tokens);
    assert!(
        held < tokens,
        "{spec}: nothing was evicted ({held} of {tokens})"
    );
    assert!(
        max_held <= budget + stride - 1 + 9 + u,
        "{spec}: held {max_held} tokens, budget {budget}"
    );
    let pos = ev.positions().unwrap();
    for h in 0..H {
        let p: Vec<usize> = (0..held).map(|j| pos[j * H + h] as usize).collect();
        assert!(
            p.windows(2).all(|w| w[0] < w[1]),
            "{spec}: head {h} positions not increasing: {p:?}"
        );
        assert!(
            p.iter().take(sinks).copied().eq(0..sinks),
            "{spec}: head {h} lost a sink: {p:?}"
        );
        assert!(
            p[held - window..]
                .iter()
                .copied()
                .eq(tokens - window..tokens),
            "{spec}: head {h} lost a window token: {p:?}"
        );
        // Whole units go: every kept unit starts at a multiple of U.
        assert!(
            p.chunks(u)
                .all(|c| c[0] % u == 0 && c.windows(2).all(|w| w[1] == w[0] + 1))
        );
    }
    // The words: each held unit of each head is the full layer's unit at its position.
    let (se, sf) = (ev.snapshot().unwrap(), full.snapshot().unwrap());
    for (side, we, wf) in [
        (Side::Keys, &se.keys, &sf.keys),
        (Side::Values, &se.values, &sf.values),
    ] {
        let c = ev.codec(side);
        let g = c.block_tokens();
        for (s, st) in c.streams().iter().enumerate() {
            for j in (0..we.quantized).step_by(g) {
                for h in 0..H {
                    let src = pos[j * H + h] as usize;
                    for r in 0..st.rows {
                        assert_eq!(
                            head_bits(c, s, &we.streams[s], j / g, r, h),
                            head_bits(c, s, &wf.streams[s], src / g, r, h),
                            "{spec} {side:?} {}: held token {j} (position {src}) head {h}",
                            st.name
                        );
                    }
                }
            }
        }
        // The reconstruction (codecs that have one): held row (j, h) is the full layer's row
        // (position, h), residual rows included.
        if let (Ok(re), Ok(rf)) = (ev.reconstruct_side(side), full.reconstruct_side(side)) {
            for j in 0..held {
                for h in 0..H {
                    let src = pos[j * H + h] as usize;
                    assert_eq!(
                        &re[(j * H + h) * D..][..D],
                        &rf[(src * H + h) * D..][..D],
                        "{spec} {side:?}: reconstruction of held token {j} (position {src}) head {h}"
                    );
                }
            }
        }
    }
    // The memory report counts the tokens held and the policy's tables.
    let mem = ev.memory();
    assert_eq!(mem.tokens, held);
    assert!(mem.held.eviction >= (held * H * 8) as u64);
    // Attention over the held tokens at their positions (a window reaching into the evicted
    // range, sinks) against the CPU reference on the same words (GPU: the words read back).
    let hq = 2 * H;
    for (tq, opts) in [
        (1, AttendOptions::default()),
        (3, AttendOptions::default().window(Some(held / 2)).sinks(2)),
    ] {
        let q: Vec<f32> = (0..tq * hq * D)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let got = ev.attend(&q, hq, &opts).unwrap();
        let want = ev.attend_reference(&q, hq, &opts).unwrap();
        let err = common::rel_l2_rows(&got, &want, D);
        let bound = common::gpu_attend_bound(t, &ev, "eviction_keeps_exact_words");
        assert!(
            err <= bound,
            "{spec} on {} tq {tq} {opts:?}: rel L2 {err:e} against the reference",
            t.name()
        );
    }
}
codec_tests!(eviction_keeps_exact_words, with_qjl);

/// A Q-Filters calibration of one layer, H heads of D, with these filters `[H][D]`.
fn qfilter_file(name: &str, h: usize, d: usize, filters: Vec<f32>) -> std::path::PathBuf {
    common::tiny_calibration(name, h, d, Some(filters), None)
}

/// A per-head token score of the simulation: (the key row, its KV head) → score.
type ScoreFn<'a> = &'a dyn Fn(&[f32], usize) -> f32;

/// The spec's selection simulated per head, one token appended at a time, stride 1, unit 1:
/// the positions each head holds at the end.
#[allow(clippy::too_many_arguments)] // an oracle's plain parameters, named at each call
fn simulate(
    k16: &[f32],
    tokens: usize,
    h: usize,
    d: usize,
    score: ScoreFn<'_>,
    oldest: bool,
    budget: usize,
    sinks: usize,
    window: usize,
) -> Vec<Vec<usize>> {
    (0..h)
        .map(|hh| {
            let mut held: Vec<(usize, f32)> = Vec::new();
            for t in 0..tokens {
                held.push((t, score(&k16[(t * h + hh) * d..][..d], hh)));
                if held.len() > budget {
                    let cands = held
                        .iter()
                        .enumerate()
                        .filter(|(_, (p, _))| *p >= sinks && *p + window < t + 1);
                    let victim = if oldest {
                        cands.min_by_key(|(_, (p, _))| *p)
                    } else {
                        // Lowest score; among equal scores the higher position.
                        cands.min_by(|a, b| a.1.1.total_cmp(&b.1.1).then(b.1.0.cmp(&a.1.0)))
                    }
                    .map(|(i, _)| i)
                    .unwrap();
                    held.remove(victim);
                }
            }
            held.into_iter().map(|(p, _)| p).collect()
        })
        .collect()
}

/// Exact attention (f64) of query row `qrow` at position `p` over head `hh`'s kept positions.
#[allow(clippy::too_many_arguments)] // an oracle's plain parameters, named at each call
fn exact(
    k: &[f32],
    v: &[f32],
    kept: &[usize],
    qrow: &[f32],
    p: usize,
    hh: usize,
    h: usize,
    d: usize,
    opts: &AttendOptions,
) -> Vec<f32> {
    let vis: Vec<usize> = kept
        .iter()
        .copied()
        .filter(|&j| kvpack::cpu::attend::visible(j, p, opts))
        .collect();
    let s: Vec<f64> = vis
        .iter()
        .map(|&j| {
            (0..d)
                .map(|c| f64::from(qrow[c]) * f64::from(k[(j * h + hh) * d + c]))
                .sum::<f64>()
                / (d as f64).sqrt()
        })
        .collect();
    let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
    (0..d)
        .map(|c| {
            (vis.iter()
                .zip(&s)
                .map(|(&j, x)| (x - m).exp() * f64::from(v[(j * h + hh) * d + c]))
                .sum::<f64>()
                / z) as f32
        })
        .collect()
}

fn kept_sets_follow_the_spec_and_attention_reads_true_positions(t: &Target) {
    let mut rng = common::rng("kept_sets_follow_the_spec");
    let (h, d, hq, tokens) = (2, 16, 6, 90);
    let (budget, sinks, window) = (24, 3, 4);
    let (k, v) = random(&mut rng, tokens, h, d);
    // What the cache stores (and scores): the f16 rounding.
    let r16 = |x: &[f32]| -> Vec<f32> { x.iter().map(|&a| f16::from_f32(a).to_f32()).collect() };
    let (k16, v16) = (r16(&k), r16(&v));
    let filters: Vec<f32> = (0..h * d).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let calib = qfilter_file(&format!("kept-sets-{}", t.name()), h, d, filters.clone());
    let dot = |x: &[f32], hh: usize| -> f32 {
        x.iter()
            .zip(&filters[hh * d..][..d])
            .map(|(a, b)| a * b)
            .sum()
    };
    let neg_norm = |x: &[f32], _: usize| -> f32 { -x.iter().map(|a| a * a).sum::<f32>().sqrt() };
    let zero = |_: &[f32], _: usize| 0.0f32;
    let policies: [(String, ScoreFn<'_>, bool); 3] = [
        (
            format!(
                "qfilters:budget={budget},sinks={sinks},window={window},calib={}",
                calib.display()
            ),
            &dot,
            false,
        ),
        (
            format!("knorm:budget={budget},sinks={sinks},window={window}"),
            &neg_norm,
            false,
        ),
        (
            format!("streaming:budget={budget},sinks={sinks}"),
            &zero,
            true,
        ),
    ];
    for (policy, score, oldest) in policies {
        let w = if oldest { 0 } else { window };
        let m = Method::parse(&format!("f16+{policy}")).unwrap();
        let inner = Layer::new_at(t.ctx(), 0, h, d, &Method::f16(), t.path()).unwrap();
        let mut ev = EvictingLayer::new(inner, m, 0).unwrap();
        for t in 0..tokens {
            let r = &k[t * h * d..(t + 1) * h * d];
            ev.append(Input::F32(r), Input::F32(&v[t * h * d..(t + 1) * h * d]))
                .unwrap();
            assert!(ev.len() <= budget, "{policy}: {} held", ev.len());
        }
        let want = simulate(&k16, tokens, h, d, score, oldest, budget, sinks, w);
        let pos = ev.positions().unwrap();
        for (hh, want) in want.iter().enumerate() {
            let got: Vec<usize> = (0..ev.len()).map(|j| pos[j * h + hh] as usize).collect();
            assert_eq!(
                &got, want,
                "{policy}: head {hh} keeps other tokens than the spec's rule"
            );
        }
        if !oldest {
            // Heads choose alone: with random filters / norms they keep different tokens.
            assert_ne!(
                want[0], want[1],
                "{policy}: both heads kept the same tokens"
            );
        }
        // Attention over the kept tokens at their true positions: decode and a 3-row chunk
        // (its rows at the last 3 positions), full causal and a window with sinks.
        for tq in [1, 3] {
            let q: Vec<f32> = (0..tq * hq * d)
                .map(|_| rng.random_range(-1.5f32..1.5))
                .collect();
            for opts in [
                AttendOptions::default(),
                AttendOptions::default().window(Some(9)).sinks(2),
            ] {
                let out = ev.attend(&q, hq, &opts).unwrap();
                for i in 0..tq {
                    for qh in 0..hq {
                        let hh = qh / (hq / h);
                        let e = exact(
                            &k16,
                            &v16,
                            &want[hh],
                            &q[(i * hq + qh) * d..][..d],
                            tokens - tq + i,
                            hh,
                            h,
                            d,
                            &opts,
                        );
                        let o = &out[(i * hq + qh) * d..][..d];
                        let err = common::rel_l2_rows(o, &e, d);
                        assert!(
                            err <= 1e-4,
                            "{policy} tq {tq} {opts:?}: row {i} head {qh}: rel L2 {err:.2e}"
                        );
                    }
                }
            }
        }
    }
    // The flipped filter keeps the complement's best: a different set.
    let flipped = Method::parse(&format!(
        "f16+qfilters:budget={budget},sinks={sinks},window={window},calib={},flip=true",
        calib.display()
    ))
    .unwrap();
    let inner = Layer::new_at(t.ctx(), 0, h, d, &Method::f16(), t.path()).unwrap();
    let mut ev = EvictingLayer::new(inner, flipped, 0).unwrap();
    ev.append(Input::F32(&k), Input::F32(&v)).unwrap();
    let neg = |x: &[f32], hh: usize| -dot(x, hh);
    let want = simulate(&k16, tokens, h, d, &neg, false, budget, sinks, window);
    // One chunk, stride 1: evicted at once down to the budget (the same rule, applied once).
    let pos = ev.positions().unwrap();
    for (hh, want) in want.iter().enumerate() {
        let got: Vec<usize> = (0..ev.len()).map(|j| pos[j * h + hh] as usize).collect();
        assert_eq!(&got, want, "flipped: head {hh}");
    }
    std::fs::remove_file(calib).ok();
}
parity_tests!(kept_sets_follow_the_spec_and_attention_reads_true_positions);

fn stride_defers_eviction_and_memory_stays_flat(t: &Target) {
    let mut rng = common::rng("stride_defers_eviction");
    let (h, d) = (2, 8);
    let (budget, stride) = (64, 5);
    let m = Method::parse(&format!(
        "f16+streaming:budget={budget},sinks=4,stride={stride}"
    ))
    .unwrap();
    let mut ev = m.layer(t.ctx(), h, d, t.path()).unwrap();
    let mut plain = Method::f16().layer(t.ctx(), h, d, t.path()).unwrap();
    let (mut lo, mut hi, mut max_held) = (u64::MAX, 0u64, 0);
    // (GPU paths: fewer single-token appends, each a blocking submission.)
    let total = if t.is_gpu() { 6_000 } else { 20_000 };
    let (k, v) = random(&mut rng, 1, h, d);
    for t in 0..total {
        ev.append(Input::F32(&k), Input::F32(&v)).unwrap();
        plain.append(Input::F32(&k), Input::F32(&v)).unwrap();
        max_held = max_held.max(ev.len());
        if t >= 1000 {
            let b = ev.memory().held.total();
            (lo, hi) = (lo.min(b), hi.max(b));
        }
    }
    assert_eq!(
        max_held,
        budget + stride - 1,
        "held at most budget + stride − 1"
    );
    assert_eq!(ev.appended(), total);
    eprintln!(
        "stride_defers_eviction: {total} tokens appended, budget {budget}: held bytes {lo}..{hi} (without eviction {})",
        plain.memory().held.total()
    );
    assert_eq!(lo, hi, "held bytes under a fixed budget must stay flat");
    assert!(plain.memory().held.total() > (total as u64 / 400) * hi);
}
parity_tests!(stride_defers_eviction_and_memory_stays_flat);

#[test]
fn bad_configurations_are_typed_errors() {
    let cfg = |s: &str| match Method::parse(s) {
        Err(Error::Config(m)) => m,
        other => panic!("{s}: expected a Config error, got {other:?}"),
    };
    assert!(cfg("f16+knorm:budget=8,sinks=4,window=4").contains("below the budget"));
    assert!(cfg("f16+knorm:budget=8,stride=0").contains("stride"));
    assert!(cfg("f16+knorm:budget=8,sinks=2,calib=x").contains("unknown key"));
    assert!(cfg("f16+qfilters:budget=64").contains("calibration file"));
    assert!(cfg("f16+streaming:budget=64,window=3").contains("unknown key"));
    assert!(cfg("f16+qfilters:budget=64,calib=x,flip=maybe").contains("flip"));
    assert!(cfg("f16+knorm:budget=lots").contains("not a valid number"));
    // A policy name that is not one stays part of the method spec (and fails there).
    assert!(Method::parse("f16+lru:budget=8").is_err());
    // The spec prints back and parses to the same method.
    let m = Method::parse("kivi-4+knorm:budget=300,sinks=2,stride=3").unwrap();
    assert_eq!(Method::parse(&m.to_string()).unwrap(), m);
    assert!(
        m.to_string()
            .ends_with("+knorm:budget=300,sinks=2,window=0,stride=3"),
        "{m}"
    );

    let ctx = Context::cpu();
    // KIVI-4 (G 32, R 128) cannot get down to 100 tokens.
    let m = Method::parse("kivi-4+streaming:budget=100").unwrap();
    match m.layer(&ctx, 2, 32, PathChoice::Cpu) {
        Err(Error::Config(msg)) => assert!(msg.contains("budget ≥"), "{msg}"),
        other => panic!("expected Config, got {other:?}"),
    }
    // A Layer does not evict silently.
    assert!(matches!(
        Layer::new(
            &ctx,
            2,
            32,
            &Method::parse("f16+knorm:budget=64").unwrap(),
            PathChoice::Cpu
        ),
        Err(Error::Config(_))
    ));
    // Calibration: missing file, no Q-Filters tables, another shape.
    match Method::parse("f16+qfilters:budget=64,calib=/nonexistent/kvpack.safetensors") {
        Err(Error::Calibration { .. }) => {}
        other => panic!("expected Calibration, got {other:?}"),
    }
    let p = qfilter_file("shape", 3, 16, vec![0.25; 48]);
    let m = Method::parse(&format!("f16+qfilters:budget=64,calib={}", p.display())).unwrap();
    match m.layer(&ctx, 2, 16, PathChoice::Cpu) {
        Err(Error::Calibration { message, .. }) => {
            assert!(message.contains("3 KV heads"), "{message}")
        }
        other => panic!("expected Calibration, got {other:?}"),
    }
    match m.layer_at(&ctx, 1, 3, 16, PathChoice::Cpu) {
        Err(Error::Calibration { message, .. }) => {
            assert!(message.contains("layer 1"), "{message}")
        }
        other => panic!("expected Calibration for layer 1 of a 1-layer file, got {other:?}"),
    }
    std::fs::remove_file(p).ok();
}

fn a_failed_append_changes_nothing(t: &Target) {
    let (h, d) = (2, 8);
    let mut l = Method::parse("f16+knorm:budget=12,sinks=1")
        .unwrap()
        .layer(t.ctx(), h, d, t.path())
        .unwrap();
    let mut rng = common::rng("a_failed_append_changes_nothing");
    let (k, v) = random(&mut rng, 30, h, d);
    l.append(Input::F32(&k), Input::F32(&v)).unwrap();
    let before = (l.len(), l.appended(), l.memory(), l.snapshot().unwrap());
    let mut bad = k[..3 * h * d].to_vec();
    bad[5] = f32::NAN;
    assert!(matches!(
        l.append(Input::F32(&bad), Input::F32(&v[..3 * h * d])),
        Err(Error::NonFinite { .. })
    ));
    assert!(matches!(
        l.append(Input::F32(&k[..5]), Input::F32(&v[..5])),
        Err(Error::Shape { .. })
    ));
    assert_eq!(
        (l.len(), l.appended(), l.memory(), l.snapshot().unwrap()),
        before
    );
    // Queries: more rows than tokens appended is a shape error; a row past the held count is
    // fine (positions come from the appended count).
    let q = vec![0.1f32; 31 * h * d];
    assert!(matches!(
        l.attend(&q, h, &AttendOptions::default()),
        Err(Error::Shape { .. })
    ));
    let q: Vec<f32> = (0..20 * h * d).map(|i| (i % 7) as f32 * 0.1).collect();
    let got = l.attend(&q, h, &AttendOptions::default()).unwrap();
    assert_eq!(got.len(), 20 * h * d);
    let want = l
        .attend_reference(&q, h, &AttendOptions::default())
        .unwrap();
    let err = common::rel_l2_rows(&got, &want, d);
    assert!(err <= 1e-4, "{}: rel L2 {err:e}", t.name());
}
parity_tests!(a_failed_append_changes_nothing);

/// Layers under eviction save and load (format version 2): the loaded layer holds the same
/// words, positions, scores and counters, attends identically, and continues identically;
/// every flipped bit and every truncation of the file is a typed error; a changed
/// calibration file is refused.
#[test]
fn caches_under_eviction_save_and_load() {
    use kvpack::persist::{CacheFileError, SavedCache, format};
    let mut rng = common::rng("caches_under_eviction_save_and_load");
    let (h, d) = (2, 16);
    let filters: Vec<f32> = (0..h * d).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let calib = qfilter_file("save-load", h, d, filters);
    let specs = [
        format!(
            "f16+qfilters:budget=20,sinks=2,window=3,calib={}",
            calib.display()
        ),
        "kivi:bits=4,group=8,residual=8+knorm:budget=40,sinks=2,stride=3".to_string(),
        "turboquant-mse:bits=3+streaming:budget=24,sinks=1,stride=2".to_string(),
    ];
    let ctx = Context::cpu();
    let (k, v) = random(&mut rng, 130, h, d);
    let row = h * d;
    let mut flipped = 0;
    for spec in &specs {
        let m = Method::parse(spec).unwrap();
        let mut a = m.layer(&ctx, h, d, PathChoice::Cpu).unwrap();
        a.append(Input::F32(&k[..97 * row]), Input::F32(&v[..97 * row]))
            .unwrap();
        assert!(a.len() < 97, "{spec}: nothing evicted");
        let saved = SavedCache::of_layers([&*a]).unwrap();
        let bytes = saved.to_bytes().unwrap();
        assert_eq!(
            u32::from_le_bytes(bytes[8..12].try_into().unwrap()),
            2,
            "{spec}: version"
        );
        let back = SavedCache::from_bytes(&bytes).unwrap();
        assert_eq!(
            back.layers[0].eviction,
            a.eviction_state().unwrap(),
            "{spec}"
        );
        let mut b = back.to_layers(&ctx, PathChoice::Cpu).unwrap().remove(0);
        assert_eq!((b.len(), b.appended()), (a.len(), a.appended()), "{spec}");
        assert_eq!(b.snapshot().unwrap(), a.snapshot().unwrap(), "{spec}");
        let q: Vec<f32> = (0..3 * 4 * d)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let opts = AttendOptions::default().window(Some(30)).sinks(2);
        assert_eq!(
            b.attend(&q, 4, &opts).unwrap(),
            a.attend(&q, 4, &opts).unwrap(),
            "{spec}"
        );
        // Continuing: the same evictions, words and positions.
        for l in [&mut a, &mut b] {
            l.append(Input::F32(&k[97 * row..]), Input::F32(&v[97 * row..]))
                .unwrap();
        }
        assert_eq!(
            b.snapshot().unwrap(),
            a.snapshot().unwrap(),
            "{spec}: after more appends"
        );
        assert_eq!(
            b.eviction_state().unwrap(),
            a.eviction_state().unwrap(),
            "{spec}: after more appends"
        );
        // Every truncation and every flipped bit is an error (checksums), never a panic.
        let small = (bytes.len() < 6000).then_some(&bytes);
        if let Some(bytes) = small {
            for cut in 0..bytes.len() {
                assert!(
                    SavedCache::from_bytes(&bytes[..cut]).is_err(),
                    "{spec}: cut at {cut}"
                );
            }
            let mut x = bytes.clone();
            for i in 0..x.len() * 8 {
                x[i / 8] ^= 1 << (i % 8);
                assert!(
                    SavedCache::from_bytes(&x).is_err(),
                    "{spec}: bit {i} flipped"
                );
                x[i / 8] ^= 1 << (i % 8);
            }
            eprintln!(
                "{spec}: {} bytes, every cut and bit flip refused",
                bytes.len()
            );
            flipped += 1;
        }
        // A version-1 header (checksum fixed) with an eviction policy is refused.
        let mut v1 = bytes.clone();
        v1[8..12].copy_from_slice(&1u32.to_le_bytes());
        let meta_end = 64 + u32::from_le_bytes(v1[16..20].try_into().unwrap()) as usize;
        let crc = format::header_crc(&v1[..meta_end]);
        v1[format::CRC_FIELD..format::CRC_FIELD + 4].copy_from_slice(&crc.to_le_bytes());
        match SavedCache::from_bytes(&v1) {
            Err(Error::CacheFile { problem, .. }) => {
                assert!(
                    matches!(*problem, CacheFileError::Malformed { .. }),
                    "{problem}"
                )
            }
            other => panic!("{spec}: a version-1 file under eviction: {other:?}"),
        }
    }
    assert!(flipped >= 2, "the bit-flip sweep ran on {flipped} files");
    // The calibration file changed after saving: refused with the checksum named.
    let m = Method::parse(&specs[0]).unwrap();
    let mut a = m.layer(&ctx, h, d, PathChoice::Cpu).unwrap();
    a.append(Input::F32(&k[..40 * row]), Input::F32(&v[..40 * row]))
        .unwrap();
    let bytes = SavedCache::of_layers([&*a]).unwrap().to_bytes().unwrap();
    let other: Vec<f32> = (0..h * d).map(|i| i as f32 / 10.0).collect();
    let p = qfilter_file("save-load", h, d, other);
    assert_eq!(p, calib);
    // The calibration cache keys on (path, length, modification time): make the time differ.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let cal = Calibration::read(&p).unwrap();
    cal.write(&p).unwrap();
    match SavedCache::from_bytes(&bytes) {
        Err(Error::CacheFile { problem, .. }) => {
            assert!(
                matches!(*problem, CacheFileError::Layout { .. }),
                "{problem}"
            );
            assert!(problem.to_string().contains("checksum"), "{problem}");
        }
        other => panic!("a changed calibration file: {other:?}"),
    }
    std::fs::remove_file(calib).ok();
}
