//! TurboQuant's kernels and codec on every path (../shared/spec/turboquant.md), one body per
//! path (the CPU reference's own checks against the spec are in tests/turboquant_cpu.rs):
//!
//! - `turboquant_quant` from its dispatch plans (inputs split between the residual ring and the
//!   incoming rows, a destination inside the segment, poisoned outputs) against the CPU
//!   reference: the emulated MSL bit-identical; WGSL by the spec's agreement rules (norms equal
//!   or 1 f16 ulp apart; a code ±1 only where the reference y lies within 1e-5·(1 + |y|) of a
//!   boundary, an RVQ stage-2 code free where its stage-1 code moved), boundary cases counted
//!   and printed (tokens whose rotated coordinates are exactly 0, the middle boundary, plant
//!   ties). D = 64, 80 (P = 128), 128, 256, 3 (P = 4) and 512 (P beyond the invocation limit);
//! - `turboquant_dequant` over the reference's words: bit-identical to the CPU reconstruction;
//! - planted bugs (a missing barrier between the butterfly's reads and writes; the signs applied
//!   after the transform instead of before) make the kernels disagree, on every variant that has
//!   the code in question;
//! - bad input (a norm beyond f16, bad bits or D) is a typed error with nothing stored; the
//!   method grammar; layers draw their own signs;
//! - the prefill attention kernel through a layer: TurboQuant keys (the query is rotated) are
//!   refused with a typed error and the layer answers as before on the decode kernel;
//!   TurboQuant values (other keys) run on it and agree with the decode kernel.

mod common;

use common::{POISON, Target, run_plan};
use half::f16;
use kvpack::codec::Codec;
use kvpack::codecs::turboquant::kernels::{TURBOQUANT_DEQUANT, TURBOQUANT_QUANT};
use kvpack::codecs::turboquant::plans::{QuantSource, plan_dequant, plan_quant};
use kvpack::codecs::turboquant::{TqSide, TurboQuantCodec, Variant};
use kvpack::cpu::turboquant::turboquant_quant::normalize_rotate;
use kvpack::gpu::registry::KernelDef;
use kvpack::path::KernelPath;
use kvpack::store::{Geometry, Side};
use kvpack::{
    AttendKernel, AttendOptions, Context, Error, Input, KvLayer, Layer, Method, PathChoice,
};
use rand::Rng;

struct Case {
    what: &'static str,
    variant: Variant,
    bits: u32,
    heads: usize,
    dim: usize,
    /// Tokens quantized: [q_old, q_old + n), of which the first `from_ring` from the ring.
    n: usize,
    from_ring: usize,
    /// Token of the segment the first one is written to.
    seg_token: usize,
}

fn cases() -> Vec<Case> {
    let c = |what, variant, bits, heads, dim, n, from_ring, seg_token| Case {
        what,
        variant,
        bits,
        heads,
        dim,
        n,
        from_ring,
        seg_token,
    };
    vec![
        c(
            "D=64 MSE-3, odd H (codes through memory)",
            Variant::Mse,
            3,
            3,
            64,
            40,
            15,
            5,
        ),
        c("D=80 (P=128) RVQ 2+2", Variant::Rvq, 2, 2, 80, 33, 0, 0),
        c(
            "D=128 MSE-3 (lane pairs assemble the words)",
            Variant::Mse,
            3,
            3,
            128,
            30,
            9,
            2,
        ),
        c(
            "D=96 (P=128) RVQ 3+3 (lane pairs, both stages)",
            Variant::Rvq,
            3,
            2,
            96,
            21,
            5,
            1,
        ),
        c("D=128 MSE-4", Variant::Mse, 4, 4, 128, 24, 24, 3),
        c("D=256 RVQ 1+1, one head", Variant::Rvq, 1, 1, 256, 20, 7, 1),
        c("D=3 (P=4) MSE-8", Variant::Mse, 8, 2, 3, 30, 10, 2),
        c(
            "D=512 MSE-2 (P beyond the invocation limit)",
            Variant::Mse,
            2,
            1,
            512,
            9,
            4,
            0,
        ),
    ]
}

