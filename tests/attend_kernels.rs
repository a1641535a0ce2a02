//! The attention kernels one by one (`attend_<k>_<v>`, `attend_prefill_<k>_<v>`,
//! `attend_merge_<k>_<v>`), on every path
//! including the MSL emulator: a layer is built on the CPU, its stored words (a snapshot) are
//! laid out as the GPU store lays them out — each side's streams in one segment buffer per
//! segment index (a small segment size splits the cache into several), each side's residual in
//! a ring whose other slots hold NaN (so that a wrong slot shows), rings that wrap — the plans
//! of `attention::plan` run with poisoned outputs (NaN partials and output: an unwritten record
//! shows), and the output is compared with the CPU reference on the same words: relative L2
//! ≤ 1e-4 per row (spec/attention.md; splits change the f32 summation order). The CPU target
//! checks the reference against exact f64 attention on the layer's reconstruction. A key codec
//! that transforms the query (TurboQuant) has no prefill kernel: asking for it must be a typed
//! error, from the kernel choice and from the dispatch plans alike.

mod common;

use common::{POISON, Target, rel_l2_rows, run_plan};
use kvpack::attention::gpu::dispatch_plans;
use kvpack::attention::plan::{CacheShape, Call, plan};
use kvpack::codec::Codec;
use kvpack::cpu::attend::attend_exact;
use kvpack::store::{Side, SideWords, Snapshot};
use kvpack::{
    AttendKernel, AttendOptions, Context, Error, Input, KvLayer, Layer, Method, PathChoice,
};
use rand::Rng;

#[derive(Clone, Copy)]
struct Case {
    what: &'static str,
    method: &'static str,
    t: usize,
    tq: usize,
    hq: usize,
    hkv: usize,
    d: usize,
    opts: AttendOptions,
    /// Tokens per segment (both sides), a multiple of 32 and of the block sizes.
    seg_tokens: usize,
    /// Extra ring rows beyond what the window needs (the ring wraps at other places).
    ring_extra: usize,
    /// Workgroups the plan aims at (small: long splits; large: many splits).
    target: usize,
}

