//! The attention kernels one by one (`attend_kivi`, `attend_f16`, `attend_merge`), on every
//! path including the MSL emulator: a KIVI layer is built on the CPU, its stored words are laid
//! out as the GPU store lays them out (packed segments, possibly split into two regions with
//! a segment offset; the f16 residual in a ring of `ring_tokens` rows, token s in slot
//! s % C, the other slots NaN; for one case linear f16 rows at a segment offset, as the f16
//! cache stores them), the partials plans of `attention::gpu::plans_for` and the merge plan
//! run with poisoned outputs (NaN partials, so that an unwritten chunk shows), and the output
//! is compared with the CPU reference on the same words: relative L2 ≤ 1e-4 per
//! row (spec/attention.md; chunking changes the f32 summation order, so not bit-exact). The CPU
//! target checks the reference against exact f64 attention on the layer's reconstruction.

mod common;

use common::rel_l2_rows;

use common::{POISON, Target, run_plan};
use kvpack::attention::gpu::{Call, PlanLimits, RegionDesc, SourceKind, plans_for};
use kvpack::codecs::kivi::plans::rows_to_words;
use kvpack::codecs::kivi::{Layout, RawKivi};
use kvpack::cpu::attend::attend_exact;
use kvpack::{AttendOptions, Context, Input, KiviConfig, KvLayer, Layer, ParamStorage, PathChoice};
use rand::Rng;

struct Case {
    what: &'static str,
    t: usize,
    tq: usize,
    hq: usize,
    hkv: usize,
    d: usize,
    opts: AttendOptions,
    cfg: KiviConfig,
    /// Split the packed tokens into two regions at token `.0`, the second region's buffers
    /// starting at key block `.1` (so its seg_offset is `.0 - .1 * Gk`).
    split: Option<(usize, usize)>,
    /// Store the residual as linear f16 rows (ring_tokens 0, as the f16 cache does) from row
    /// `seg_offset` on, instead of the ring.
    linear: Option<usize>,
}

fn cases() -> Vec<Case> {
    let w = |window, sinks| AttendOptions {
        window: Some(window),
        sinks,
        ..Default::default()
    };
    let f32p = |c: KiviConfig| KiviConfig {
        params: ParamStorage::F32,
        ..c
    };
    let base = Case {
        what: "",
        t: 1,
        tq: 1,
        hq: 9,
        hkv: 3,
        d: 64,
        opts: AttendOptions::default(),
        cfg: KiviConfig::uniform(2, 32, 32),
        split: None,
        linear: None,
    };
    vec![
        Case {
            what: "T=1 Tq=1 9/3 D=64 (ring only)",
            ..base
        },
        Case {
            what: "T=40 Tq=5 8/8 D=128 R=0",
            t: 40,
            tq: 5,
            hq: 8,
            hkv: 8,
            d: 128,
            cfg: KiviConfig::uniform(4, 32, 0),
            ..base
        },
        Case {
            what: "T=40 Tq=5 32/8 D=64 b3 G=16 R=16 (ring wraps)",
            t: 40,
            tq: 5,
            hq: 32,
            hkv: 8,
            d: 64,
            cfg: KiviConfig::uniform(3, 16, 16),
            ..base
        },
        Case {
            what: "T=710 Tq=5 32/8 D=128, two segments (seg_offset 44), ring wraps",
            t: 710,
            tq: 5,
            hq: 32,
            hkv: 8,
            d: 128,
            cfg: KiviConfig::uniform(2, 32, 32),
            split: Some((300, 8)),
            ..base
        },
        Case {
            what: "T=700 Tq=1 9/3 D=64 window 100 sinks 4, f32 params, ring of 3 chunks",
            t: 700,
            cfg: f32p(KiviConfig::uniform(4, 32, 128)),
            opts: w(100, 4),
            ..base
        },
        Case {
            what: "T=700 Tq=5 8/8 D=64 window 64, G=64 R=64",
            t: 700,
            tq: 5,
            hq: 8,
            hkv: 8,
            cfg: KiviConfig::uniform(2, 64, 64),
            opts: w(64, 0),
            ..base
        },
        Case {
            what: "T=100 Tq=5 9/3 D=128 b3 Gv=48 (ragged value group) scale 0.05, linear f16 rows at row 3",
            linear: Some(3),
            t: 100,
            tq: 5,
            d: 128,
            cfg: KiviConfig {
                key_bits: 3,
                key_group: 32,
                value_bits: 3,
                value_group: 48,
                residual: 32,
                params: ParamStorage::F16,
            },
            opts: AttendOptions {
                scale: Some(0.05),
                ..Default::default()
            },
            ..base
        },
        Case {
            what: "T=300 Tq=37 8/8 D=64 window 50 sinks 2 (prefill blocks, the last partial)",
            t: 300,
            tq: 37,
            hq: 8,
            hkv: 8,
            cfg: KiviConfig::uniform(4, 32, 64),
            opts: w(50, 2),
            ..base
        },
        Case {
            what: "T=90 Tq=9 8/4 D=128 (8 rows of 2 heads, then 1)",
            t: 90,
            tq: 9,
            hq: 8,
            hkv: 4,
            d: 128,
            cfg: KiviConfig::uniform(2, 32, 32),
            ..base
        },
        Case {
            what: "T=130 Tq=2 16/4 D=256 b3 f32 params, two segments (seg_offset 18)",
            t: 130,
            tq: 2,
            hq: 16,
            hkv: 4,
            d: 256,
            cfg: f32p(KiviConfig::uniform(3, 32, 32)),
            split: Some((50, 1)),
            ..base
        },
    ]
}