/// A case's inputs: f16 rows `[n][H][D]` (per-channel offsets, a heavy tail, and planted
/// tokens: zeros; 1 at channels 0 and 1, whose rotated coordinates are exactly 0 or ±√2·c,
/// so that the middle boundary's tie rule is exercised; a large but f16-normed vector).
fn inputs(rng: &mut impl Rng, c: &Case) -> Vec<f16> {
    let row = c.heads * c.dim;
    let offs: Vec<f32> = (0..row).map(|_| rng.random_range(-2.0..2.0)).collect();
    let mut x: Vec<f16> = (0..c.n * row)
        .map(|i| {
            let v: f32 = rng.random_range(-1.0..1.0);
            let tail = if rng.random_range(0..50) == 0 {
                8.0
            } else {
                1.0
            };
            f16::from_f32(offs[i % row] + tail * v)
        })
        .collect();
    for (t, kind) in [(1usize, 0), (2, 1), (4, 2)] {
        if t >= c.n {
            continue;
        }
        for h in 0..c.heads {
            let r = &mut x[(t * c.heads + h) * c.dim..][..c.dim];
            for (d, v) in r.iter_mut().enumerate() {
                *v = f16::from_f32(match kind {
                    0 => 0.0,
                    1 => f32::from(u8::from(d < 2)),
                    _ => 3000.0 * if d % 2 == 0 { 1.0 } else { -1.0 } / (c.dim as f32).sqrt(),
                });
            }
        }
    }
    x
}

fn codec(c: &Case, layer: usize) -> TurboQuantCodec {
    TurboQuantCodec::new(
        &Context::cpu(),
        TqSide::new(c.variant, Side::Keys, c.bits),
        Geometry::new(c.heads, c.dim).expect("geometry"),
        layer,
        PathChoice::Cpu,
    )
    .expect("codec")
}

fn bytes(w: &[u32]) -> Vec<u8> {
    bytemuck::cast_slice(w).to_vec()
}

fn words(b: &[u8]) -> Vec<u32> {
    bytemuck::pod_collect_to_vec(b)
}

/// The path a target runs `def` on.
fn path_of(t: &Target, def: &KernelDef) -> KernelPath {
    match t {
        Target::Wgsl(ctx, choice) => ctx.resolve(def, *choice).expect("path"),
        Target::MslEmulated(_) => KernelPath::Msl,
        Target::Cpu(_) => KernelPath::Cpu,
    }
}

const Q_OLD: usize = 7;

/// The stored words of a case: (codes, norms) of tokens [0, n) of the segment region written.
type Stored = (Vec<u32>, Vec<u32>);

fn reference(codec: &TurboQuantCodec, c: &Case, x: &[f16]) -> Stored {
    let row = c.heads * c.dim;
    let f = |t: usize, h: usize, d: usize| x[t * row + h * c.dim + d].to_f32();
    let mut out = vec![Vec::new(), Vec::new()];
    codec.encode(Q_OLD, c.n, &f, &mut out).expect("reference");
    (out[0].clone(), out[1].clone())
}

