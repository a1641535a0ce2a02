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
//! error, from the kernel choice and from the dispatch plans alike. VecInfer runs the
//! synthetic cases of tests/common/vecinfer_calib.rs (its method needs a calibration file).

mod common;

use common::Target;
use common::attend_plans::{Case, qkv};
use common::rel_l2_rows;
use kvpack::cpu::attend::attend_exact;
use kvpack::store::Side;
use kvpack::{AttendOptions, Context, Input, KvLayer, Layer, Method, PathChoice};

fn cases() -> Vec<Case> {
    let w = |window, sinks| AttendOptions::default().window(Some(window)).sinks(sinks);
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
    // One split per vector over 1200 tokens: slices loop over many tiles, so the running
    // maximum grows inside a slice (a dropped online-softmax rescale fails here; with many
    // short splits every slice sees one tile and it would not).
    let long_split = Case {
        what: "one long split: online-softmax rescale inside a slice",
        method: "f16/kivi:bits=4,group=32,residual=32",
        t: 1200,
        tq: 2,
        hq: 8,
        hkv: 2,
        target: 1,
        ..base
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
            // Splits of 3 tiles: a slice's trip past its split's tiles lands in the next
            // segment's tokens; it must read nothing (the emulated MSL flags any read past a
            // segment's buffer; found with 12 slices per workgroup).
            what: "splits of 3 tiles over two segments, kivi-4 keys / f16 values",
            method: "kivi:bits=4,group=32/f16:residual=32",
            t: 600,
            seg_tokens: 256,
            opts: AttendOptions::default().chunk_tokens(96),
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
            opts: AttendOptions::default().scale(Some(0.05)),
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
        long_split,
        // The same with keys rising along the cache (tests/common/tc_decode.rs `rising_past`: the largest score reaches 160 in base 2):
        // random scores rarely pass the decode kernel's reference max by more than its slack
        // (DEC_TAU) once a slice has its first tile, rising ones do, tile after tile, so the
        // rescale of l and of the accumulator runs inside a slice.
        Case {
            what: "one long split, keys rising along the cache: the reference max moves inside a slice",
            ..long_split
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
        Case {
            what: "qjl m=96 keys (a lane's 12 sign bits straddle two words) / kivi-4 values, two segments, wrapped ring",
            method: "qjl:m=96/kivi:bits=4,group=32,residual=32",
            t: 300,
            seg_tokens: 128,
            ring_extra: 9,
            ..base
        },
        Case {
            what: "qjl m=384 keys (48 bits per lane: a full piece and a short one) / turboquant-mse values",
            method: "qjl:m=384/turboquant-mse:bits=3",
            t: 150,
            hq: 4,
            hkv: 2,
            ..base
        },
        Case {
            what: "turboquant-prod 3-bit keys (2-bit stage 1, m=64) / turboquant-mse values, two segments, wrapped ring",
            method: "turboquant-prod:bits=3,residual=24/turboquant-mse:bits=3",
            t: 300,
            seg_tokens: 128,
            ring_extra: 9,
            ..base
        },
        Case {
            what: "turboquant-prod 4-bit keys m=96 (sign pieces straddle words), D=80 (P=128) / f16 values",
            method: "turboquant-prod:bits=4,m=96/f16",
            t: 150,
            d: 80,
            hq: 4,
            hkv: 2,
            ..base
        },
    ]
}

/// Whether the layer's key hook scores a QJL sketch by its nibble table (`Some(true)`), by
/// masked sums (`Some(false)`) or has no sketch (`None`): the form its codec picked for the
/// workgroup storage of the context it was built on.
fn sketch_form(layer: &Layer) -> Option<bool> {
    layer
        .codec(Side::Keys)
        .attend_spec()
        .into_iter()
        .find(|(n, _)| *n == "ATT_KQJL_LUT")
        .map(|(_, v)| v == 1)
}

fn attend_kernels_match_reference(t: &Target) {
    let mut rng = common::rng("attend_kernels_match_reference");
    // Codecs plan their GPU kernels for the context they are built on: WebGPU's default
    // workgroup storage (16 KiB) and the target's own (the emulator's: Metal's 32 KiB), so
    // that QJL and TurboQuant-Prod keys run both forms of their score hook. (m = 384's table,
    // two pieces per lane, needs 42.7 KiB at D = 64: it runs where a device has that, e.g.
    // the H200's 48 KiB, and on lavapipe and the emulator takes masked sums.)
    let big = match t {
        Target::Wgsl(ctx, _) => ctx.max_workgroup_storage_size(),
        _ => 32 * 1024,
    };
    let contexts = [16 * 1024, big].map(|b| {
        Context::cpu()
            .with_max_workgroup_storage_size(b)
            .expect("limit")
    });
    let mut forms = std::collections::BTreeSet::new();
    for (c, cpu) in cases().into_iter().flat_map(|c| {
        let sketch = c.method.starts_with("qjl") || c.method.starts_with("turboquant-prod");
        contexts
            .iter()
            .take(if sketch { 2 } else { 1 })
            .map(move |ctx| (c, ctx))
    }) {
        let (q, mut k, v) = qkv(&mut rng, &c);
        if c.what.contains("keys rising") {
            let scale = c.opts.scale.unwrap_or(1.0 / (c.d as f32).sqrt());
            common::tc_decode::rising_past(&q, &mut k, c.hq, c.hkv, c.d, scale);
        }
        let method = Method::parse(c.method).expect("method");
        let mut layer = Layer::new(cpu, c.hkv, c.d, &method, PathChoice::Cpu).expect("layer");
        if let Some(lut) = sketch_form(&layer) {
            eprintln!(
                "attend_kernels[{}] {}: sketch scored by {} (workgroup storage {})",
                t.name(),
                c.what,
                if lut {
                    "the nibble table"
                } else {
                    "masked sums"
                },
                cpu.max_workgroup_storage_size()
            );
            forms.insert(lut);
        }
        layer
            .append(Input::F32(&k), Input::F32(&v))
            .expect("append");
        let reference = layer.attend(&q, c.hq, &c.opts).expect("reference");
        if let Target::Cpu(_) = t {
            if !method.key().attends_on_reconstruction() {
                // QJL and TurboQuant-Prod keys: no reconstruction to attend on (Prod's scores
                // add the sketch correction); their scores are checked against the spec in
                // tests/qjl.rs and tests/turboquant_prod.rs (and the GPU paths below against
                // this reference).
                eprintln!(
                    "NOTE attend_kernels[cpu] {}: keys without a reconstruction, no exact check",
                    c.what
                );
                assert_eq!(
                    layer.reconstruct().is_ok(),
                    method.key().reconstructs(),
                    "{}: reconstruction against the method's word",
                    c.what
                );
                continue;
            }
            // Independent: exact f64 attention over the cache's own reconstruction.
            let (kh, vh) = layer.reconstruct().expect("reconstruct");
            let exact = attend_exact(&kh, &vh, c.hkv, &q, c.hq, c.d, &c.opts);
            let err = rel_l2_rows(&reference, &exact, c.d);
            eprintln!("attend_kernels[cpu] {}: worst row rel L2 {err:e}", c.what);
            assert!(err <= 1e-4, "cpu {}: worst row rel L2 {err:e}", c.what);
            continue;
        }
        common::attend_plans::check_case(t, &c, &layer, &q, &reference);
    }
    assert_eq!(
        forms.len(),
        2,
        "{}: both forms of the sketch score hook must run (ran: {forms:?})",
        t.name()
    );
    // VecInfer (its method needs a calibration file: the synthetic D = 32 one, f32 and f16
    // LUT; the story fixture's cases are in tests/vecinfer.rs).
    for lc in common::vecinfer_calib::lut_cases(None, false) {
        common::vecinfer_calib::check_lut_case(t, &lc);
    }
}
parity_tests!(attend_kernels_match_reference, msl);