fn qkv(rng: &mut impl Rng, c: &Case) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    common::random_qkv(rng, c.t, c.tq, c.hq, c.hkv, c.d)
}

fn as_bytes(w: &[u32]) -> Vec<u8> {
    bytemuck::cast_slice(w).to_vec()
}

/// The packed words of tokens `[tok0, tok1)` (a multiple of Gk at `tok0`) as a segment's
/// buffers: key codes, key params, value codes, value params.
fn segment(l: &Layout, raw: &RawKivi, tok0: usize, tok1: usize) -> Vec<Vec<u8>> {
    let gk = l.key_group;
    assert_eq!(tok0 % gk, 0);
    let (b0, b1) = (tok0 / gk, tok1.div_ceil(gk));
    vec![
        as_bytes(&raw.key_codes[b0 * l.key_block_words()..b1 * l.key_block_words()]),
        as_bytes(&raw.key_params[b0 * l.key_block_param_words()..b1 * l.key_block_param_words()]),
        as_bytes(&raw.value_codes[tok0 * l.value_token_words()..tok1 * l.value_token_words()]),
        as_bytes(
            &raw.value_params
                [tok0 * l.value_token_param_words()..tok1 * l.value_token_param_words()],
        ),
    ]
}

/// The residual ring of K or V: token s (in [Q, T)) in slot s % C, the other slots NaN.
fn ring(l: &Layout, q_len: usize, rows: &[half::f16]) -> Vec<u8> {
    let (c, rw) = (l.ring_tokens(), l.residual_row_words());
    let words = rows_to_words(l, rows);
    let n = words.len() / rw;
    assert!(n <= c, "the residual fits in the ring");
    let mut out = vec![0x7e00_7e00u32; c * rw];
    for s in q_len..q_len + n {
        let slot = s % c;
        out[slot * rw..(slot + 1) * rw].copy_from_slice(&words[(s - q_len) * rw..][..rw]);
    }
    as_bytes(&out)
}

/// The residual of K or V as linear rows from row `seg_offset` on, NaN rows around it.
fn linear(l: &Layout, seg_offset: usize, rows: &[half::f16]) -> Vec<u8> {
    let rw = l.residual_row_words();
    let mut out = vec![0x7e00_7e00u32; seg_offset * rw];
    out.extend(rows_to_words(l, rows));
    out.extend(std::iter::repeat_n(0x7e00_7e00u32, 2 * rw));
    as_bytes(&out)
}