/// Runs `def` (turboquant_quant or a planted variant) on `t` and returns the words of the
/// tokens it wrote, after checking that nothing outside them changed.
fn quantize_on(
    t: &Target,
    def: &'static KernelDef,
    codec: &TurboQuantCodec,
    c: &Case,
    x: &[f16],
) -> Stored {
    let l = codec.layout();
    let row = c.heads * c.dim;
    let rw = row.div_ceil(2);
    let rows = kvpack::store::input::f16_rows_to_words(row, x);
    let t_old = Q_OLD + c.from_ring;
    // The ring holds tokens [Q_OLD, t_old) at slot s % cap, NaN elsewhere.
    let cap = c.from_ring + 3;
    let mut ring = vec![0x7e00_7e00u32; cap * rw];
    for s in Q_OLD..t_old {
        ring[(s % cap) * rw..][..rw].copy_from_slice(&rows[(s - Q_OLD) * rw..][..rw]);
    }
    let incoming = rows[c.from_ring * rw..].to_vec();
    let total = c.seg_token + c.n + 2;
    let mut plan = plan_quant(
        l,
        path_of(t, def),
        c.n,
        QuantSource {
            start: Q_OLD,
            t_old,
            inc_start: t_old,
            ring_tokens: cap,
        },
        c.seg_token,
    );
    plan.kernel = def;
    let mut bufs = vec![
        bytes(&ring),
        bytes(if incoming.is_empty() {
            &[0u32]
        } else {
            &incoming
        }),
        bytes(&vec![POISON; total * l.code_words()]),
        bytes(&vec![POISON; total * l.norm_words()]),
        bytes(codec.tables()),
    ];
    run_plan(t, &plan, &mut bufs).unwrap_or_else(|e| panic!("{} {}: {e}", t.name(), c.what));
    let (codes, norms) = (words(&bufs[2]), words(&bufs[3]));
    let (cw, nw) = (l.code_words(), l.norm_words());
    let (a, b) = (c.seg_token, c.seg_token + c.n);
    for (name, w, per) in [("codes", &codes, cw), ("norms", &norms, nw)] {
        assert!(
            w[..a * per]
                .iter()
                .chain(&w[b * per..])
                .all(|&x| x == POISON),
            "{} {}: {name} written outside tokens [{a}, {b}) of the segment",
            t.name(),
            c.what
        );
    }
    (
        codes[a * cw..b * cw].to_vec(),
        norms[a * nw..b * nw].to_vec(),
    )
}

/// What the agreement check counted.
#[derive(Default, Debug)]
struct Agreement {
    codes: usize,
    /// Reference coordinates within the tolerance of a boundary.
    boundary: usize,
    /// Codes that differ there (±1), and stage-2 codes excused by a moved stage-1 code.
    moved: usize,
    excused: usize,
    norms_ulp: usize,
}

fn near(y: f32, bounds: &[f32]) -> bool {
    bounds
        .iter()
        .any(|&b| (y - b).abs() <= 1e-5 * (1.0 + y.abs()))
}

/// The spec's cross-backend agreement: `exact` (the emulated MSL) wants identical words; a
/// GPU gets the allowances. `Err` describes the first violation.
fn agree(
    codec: &TurboQuantCodec,
    c: &Case,
    x: &[f16],
    want: &Stored,
    got: &Stored,
    exact: bool,
) -> Result<Agreement, String> {
    let l = codec.layout();
    let mut a = Agreement::default();
    if exact && want != got {
        let i = want.0.iter().zip(&got.0).position(|(p, q)| p != q);
        let j = want.1.iter().zip(&got.1).position(|(p, q)| p != q);
        return Err(format!(
            "not bit-identical: first code word {i:?}, norm word {j:?}"
        ));
    }
    let books = codec.codebooks();
    let rw = l.row_words();
    let row = c.heads * c.dim;
    for t in 0..c.n {
        for h in 0..c.heads {
            let nb = |w: &[u32]| (w[t * l.norm_words() + h / 2] >> (16 * (h % 2))) & 0xffff;
            let (nw, ng) = (nb(&want.1), nb(&got.1));
            if nw != ng {
                if nw.abs_diff(ng) > 1 {
                    return Err(format!("token {t} head {h}: norm bits {nw:#x} vs {ng:#x}"));
                }
                a.norms_ulp += 1;
            }
            let xr: Vec<f32> = x[t * row + h * c.dim..][..c.dim]
                .iter()
                .map(|v| v.to_f32())
                .collect();
            let y = normalize_rotate(&xr, codec.head_signs(h), t, h)
                .expect("rotate")
                .y;
            let mut moved1 = vec![false; l.padded];
            let mut yv = y.clone();
            for (s, cb) in books.iter().enumerate() {
                let at = l.row_at(t, h, s);
                let (rw_want, rw_got) = (&want.0[at..at + rw], &got.0[at..at + rw]);
                for i in 0..l.padded {
                    let cw = kvpack::codecs::turboquant::layout::code_at(rw_want, i, l.bits);
                    let cg = kvpack::codecs::turboquant::layout::code_at(rw_got, i, l.bits);
                    a.codes += 1;
                    let nb = near(yv[i], &cb.boundaries);
                    a.boundary += usize::from(nb);
                    if cw != cg {
                        if s == 1 && moved1[i] {
                            a.excused += 1;
                        } else if cw.abs_diff(cg) == 1 && nb {
                            a.moved += 1;
                            moved1[i] = s == 0;
                        } else {
                            return Err(format!(
                                "token {t} head {h} stage {s} coordinate {i}: code {cw} vs {cg} (y = {}, not at a boundary)",
                                yv[i]
                            ));
                        }
                    }
                    if s == 0 {
                        yv[i] -= cb.centroids[cw];
                    }
                }
                // Padding bits of the row stay zero.
                let used = l.padded * l.bits as usize - (rw - 1) * 32;
                if used < 32 && rw_got[rw - 1] >> used != 0 {
                    return Err(format!("token {t} head {h} stage {s}: padding bits set"));
                }
            }
        }
    }
    Ok(a)
}