fn cases() -> Vec<Case> {
    let w = |window, sinks| AttendOptions {
        window: Some(window),
        sinks,
        ..Default::default()
    };
    let base = Case {
        what: "",
        method: "kivi:bits=2,group=32,residual=32",
        t: 1,
        tq: 1,
        hq: 9,
        hkv: 3,
        d: 64,
        opts: AttendOptions::default(),
        seg_tokens: 1 << 20,
        ring_extra: 0,
        target: 256,
    };
    vec![
        Case {
            what: "one token, ring only (direct)",
            ..base
        },
        Case {
            what: "decode 32/8 D=128 kivi-4 two segments",
            method: "kivi:bits=4,group=32,residual=64",
            t: 700,
            hq: 32,
            hkv: 8,
            d: 128,
            seg_tokens: 256,
            ..base
        },
        Case {
            what: "decode D=64 GQA 3 kivi-2 wrapped ring",
            t: 333,
            ring_extra: 17,
            ..base
        },
        Case {
            what: "prefill Tq=7 window 100 sinks 4",
            method: "kivi:bits=4,group=32,residual=64",
            t: 1000,
            tq: 7,
            opts: w(100, 4),
            target: 40,
            ..base
        },
        Case {
            what: "kivi 3-bit keys, 8-bit values, G=16 (generic and whole-word paths), f32 params",
            method: "kivi:kbits=3,vbits=8,group=16,residual=48,params=f32",
            t: 421,
            tq: 2,
            hq: 8,
            hkv: 8,
            d: 64,
            ..base
        },
        Case {
            what: "kivi G=4 (token-by-token keys), 1-bit values (part-word), GQA 8",
            method: "kivi:bits=1,group=4,residual=8",
            t: 150,
            hq: 8,
            hkv: 1,
            ..base
        },
        Case {
            what: "D=41 (channels past D), kivi-2",
            t: 260,
            hq: 4,
            hkv: 2,
            d: 41,
            ..base
        },
        Case {
            what: "D=80 kivi-4, scale 0.05",
            method: "kivi:bits=4,group=32,residual=32",
            t: 300,
            hq: 6,
            hkv: 2,
            d: 80,
            opts: AttendOptions {
                scale: Some(0.05),
                ..Default::default()
            },
            ..base
        },
        Case {
            what: "D=256 GQA 2 kivi-4, two segments",
            method: "kivi:bits=4,group=32,residual=32",
            t: 520,
            hq: 4,
            hkv: 2,
            d: 256,
            seg_tokens: 256,
            ..base
        },
        Case {
            what: "f16 cache, three segments",
            method: "f16",
            t: 700,
            tq: 3,
            hq: 8,
            hkv: 4,
            seg_tokens: 256,
            ..base
        },
        Case {
            what: "kivi keys / f16 values (ring and codec splits differ per side)",
            method: "kivi:bits=4,group=32/f16:residual=64",
            t: 311,
            tq: 2,
            ..base
        },
        Case {
            what: "f16 keys / kivi values, window 64",
            method: "f16/kivi:bits=2,group=8,vgroup=16,residual=16",
            t: 289,
            tq: 3,
            opts: w(64, 0),
            ring_extra: 5,
            ..base
        },
        Case {
            what: "turboquant-mse 3-bit both sides (funnel-shifted windows), two segments, wrapped ring",
            method: "turboquant-mse:bits=3,residual=40",
            t: 333,
            seg_tokens: 256,
            ring_extra: 5,
            ..base
        },
        Case {
            what: "turboquant-rvq 2+2 keys / kivi values, D=80 (P=128)",
            method: "turboquant-rvq:bits=2/kivi:bits=4,group=32,residual=32",
            t: 300,
            hq: 6,
            hkv: 2,
            d: 80,
            ..base
        },
        Case {
            what: "f16 keys / turboquant-mse 4-bit values D=128, prefill Tq=5, window 100",
            method: "f16/turboquant-mse:bits=4,residual=16",
            t: 270,
            tq: 5,
            hq: 8,
            hkv: 4,
            d: 128,
            opts: w(100, 2),
            target: 40,
            ..base
        },
        Case {
            what: "turboquant values, every token in the window (ring splits only, merged)",
            method: "turboquant-mse:bits=4,residual=200",
            t: 150,
            hq: 4,
            hkv: 2,
            ..base
        },
    ]
}

fn qkv(rng: &mut impl Rng, c: &Case) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    common::random_qkv(rng, c.t, c.tq, c.hq, c.hkv, c.d)
}

/// One segment buffer's bytes and its streams' byte ranges.
type SegmentBytes = (Vec<u8>, Vec<(u64, u64)>);

fn bytes(w: &[u32]) -> Vec<u8> {
    bytemuck::cast_slice(w).to_vec()
}

/// One side's segment buffers (streams of blocks of tokens [d·S, min((d+1)·S, Q)), each at a
/// 16-byte aligned word offset) and their byte ranges.
fn segments(codec: &dyn Codec, w: &SideWords, seg_tokens: usize) -> Vec<SegmentBytes> {
    let g = codec.block_tokens();
    let mut out = Vec::new();
    let mut a = 0;
    while a < w.quantized {
        let b = (a + seg_tokens).min(w.quantized);
        let mut buf: Vec<u32> = Vec::new();
        let mut ranges = Vec::new();
        for (st, words) in codec.streams().iter().zip(&w.streams) {
            let wpb = st.words_per_block;
            buf.resize(buf.len().div_ceil(4) * 4, POISON);
            let part = &words[a / g * wpb..b / g * wpb];
            ranges.push(((buf.len() * 4) as u64, (part.len() * 4) as u64));
            buf.extend_from_slice(part);
        }
        out.push((bytes(&buf), ranges));
        a = b;
    }
    out
}