/// Runs the attention kernels of one call on `t`: regions' plans, then the merge.
fn on_target(
    t: &Target,
    c: &Case,
    layer: &Layer,
    raw: &RawKivi,
    q: &[f32],
    wg_storage: u32,
    stage_tiles: Option<bool>,
) -> (Vec<f32>, usize, u32, bool) {
    let l = &common::kivi_layout(c.hkv, c.d, &c.cfg);
    let qn = layer.memory().quantized;
    // Regions (non-empty only) and their buffers, as the GPU store lays them out.
    let mut regions: Vec<(RegionDesc<'_>, Vec<Vec<u8>>)> = Vec::new();
    let kivi = SourceKind::Kivi(l);
    match c.split {
        Some((s1, b0)) if s1 < qn => {
            let r0 = b0 * l.key_group;
            assert!(r0 <= s1);
            let region = |start, end, seg_offset| RegionDesc {
                start,
                end,
                seg_offset,
                kind: kivi,
            };
            regions.push((region(0, s1, 0), segment(l, raw, 0, s1)));
            regions.push((region(s1, qn, s1 - r0), segment(l, raw, r0, qn)));
        }
        _ if qn > 0 => {
            let desc = RegionDesc {
                start: 0,
                end: qn,
                seg_offset: 0,
                kind: kivi,
            };
            regions.push((desc, segment(l, raw, 0, qn)));
        }
        _ => {}
    }
    if c.t > qn {
        let row_words = l.residual_row_words();
        let (desc, bufs) = match c.linear {
            Some(seg_offset) => (
                RegionDesc {
                    start: qn,
                    end: c.t,
                    seg_offset,
                    kind: SourceKind::F16 {
                        row_words,
                        ring_tokens: 0,
                    },
                },
                vec![
                    linear(l, seg_offset, &raw.residual_k),
                    linear(l, seg_offset, &raw.residual_v),
                ],
            ),
            None => (
                RegionDesc {
                    start: qn,
                    end: c.t,
                    seg_offset: 0,
                    kind: SourceKind::F16 {
                        row_words,
                        ring_tokens: l.ring_tokens(),
                    },
                },
                vec![ring(l, qn, &raw.residual_k), ring(l, qn, &raw.residual_v)],
            ),
        };
        regions.push((desc, bufs));
    }
    let call = Call {
        tq: c.tq,
        hq: c.hq,
        hkv: c.hkv,
        dim: c.d,
        tokens: c.t,
        opts: AttendOptions {
            stage_tiles,
            ..c.opts
        },
    };
    let descs: Vec<RegionDesc<'_>> = regions.iter().map(|r| r.0).collect();
    let limits = PlanLimits {
        max_binding: 1 << 30,
        max_workgroup_storage: wg_storage,
    };
    let (partial_plans, merge, partial_bytes) = plans_for(&call, &descs, limits).expect("plans");
    assert_eq!(partial_plans.len(), regions.len());
    let nan_words = (partial_bytes / 4) as usize;
    let mut partials = as_bytes(&vec![0x7fc0_0000u32; nan_words]);
    let qb: Vec<u8> = bytemuck::cast_slice(q).to_vec();
    let mut chunks = 0;
    for (plan, (desc, bufs)) in partial_plans.iter().zip(&regions) {
        let mut storage = vec![qb.clone(), partials];
        storage.extend(bufs.iter().cloned());
        run_plan(t, plan, &mut storage)
            .unwrap_or_else(|e| panic!("{} {}: partials {:?}: {e}", t.name(), c.what, desc));
        partials = storage.swap_remove(1);
        let p: &kvpack::attention::gpu::AttendParams = bytemuck::from_bytes(&plan.uniform);
        chunks += p.n_chunks as usize;
    }
    let mut storage = vec![partials, as_bytes(&vec![POISON; q.len()])];
    run_plan(t, &merge, &mut storage)
        .unwrap_or_else(|e| panic!("{} {}: merge: {e}", t.name(), c.what));
    let spec = |name: &str| {
        partial_plans
            .iter()
            .flat_map(|p| p.spec.0.iter())
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .max()
            .unwrap_or(0)
    };
    (
        bytemuck::pod_collect_to_vec(&storage[1]),
        chunks,
        spec("ATT_ROWS"),
        spec("ATT_STAGE") == 1,
    )
}

fn attend_kernels_match_reference(t: &Target) {
    let mut rng = common::rng("attend_kernels_match_reference");
    let cpu = Context::cpu();
    for c in cases() {
        let (q, k, v) = qkv(&mut rng, &c);
        let mut layer = Layer::kivi(&cpu, c.hkv, c.d, &c.cfg, PathChoice::Cpu).expect("layer");
        layer
            .append(Input::F32(&k), Input::F32(&v))
            .expect("append");
        let raw = common::raw(&layer).expect("raw");
        let reference = layer
            .attend_reference(&q, c.hq, &c.opts)
            .expect("reference");
        if let Target::Cpu(_) = t {
            // Independent: exact f64 attention over the cache's own reconstruction.
            let (kh, vh) = layer.reconstruct().expect("reconstruct");
            let exact = attend_exact(&kh, &vh, c.hkv, &q, c.hq, c.d, &c.opts);
            let err = rel_l2_rows(&reference, &exact, c.d);
            eprintln!("attend_kernels[cpu] {}: worst row rel L2 {err:e}", c.what);
            assert!(err <= 1e-4, "cpu {}: worst row rel L2 {err:e}", c.what);
            continue;
        }
        // The device's workgroup storage (Apple's 32 KiB for the emulated MSL) with tiles
        // staged (where the layout allows) and not, and for prefill rows 8 KiB: fewer query
        // rows per workgroup.
        let device = match t {
            Target::Wgsl(ctx, _) => ctx.max_workgroup_storage_size(),
            _ => 32 * 1024,
        };
        let mut variants = vec![(device, Some(true)), (device, None)];
        if c.tq > 1 {
            variants.push((8 * 1024, None));
        }
        for (wg, stage) in variants {
            let (out, chunks, rows, staged) = on_target(t, &c, &layer, &raw, &q, wg, stage);
            assert_eq!(out.len(), reference.len());
            let err = rel_l2_rows(&out, &reference, c.d);
            eprintln!(
                "attend_kernels[{}] {} (rows/workgroup {rows}, staged {staged}): Q={} chunks={chunks} worst row rel L2 {err:e}",
                t.name(),
                c.what,
                layer.memory().quantized
            );
            assert!(
                err <= 1e-4,
                "{} {} (rows/workgroup {rows}): worst row rel L2 {err:e} against the reference",
                t.name(),
                c.what
            );
        }
    }
}
parity_tests!(attend_kernels_match_reference, msl);