fn turboquant_kernels_match_reference(t: &Target) {
    let mut rng = common::rng("turboquant_kernels_match_reference");
    for c in cases() {
        let codec = codec(&c, 2);
        let l = *codec.layout();
        let x = inputs(&mut rng, &c);
        let want = reference(&codec, &c, &x);
        // The CPU target: the codec's words against the batch reference of the spec.
        if let Target::Cpu(_) = t {
            let xs: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
            let signs: Vec<f32> = (0..c.heads)
                .flat_map(|h| codec.head_signs(h).to_vec())
                .collect();
            let (codes, norms) = match c.variant {
                Variant::Mse => {
                    let m = kvpack::cpu::turboquant::turboquant_quant::quantize_mse(
                        &l.stage(),
                        &signs,
                        &xs,
                    )
                    .expect("mse");
                    (m.codes, m.norms)
                }
                Variant::Rvq => {
                    let m = kvpack::cpu::turboquant::turboquant_quant::quantize_rvq(
                        &l.stage(),
                        &signs,
                        &xs,
                    )
                    .expect("rvq");
                    (m.codes, m.norms)
                }
                other => panic!("no CPU quantizer for {other:?}"),
            };
            assert_eq!(want.0, codes, "{}: codes", c.what);
            for (i, n) in norms.iter().enumerate() {
                let w = want.1[(i / c.heads) * l.norm_words() + (i % c.heads) / 2];
                assert_eq!(
                    (w >> (16 * ((i % c.heads) % 2))) as u16,
                    n.to_bits(),
                    "{}: norm {i}",
                    c.what
                );
            }
            continue;
        }
        let got = quantize_on(t, &TURBOQUANT_QUANT, &codec, &c, &x);
        let exact = matches!(t, Target::MslEmulated(_));
        let a = agree(&codec, &c, &x, &want, &got, exact)
            .unwrap_or_else(|e| panic!("{} {}: {e}", t.name(), c.what));
        eprintln!(
            "turboquant_quant[{}] {}: {} codes, {} within 1e-5 of a boundary, {} moved by ±1 there, {} stage-2 codes excused, {} norms 1 ulp apart{}",
            t.name(),
            c.what,
            a.codes,
            a.boundary,
            a.moved,
            a.excused,
            a.norms_ulp,
            if exact { " (bit-identical)" } else { "" }
        );
        if !exact {
            assert!(a.boundary > 0, "{}: no boundary case was exercised", c.what);
        }
        // The reconstruction kernel over the reference's words: bit-identical.
        let mut plan = plan_dequant(&l, c.n, 1);
        plan.kernel = &TURBOQUANT_DEQUANT;
        let pad = |w: &[u32], per: usize| {
            let mut v = vec![POISON; per];
            v.extend_from_slice(w);
            v
        };
        let out_len = c.n * c.heads * c.dim;
        let mut bufs = vec![
            bytes(&pad(&want.0, l.code_words())),
            bytes(&pad(&want.1, l.norm_words())),
            bytes(codec.tables()),
            bytes(&vec![0x7fc0_0000u32; out_len]),
        ];
        run_plan(t, &plan, &mut bufs)
            .unwrap_or_else(|e| panic!("{} {}: dequant: {e}", t.name(), c.what));
        let got_x: Vec<f32> = bytemuck::pod_collect_to_vec(&bufs[3]);
        let words_ref = [want.0.as_slice(), want.1.as_slice()];
        let mut want_x = vec![0f32; out_len];
        codec.decode(&words_ref, c.n, &mut want_x).expect("decode");
        let bad = want_x
            .iter()
            .zip(&got_x)
            .position(|(a, b)| a.to_bits() != b.to_bits());
        assert!(
            bad.is_none(),
            "{} {}: dequant differs at {bad:?}: {:?} vs {:?}",
            t.name(),
            c.what,
            bad.map(|i| want_x[i]),
            bad.map(|i| got_x[i])
        );
    }
}
parity_tests!(turboquant_kernels_match_reference, msl, gl);