/// A ring of `cap` f16 rows holding tokens [q, t) at slot s % cap, the other slots NaN; a
/// side without residual tokens gets the store's one-word placeholder (the MSL emulator then
/// catches any read of it).
fn ring(w: &SideWords, t: usize, cap: usize, row: usize) -> Vec<u8> {
    if w.quantized == t {
        return bytes(&[POISON]);
    }
    let rw = row.div_ceil(2);
    let mut words = vec![0x7e00_7e00u32; cap * rw];
    for s in w.quantized..t {
        let r = &w.residual[(s - w.quantized) * row..][..row];
        let slot = (s % cap) * rw;
        words[slot..slot + rw].fill(0);
        for (e, x) in r.iter().enumerate() {
            words[slot + e / 2] |= u32::from(x.to_bits()) << (16 * (e % 2));
        }
    }
    bytes(&words)
}

/// Runs the kernels of one call on `t` over the layer's words laid out as described above (the
/// kernel choice's error, if any: a prefill call on keys that transform the query).
fn on_target(
    t: &Target,
    c: &Case,
    layer: &Layer,
    snap: &Snapshot,
    q: &[f32],
) -> Result<(Vec<f32>, usize, bool), Error> {
    let (k, v) = (layer.codec(Side::Keys), layer.codec(Side::Values));
    let row = c.hkv * c.d;
    let caps = [&snap.keys, &snap.values].map(|w| (c.t - w.quantized).max(1) + c.ring_extra);
    let shape = CacheShape {
        qk: snap.keys.quantized,
        qv: snap.values.quantized,
        seg_tokens: c.seg_tokens,
        ring_cap: caps,
        row_words: row.div_ceil(2),
        value_dim: v.value_dim(),
        value_space_out: v.attend_value_space_out(),
        key_prep: k.attend_hooks().k_prep,
        ring: layer.has_ring(),
    };
    let call = Call {
        tq: c.tq,
        hq: c.hq,
        hkv: c.hkv,
        dim: c.d,
        tokens: c.t,
        opts: c.opts,
    };
    let wide = match t {
        Target::Wgsl(ctx, _) => kvpack::attention::gpu::wide_subgroups(ctx),
        _ => true, // MSL: SIMD groups of 32
    };
    let prefill = match call.prefill(&shape, 1 << 16) {
        Ok(p) => p,
        Err(e) => {
            // The dispatch plans refuse a prefill plan on their own too (a shape that does not
            // say the keys transform the query must not reach a kernel that is not there).
            let p = plan(&call, &shape, c.target, 1 << 30, true).expect("plan");
            let r = dispatch_plans(&call, &p, k, v, wide, layer.has_ring());
            assert!(
                matches!(r, Err(Error::Config(_))),
                "{}: a prefill plan on {} keys must be refused by the dispatch plans",
                c.what,
                c.method
            );
            return Err(e);
        }
    };
    let p = plan(&call, &shape, c.target, 1 << 30, prefill).expect("plan");
    let (dispatches, merge) =
        dispatch_plans(&call, &p, k, v, wide, layer.has_ring()).expect("dispatch plans");
    let (ks, vs) = (
        segments(k, &snap.keys, c.seg_tokens),
        segments(v, &snap.values, c.seg_tokens),
    );
    let rings = [
        ring(&snap.keys, c.t, caps[0], row),
        ring(&snap.values, c.t, caps[1], row),
    ];
    let out_len = c.tq * c.hq * c.d * 4;
    let poison_f32 = |n: usize| bytes(&vec![0x7fc0_0000u32; n.div_ceil(4)]);
    let mut partials = if p.merge.is_some() {
        poison_f32(p.partial_bytes as usize)
    } else {
        poison_f32(out_len)
    };
    let placeholder = bytes(&[0u32]);
    // A codec's tables are bound whether or not its side holds quantized tokens.
    let tables = |codec: &dyn Codec| {
        if codec.tables().is_empty() {
            placeholder.clone()
        } else {
            bytes(codec.tables())
        }
    };
    let uni = |codec: &dyn Codec, s: Option<&SegmentBytes>| {
        codec.attend_uniform(s.map(|x| x.1.as_slice()))
    };
    for (d, dp) in p.dispatches.iter().zip(&dispatches) {
        let (kseg, vseg) = (ks.get(d.segment), vs.get(d.segment));
        let mut bufs = vec![
            uni(k, kseg),
            uni(v, vseg),
            bytes(bytemuck::cast_slice(q)),
            std::mem::take(&mut partials),
            kseg.map_or(placeholder.clone(), |s| s.0.clone()),
            tables(k),
            vseg.map_or(placeholder.clone(), |s| s.0.clone()),
            tables(v),
            rings[0].clone(),
            rings[1].clone(),
        ];
        run_plan(t, dp, &mut bufs)
            .unwrap_or_else(|e| panic!("{} {}: partials: {e}", t.name(), c.what));
        partials = std::mem::take(&mut bufs[3]);
    }
    let direct = merge.is_none();
    let out = match merge {
        None => partials,
        Some(mp) => {
            let last = ks.last();
            let mut bufs = vec![
                uni(k, last),
                uni(v, vs.last()),
                partials,
                poison_f32(out_len),
                placeholder.clone(),
                placeholder.clone(),
                placeholder.clone(),
                tables(v),
                placeholder.clone(),
                placeholder.clone(),
            ];
            run_plan(t, &mp, &mut bufs)
                .unwrap_or_else(|e| panic!("{} {}: merge: {e}", t.name(), c.what));
            std::mem::take(&mut bufs[3])
        }
    };
    Ok((
        bytemuck::pod_collect_to_vec(&out[..out_len]),
        p.dispatches.len(),
        direct,
    ))
}