/// A copy of turboquant_quant with `from` replaced by `to` in the variant's source (which
/// must contain it), under a name of its own (a pipeline of its own).
fn planted(t: &Target, name: &str, from: &str, to: &str) -> Option<&'static KernelDef> {
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let full = leak(format!("turboquant_quant_planted_{name}"));
    let src = match t {
        Target::MslEmulated(_) => TURBOQUANT_QUANT.msl.expect("msl"),
        Target::Wgsl(_, PathChoice::WgslSubgroup) => {
            TURBOQUANT_QUANT.wgsl_subgroup.expect("subgroup")
        }
        _ => TURBOQUANT_QUANT.wgsl,
    };
    if !src.contains(from) {
        return None;
    }
    let body = leak(src.replace(from, to).replace(
        "kernel void turboquant_quant(",
        &format!("kernel void {full}("),
    ));
    Some(Box::leak(Box::new(KernelDef {
        name: full,
        wgsl_subgroup: TURBOQUANT_QUANT.wgsl_subgroup.map(|_| body),
        wgsl: body,
        msl: Some(body),
        ..clone_def(&TURBOQUANT_QUANT)
    })))
}

fn clone_def(d: &'static KernelDef) -> KernelDef {
    KernelDef {
        name: d.name,
        folder: d.folder,
        wgsl_common: d.wgsl_common,
        wgsl_subgroup: d.wgsl_subgroup,
        wgsl: d.wgsl,
        msl_common: d.msl_common,
        msl: d.msl,
        bindings: d.bindings,
        workgroup_size: d.workgroup_size,
    }
}

fn turboquant_planted_bugs_are_caught(t: &Target) {
    if let Target::Cpu(_) = t {
        return; // nothing planted in the reference
    }
    let mut rng = common::rng("turboquant_planted_bugs_are_caught");
    let plants: [(&str, &str, String, String); 3] = [
        (
            "barrier",
            "a missing barrier between the butterfly's reads and writes",
            "threadgroup_barrier(mem_flags::mem_threadgroup); // @tq-reads-before-writes".into(),
            "// barrier removed".into(),
        ),
        (
            "signs_after",
            "the signs applied after the transform instead of before",
            "// @tq-signs-before".into(),
            "".into(),
        ),
        (
            "pair_shift",
            "the odd lane's first bits one place off in its pair's middle word",
            "codes[pb + 1u] = w1 | (o0 << SH);".into(),
            "codes[pb + 1u] = w1 | (o0 << (SH + 1u));".into(),
        ),
    ];
    let mut caught = 0;
    for (name, what, from, to) in plants {
        // The WGSL spelling of the barrier; the sign call of each variant moved behind the passes.
        let (from, to) = match (name, t) {
            ("barrier", Target::Wgsl(..)) => (
                "workgroupBarrier(); // @tq-reads-before-writes".to_string(),
                to,
            ),
            ("signs_after", _) => {
                let src = match t {
                    Target::MslEmulated(_) => TURBOQUANT_QUANT.msl.expect("msl"),
                    Target::Wgsl(_, PathChoice::WgslSubgroup) => {
                        TURBOQUANT_QUANT.wgsl_subgroup.expect("subgroup")
                    }
                    _ => TURBOQUANT_QUANT.wgsl,
                };
                let line = src
                    .lines()
                    .find(|l| l.contains(&from))
                    .expect("a marked sign call")
                    .trim()
                    .to_string();
                let call = line.split("//").next().expect("call").trim().to_string();
                // Moving the call: delete it at its place, insert it at the marker after the passes.
                let def = planted_move(t, name, &line, &call);
                caught += run_plant(t, def, what, &mut rng);
                continue;
            }
            _ => (from, to),
        };
        match planted(t, name, &from, &to) {
            Some(def) => caught += run_plant(t, def, what, &mut rng),
            None => eprintln!(
                "turboquant planted[{}]: {what}: not applicable (not in this variant's source: the subgroup variant's butterflies are shuffles, no barrier; only it pairs lanes)",
                t.name()
            ),
        }
    }
    assert!(caught > 0, "{}: no planted bug ran", t.name());
}
parity_tests!(turboquant_planted_bugs_are_caught, msl);

/// turboquant_quant with the marked sign call `line` deleted and `call` put at
/// `// @tq-signs-after` (behind the butterflies).
fn planted_move(t: &Target, name: &str, line: &str, call: &str) -> &'static KernelDef {
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let full = leak(format!("turboquant_quant_planted_{name}"));
    let src = match t {
        Target::MslEmulated(_) => TURBOQUANT_QUANT.msl.expect("msl"),
        Target::Wgsl(_, PathChoice::WgslSubgroup) => {
            TURBOQUANT_QUANT.wgsl_subgroup.expect("subgroup")
        }
        _ => TURBOQUANT_QUANT.wgsl,
    };
    assert!(
        src.contains("// @tq-signs-after"),
        "no sign marker after the passes"
    );
    let body = leak(
        src.replace(line, "")
            .replace("// @tq-signs-after", call)
            .replace(
                "kernel void turboquant_quant(",
                &format!("kernel void {full}("),
            ),
    );
    Box::leak(Box::new(KernelDef {
        name: full,
        wgsl_subgroup: TURBOQUANT_QUANT.wgsl_subgroup.map(|_| body),
        wgsl: body,
        msl: Some(body),
        ..clone_def(&TURBOQUANT_QUANT)
    }))
}

/// Runs a planted kernel on the cases of D = 64 and 128 and requires a disagreement; returns 1.
fn run_plant(t: &Target, def: &'static KernelDef, what: &str, rng: &mut impl Rng) -> usize {
    let exact = matches!(t, Target::MslEmulated(_));
    let mut found = Vec::new();
    for c in cases().into_iter().filter(|c| c.dim == 64 || c.dim == 128) {
        let codec = codec(&c, 0);
        let x = inputs(rng, &c);
        let want = reference(&codec, &c, &x);
        let got = quantize_on(t, def, &codec, &c, &x);
        if let Err(e) = agree(&codec, &c, &x, &want, &got, exact) {
            found.push(format!("{}: {e}", c.what));
        }
    }
    eprintln!(
        "turboquant planted[{}]: {what}: caught in {:?}",
        t.name(),
        found
    );
    assert!(!found.is_empty(), "{}: {what} went unnoticed", t.name());
    1
}