fn attend_kernels_match_reference(t: &Target) {
    let mut rng = common::rng("attend_kernels_match_reference");
    let cpu = Context::cpu();
    for c in cases() {
        let (q, k, v) = qkv(&mut rng, &c);
        let method = Method::parse(c.method).expect("method");
        let mut layer = Layer::new(&cpu, c.hkv, c.d, &method, PathChoice::Cpu).expect("layer");
        layer
            .append(Input::F32(&k), Input::F32(&v))
            .expect("append");
        let reference = layer.attend(&q, c.hq, &c.opts).expect("reference");
        if let Target::Cpu(_) = t {
            // Independent: exact f64 attention over the cache's own reconstruction.
            let (kh, vh) = layer.reconstruct().expect("reconstruct");
            let exact = attend_exact(&kh, &vh, c.hkv, &q, c.hq, c.d, &c.opts);
            let err = rel_l2_rows(&reference, &exact, c.d);
            eprintln!("attend_kernels[cpu] {}: worst row rel L2 {err:e}", c.what);
            assert!(err <= 1e-4, "cpu {}: worst row rel L2 {err:e}", c.what);
            continue;
        }
        let snap = layer.snapshot().expect("snapshot");
        // Every case on both kernels (the prefill kernel also at Tq = 1: windows, rings,
        // widths and segments are its as much as the decode kernel's).
        for kernel in [AttendKernel::Decode, AttendKernel::Prefill] {
            let c = Case {
                opts: AttendOptions { kernel, ..c.opts },
                ..c
            };
            let got = on_target(t, &c, &layer, &snap, &q);
            let k_prep = layer.codec(Side::Keys).attend_hooks().k_prep;
            if kernel == AttendKernel::Prefill && k_prep {
                match got {
                    Err(Error::Config(m)) if m.contains("prefill") => {
                        eprintln!(
                            "attend_kernels[{}] {} ({}, Prefill): refused as it must be: {m}",
                            t.name(),
                            c.what,
                            c.method
                        );
                        continue;
                    }
                    Err(e) => panic!("{}: prefill on query-transforming keys: {e}", c.what),
                    Ok(_) => panic!("{}: prefill on query-transforming keys ran", c.what),
                }
            }
            let (out, dispatches, direct) =
                got.unwrap_or_else(|e| panic!("{} {kernel:?}: {e}", c.what));
            let err = rel_l2_rows(&out, &reference, c.d);
            eprintln!(
                "attend_kernels[{}] {} ({}, {kernel:?}): Qk={} Qv={} {dispatches} dispatches, direct {direct}: worst row rel L2 {err:e}",
                t.name(),
                c.what,
                c.method,
                snap.keys.quantized,
                snap.values.quantized
            );
            assert!(
                err <= 1e-4,
                "{} {} ({}, {kernel:?}): worst row rel L2 {err:e} against the reference",
                t.name(),
                c.what,
                c.method
            );
        }
    }
}
parity_tests!(attend_kernels_match_reference, msl);