/// A norm beyond f16 (every value finite in f16) is refused at entry on every path, whether
/// the token is quantized at once or would wait in the window, and nothing changes; bad bits
/// and D are typed errors.
fn turboquant_bad_input(t: &Target) {
    let (h, d) = (2, 64);
    for spec in [
        "turboquant-mse:bits=4",
        "kivi:bits=2/turboquant-rvq:bits=2,residual=64",
    ] {
        let mut l = Method::parse(spec)
            .and_then(|m| m.layer(t.ctx(), h, d, t.path()))
            .expect("layer");
        let good: Vec<f32> = (0..5 * h * d)
            .map(|i| ((i % 7) as f32 - 3.0) * 0.5)
            .collect();
        l.append(Input::F32(&good), Input::F32(&good))
            .expect("append");
        let before = (l.snapshot().expect("snapshot"), l.memory(), l.len());
        let mut big = good.clone();
        for v in &mut big[2 * h * d + d..2 * h * d + 2 * d] {
            *v = 60_000.0; // token 2, head 1: the norm is 480 000
        }
        let r = l.append(Input::F32(&good), Input::F32(&big));
        match &r {
            Err(Error::Config(m)) if m.contains("token 7, head 1") && m.contains("f16") => {}
            other => panic!("{} {spec}: {other:?}", t.name()),
        }
        let after = (l.snapshot().expect("snapshot"), l.memory(), l.len());
        assert!(after.0 == before.0, "{} {spec}: words changed", t.name());
        assert_eq!((after.1, after.2), (before.1, before.2));
        l.append(Input::F32(&good), Input::F32(&good))
            .expect("good append after");
    }
    for (spec, d) in [
        ("turboquant-mse:bits=0", 64),
        ("turboquant-rvq:bits=9", 64),
        ("turboquant-mse:bits=x", 64),
        ("turboquant-mse:seed=-1", 64),
        ("turboquant-mse:bits=4", 2),
    ] {
        let r = Method::parse(spec).and_then(|m| m.layer(t.ctx(), 2, d, t.path()));
        assert!(
            matches!(r, Err(Error::Config(_) | Error::BitsOutOfRange { .. })),
            "{spec} D={d}: {:?}",
            r.map(|_| ())
        );
    }
    if t.is_gpu() {
        // P = 2048: beyond what the GPU kernels hold, a typed error (the CPU path takes it).
        let r = Method::parse("turboquant-mse:bits=2")
            .and_then(|m| m.layer(t.ctx(), 1, 1500, t.path()));
        assert!(matches!(r, Err(Error::Limit { .. })), "{:?}", r.map(|_| ()));
    }
}
parity_tests!(turboquant_bad_input);

/// The kernel choice through a layer (see the module doc). The CPU path has one form and
/// ignores the choice (`AttendOptions::kernel`): there both answers must be equal.
fn turboquant_prefill_kernel_choice(t: &Target) {
    let (t_len, tq, hq, hkv, d) = (300, 6, 4, 2, 80);
    let mut rng = common::rng("turboquant_prefill_kernel_choice");
    let (q, k, v) = common::random_qkv(&mut rng, t_len, tq, hq, hkv, d);
    for spec in [
        "turboquant-mse:bits=3,residual=16",
        "f16/turboquant-rvq:bits=2,residual=16",
        "kivi:bits=4,group=32/turboquant-mse:bits=4",
    ] {
        let mut l = Method::parse(spec)
            .and_then(|m| m.layer(t.ctx(), hkv, d, t.path()))
            .expect("layer");
        l.append(Input::F32(&k), Input::F32(&v)).expect("append");
        let opts = |kernel| AttendOptions::default().kernel(kernel);
        let dec = l
            .attend(&q, hq, &opts(AttendKernel::Decode))
            .expect("decode kernel");
        let pre = l.attend(&q, hq, &opts(AttendKernel::Prefill));
        if t.is_gpu() && spec.starts_with("turboquant") {
            match pre {
                Err(Error::Config(m)) if m.contains("prefill") => {
                    eprintln!("{} {spec}: prefill refused: {m}", t.name());
                }
                other => panic!("{} {spec}: {:?}", t.name(), other.map(|_| ())),
            }
            let again = l
                .attend(&q, hq, &opts(AttendKernel::Auto))
                .expect("after the refusal");
            assert!(
                again == dec,
                "{} {spec}: the refusal changed the layer",
                t.name()
            );
            continue;
        }
        let pre = pre.unwrap_or_else(|e| panic!("{} {spec}: prefill: {e}", t.name()));
        let err = common::rel_l2_rows(&pre, &dec, d);
        eprintln!(
            "{} {spec}: prefill vs decode worst row rel L2 {err:e}",
            t.name()
        );
        if t.is_gpu() {
            assert!(err <= 1e-4, "{} {spec}: {err:e}", t.name());
        } else {
            assert!(
                pre == dec,
                "cpu {spec}: the CPU path ignores the kernel choice"
            );
        }
    }
}
parity_tests!(turboquant_prefill_kernel_choice);

#[test]
fn turboquant_method_grammar() {
    for (spec, canon) in [
        ("turboquant-mse:bits=3", "turboquant-mse:bits=3"),
        ("turboquant-mse", "turboquant-mse:bits=4"),
        ("turboquant-rvq", "turboquant-rvq:bits=2"),
        (
            "turboquant-mse:kbits=4,vbits=2",
            "turboquant-mse:bits=4/turboquant-mse:bits=2",
        ),
        (
            "turboquant-mse:bits=4/kivi:bits=2",
            "turboquant-mse:bits=4/kivi:bits=2,group=32,params=f16",
        ),
        (
            "turboquant-rvq:bits=1,seed=0x2a,residual=16",
            "turboquant-rvq:bits=1,seed=0x2a,residual=16",
        ),
        ("turboquant-mse:seed=42", "turboquant-mse:bits=4,seed=0x2a"),
    ] {
        let m = Method::parse(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        assert_eq!(m.to_string(), canon, "{spec}");
        assert_eq!(Method::parse(canon).expect("canonical").to_string(), canon);
    }
    let m = Method::parse("turboquant-mse:bits=3").expect("method");
    let g = Geometry::new(4, 64).expect("geometry");
    assert!(
        (m.bits_per_value(g) - 3.25).abs() < 1e-12,
        "3-bit MSE at D = 64 holds 3.25 bits"
    );
    assert_eq!(m.residual(), 0);
    for bad in [
        "turboquant-mse:vbits=2/f16",
        "turboquant-mse:group=32",
        "f16/turboquant-rvq:kbits=2",
    ] {
        assert!(matches!(Method::parse(bad), Err(Error::Config(_))), "{bad}");
    }
    assert!(kvpack::method::describe_methods().contains("turboquant-rvq"));
}

/// Each layer of a model draws its own signs (the spec's SplitMix64 state includes the layer):
/// the same tokens store other codes in layer 1 than in layer 0, the same in layer 0 twice.
#[test]
fn turboquant_layers_draw_their_own_signs() {
    let ctx = Context::cpu();
    let m = Method::parse("turboquant-mse:bits=4").expect("method");
    let x: Vec<f32> = (0..10 * 2 * 64)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
        .collect();
    let mut words = Vec::new();
    for index in [0, 1, 0] {
        let mut l = Layer::new_at(&ctx, index, 2, 64, &m, PathChoice::Cpu).expect("layer");
        l.append(Input::F32(&x), Input::F32(&x)).expect("append");
        words.push(l.snapshot().expect("snapshot"));
    }
    assert!(words[0] == words[2]);
    assert!(words[0].keys.streams[0] != words[1].keys.streams[0]);
    assert!(
        words[0].keys.streams[0] != words[0].values.streams[0],
        "keys and values use streams 0 and 1"
    );
    assert_eq!(
        words[0].keys.streams[1], words[1].keys.streams[1],
        "norms do not depend on the signs"
    );
}
