//! QJL keys on every path (../shared/spec/qjl.md), one body per path (the CPU reference's own
//! checks — unbiasedness over seeds on real keys, variance ∝ 1/m — are in tests/qjl_cpu.rs):
//!
//! - `qjl_encode` from its dispatch plans (inputs split between the residual ring and the
//!   incoming rows, a destination inside the segment, poisoned outputs: nothing outside the
//!   tokens written may change) against the CPU codec: the emulated MSL bit-identical; WGSL by
//!   the spec's rule (a sign may differ only where |(S k)_i| ≤ 1e-5·‖S_i‖·‖k‖, counted and
//!   printed; norms equal or 1 f16 ulp apart). Random keys and real SmolLM2 keys; D = 64, 80,
//!   128, 256; m = 32 and 96 (passes with rows past m), 64, 128, 512;
//! - planted bugs caught: the ballot's bit order reversed (subgroup variant, MSL), a sketch row
//!   skipped (each lane sums its neighbour's row), tail bits set (rows past m vote);
//! - bad input (a norm beyond f16) refused with nothing stored; the method grammar (keys only,
//!   m a multiple of 32); attention through a layer agrees with the CPU reference and a
//!   prefill-kernel request is a typed error.

mod common;

use common::{POISON, Target, run_plan};
use half::f16;
use kvpack::codec::Codec;
use kvpack::codecs::qjl::kernels::QJL_ENCODE;
use kvpack::codecs::qjl::plans::{EncodeFrom, plan_encode};
use kvpack::codecs::qjl::{QjlCodec, QjlSide};
use kvpack::gpu::registry::KernelDef;
use kvpack::store::Geometry;
use kvpack::{AttendKernel, AttendOptions, Error, Input, Method, PathChoice};
use rand::Rng;

struct Case {
    what: &'static str,
    heads: usize,
    dim: usize,
    m: usize,
    /// Tokens encoded: [Q_OLD, Q_OLD + n), of which the first `from_ring` from the ring.
    n: usize,
    from_ring: usize,
    seg_token: usize,
    /// Real SmolLM2 keys (layer 5 of story-512) instead of random ones.
    real: bool,
}

fn cases() -> Vec<Case> {
    let c = |what, heads, dim, m, n, from_ring, seg_token, real| Case {
        what,
        heads,
        dim,
        m,
        n,
        from_ring,
        seg_token,
        real,
    };
    vec![
        c(
            "random H=3 D=64 m=64, ring + incoming",
            3,
            64,
            64,
            21,
            5,
            3,
            false,
        ),
        c(
            "random H=2 D=80 m=96 (second pass: rows past m)",
            2,
            80,
            96,
            9,
            0,
            0,
            false,
        ),
        c(
            "random H=1 D=128 m=32 (lanes past m)",
            1,
            128,
            32,
            12,
            4,
            2,
            false,
        ),
        c("random H=2 D=256 m=512", 2, 256, 512, 3, 1, 1, false),
        c(
            "random H=3 D=72 m=160 (last row block past m; two tiles)",
            3,
            72,
            160,
            45,
            6,
            4,
            false,
        ),
        c("SmolLM2 keys H=3 D=64 m=64", 3, 64, 64, 40, 8, 5, true),
        c("SmolLM2 keys H=3 D=64 m=128", 3, 64, 128, 30, 0, 0, true),
    ]
}

const Q_OLD: usize = 7;

/// f16 keys `[n][H][D]`: real ones, or random with per-channel offsets, a zero key and a
/// large (f16-normed) one.
fn inputs(rng: &mut impl Rng, c: &Case) -> Option<Vec<f16>> {
    let row = c.heads * c.dim;
    if c.real {
        let path = common::shared_fixture("story-512.safetensors", "qjl_kernels")?;
        let (shape, k) = common::load_f16(&path, "k");
        assert_eq!((shape[2], shape[3]), (c.heads, c.dim));
        let layer = 5 * shape[1] * row;
        return Some(k[layer..layer + c.n * row].to_vec());
    }
    let offs: Vec<f32> = (0..row).map(|_| rng.random_range(-2.0..2.0)).collect();
    let mut x: Vec<f16> = (0..c.n * row)
        .map(|i| f16::from_f32(offs[i % row] + rng.random_range(-1.0f32..1.0)))
        .collect();
    for v in &mut x[row..2 * row] {
        *v = f16::ZERO;
    }
    if c.n > 2 {
        for (i, v) in x[2 * row..3 * row].iter_mut().enumerate() {
            *v = f16::from_f32(if i % 2 == 0 { 3000.0 } else { -2000.0 } / (c.dim as f32).sqrt());
        }
    }
    Some(x)
}

fn codec(c: &Case) -> QjlCodec {
    let cfg = QjlSide::new().m(c.m);
    QjlCodec::new(
        &kvpack::Context::cpu(),
        cfg,
        Geometry::new(c.heads, c.dim).expect("geometry"),
        0,
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

/// (signs, norms) of the tokens encoded.
type Stored = (Vec<u32>, Vec<u32>);

fn reference(codec: &QjlCodec, c: &Case, x: &[f16]) -> Stored {
    let row = c.heads * c.dim;
    let f = |t: usize, h: usize, d: usize| x[t * row + h * c.dim + d].to_f32();
    let mut out = vec![Vec::new(), Vec::new()];
    codec.encode(Q_OLD, c.n, &f, &mut out).expect("reference");
    (out[0].clone(), out[1].clone())
}

/// Runs `def` (qjl_encode or a planted copy) on `t`; the words of the tokens written, or
/// an error naming what was written outside them.
fn encode_on(
    t: &Target,
    def: &'static KernelDef,
    codec: &QjlCodec,
    c: &Case,
    x: &[f16],
) -> Result<Stored, String> {
    let l = codec.layout();
    let row = c.heads * c.dim;
    let rw = row.div_ceil(2);
    let rows = kvpack::store::input::f16_rows_to_words(row, x);
    let t_old = Q_OLD + c.from_ring;
    let cap = c.from_ring + 3;
    let mut ring = vec![0x7e00_7e00u32; cap * rw];
    for s in Q_OLD..t_old {
        ring[(s % cap) * rw..][..rw].copy_from_slice(&rows[(s - Q_OLD) * rw..][..rw]);
    }
    let incoming = rows[c.from_ring * rw..].to_vec();
    let total = c.seg_token + c.n + 2;
    let (sw, nw) = (c.heads * l.sign_words(), c.heads.div_ceil(2));
    let mut plan = plan_encode(
        l,
        c.n,
        EncodeFrom {
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
        bytes(&vec![POISON; total * sw]),
        bytes(&vec![POISON; total * nw]),
        bytes(codec.tables()),
    ];
    run_plan(t, &plan, &mut bufs).map_err(|e| format!("the run failed: {e}"))?;
    let (s, n) = (words(&bufs[2]), words(&bufs[3]));
    let (a, b) = (c.seg_token, c.seg_token + c.n);
    for (name, w, per) in [("signs", &s, sw), ("norms", &n, nw)] {
        if !w[..a * per]
            .iter()
            .chain(&w[b * per..])
            .all(|&x| x == POISON)
        {
            return Err(format!("{name} written outside tokens [{a}, {b})"));
        }
    }
    Ok((s[a * sw..b * sw].to_vec(), n[a * nw..b * nw].to_vec()))
}

/// The spec's agreement rule; `exact`: every word equal. Ok(sign bits excused near zero).
fn agree(
    codec: &QjlCodec,
    c: &Case,
    x: &[f16],
    want: &Stored,
    got: &Stored,
    exact: bool,
) -> Result<usize, String> {
    let l = codec.layout();
    if exact {
        if want != got {
            return Err("words differ (the emulated MSL must be bit-identical)".into());
        }
        return Ok(0);
    }
    for (i, (a, b)) in want.1.iter().zip(&got.1).enumerate() {
        for half in 0..2 {
            let (x, y) = ((a >> (16 * half)) & 0xffff, (b >> (16 * half)) & 0xffff);
            if x.abs_diff(y) > 1 {
                return Err(format!("norm word {i}: {x:#x} vs {y:#x}"));
            }
        }
    }
    let s = codec.sketch();
    let mut excused = 0;
    for (key, (wr, gr)) in want
        .0
        .chunks(l.sign_words())
        .zip(got.0.chunks(l.sign_words()))
        .enumerate()
    {
        let k: Vec<f64> = x[key * c.dim..][..c.dim]
            .iter()
            .map(|v| f64::from(v.to_f32()))
            .collect();
        let kn = k.iter().map(|v| v * v).sum::<f64>().sqrt();
        for i in 0..l.m {
            if (wr[i / 32] ^ gr[i / 32]) >> (i % 32) & 1 == 0 {
                continue;
            }
            let srow = &s[i * c.dim..][..c.dim];
            let dot: f64 = srow.iter().zip(&k).map(|(a, b)| f64::from(*a) * b).sum();
            let sn = srow
                .iter()
                .map(|a| f64::from(*a).powi(2))
                .sum::<f64>()
                .sqrt();
            if dot.abs() > 1e-5 * sn * kn {
                return Err(format!(
                    "key {key} (token·head) sign {i}: (S k)_i = {dot:e} is not near 0"
                ));
            }
            excused += 1;
        }
    }
    Ok(excused)
}

fn qjl_kernels_match_reference(t: &Target) {
    let mut rng = common::rng("qjl_kernels_match_reference");
    let exact = matches!(t, Target::MslEmulated(_));
    for c in cases() {
        let Some(x) = inputs(&mut rng, &c) else {
            continue;
        };
        let codec = codec(&c);
        let want = reference(&codec, &c, &x);
        if let Target::Cpu(_) = t {
            // The codec against the CPU reference function (its own tests: tests/qjl_cpu.rs).
            let keys: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
            let r = kvpack::cpu::qjl::qjl_encode::qjl_encode(codec.layout(), codec.sketch(), &keys)
                .expect("reference function");
            assert_eq!(want.0, r.signs, "{}: signs", c.what);
            let nw: Vec<f16> = (0..c.n * c.heads)
                .map(|i| {
                    f16::from_bits(
                        (want.1[i / c.heads * c.heads.div_ceil(2) + (i % c.heads) / 2]
                            >> (16 * (i % c.heads % 2))) as u16,
                    )
                })
                .collect();
            assert_eq!(nw, r.norms, "{}: norms", c.what);
            continue;
        }
        let got = encode_on(t, &QJL_ENCODE, &codec, &c, &x)
            .unwrap_or_else(|e| panic!("qjl_encode[{}] {}: {e}", t.name(), c.what));
        match agree(&codec, &c, &x, &want, &got, exact) {
            Ok(n) => eprintln!(
                "qjl_encode[{}] {}: agrees ({n} sign bits excused near 0)",
                t.name(),
                c.what
            ),
            Err(e) => panic!("qjl_encode[{}] {}: {e}", t.name(), c.what),
        }
    }
}
parity_tests!(qjl_kernels_match_reference, msl);

/// A copy of qjl_encode with `from` replaced by `to` in the variant's source or its shared
/// WGSL declarations; `None` where neither has it.
fn planted(t: &Target, name: &str, from: &str, to: &str) -> Option<&'static KernelDef> {
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let full = leak(format!("qjl_encode_planted_{name}"));
    let d = &QJL_ENCODE;
    let msl = matches!(t, Target::MslEmulated(_));
    let body = match t {
        Target::MslEmulated(_) => d.msl.expect("msl"),
        Target::Wgsl(_, PathChoice::WgslSubgroup) => d.wgsl_subgroup.expect("subgroup"),
        _ => d.wgsl,
    };
    let common: Vec<&'static str> = d
        .wgsl_common
        .iter()
        .map(|s| leak(s.replace(from, to)))
        .collect();
    let in_common = !msl && d.wgsl_common.iter().any(|s| s.contains(from));
    if !body.contains(from) && !in_common {
        return None;
    }
    let body = leak(
        body.replace(from, to)
            .replace("kernel void qjl_encode(", &format!("kernel void {full}(")),
    );
    Some(Box::leak(Box::new(KernelDef {
        name: full,
        folder: d.folder,
        wgsl_common: Box::leak(common.into_boxed_slice()),
        wgsl_subgroup: d.wgsl_subgroup.map(|_| body),
        wgsl: body,
        msl_common: d.msl_common,
        msl: Some(body),
        bindings: d.bindings,
        workgroup_size: d.workgroup_size,
    })))
}

fn qjl_planted_bugs_are_caught(t: &Target) {
    if let Target::Cpu(_) = t {
        eprintln!("qjl planted bugs: the CPU reference has no kernel to plant in");
        return;
    }
    let mut rng = common::rng("qjl_planted_bugs_are_caught");
    let plants = [
        (
            "ballot_reversed",
            "var bits = b[k]; // @qjl-ballot",
            "var bits = reverseBits(b[k]) >> (32u - width); // @qjl-ballot",
        ),
        (
            "ballot_reversed",
            "uint(ulong(simd_ballot(bit)) & 0xffffffffu); // @qjl-ballot",
            "reverse_bits(uint(ulong(simd_ballot(bit)) & 0xffffffffu)); // @qjl-ballot",
        ),
        (
            "row_skipped",
            "min(rb * QRB + r, QM - 1u); // @qjl-row",
            "min(rb * QRB + r + 1u, QM - 1u); // @qjl-row",
        ),
        (
            "row_skipped",
            "min(rb * QRB + e % QRB, QM - 1u); // @qjl-row",
            "min(rb * QRB + e % QRB + 1u, QM - 1u); // @qjl-row",
        ),
        (
            "tail_stored",
            "if (live && w < QSW && t0 + t < P.count) { // @qjl-tail",
            "if (live) { // @qjl-tail",
        ),
    ];
    let mut caught = Vec::new();
    for (name, from, to) in plants {
        let Some(def) = planted(t, name, from, to) else {
            continue;
        };
        let mut found = Vec::new();
        for c in cases().into_iter().filter(|c| !c.real && c.m <= 160) {
            let Some(x) = inputs(&mut rng, &c) else {
                continue;
            };
            let codec = codec(&c);
            let want = reference(&codec, &c, &x);
            let got = match encode_on(t, def, &codec, &c, &x) {
                Ok(got) => got,
                Err(e) => {
                    found.push(format!("{}: {e}", c.what));
                    continue;
                }
            };
            if let Err(e) = agree(
                &codec,
                &c,
                &x,
                &want,
                &got,
                matches!(t, Target::MslEmulated(_)),
            ) {
                found.push(format!("{}: {e}", c.what));
            }
        }
        eprintln!("qjl planted[{}] {name}: caught in {found:?}", t.name());
        assert!(
            !found.is_empty(),
            "{}: planted {name} went unnoticed",
            t.name()
        );
        caught.push(name);
    }
    let mut want = vec!["row_skipped", "tail_stored"];
    if !matches!(t, Target::Wgsl(_, PathChoice::WgslWorkgroup)) {
        want.push("ballot_reversed");
    }
    for w in want {
        assert!(
            caught.contains(&w),
            "{}: the {w} plant found no marked line",
            t.name()
        );
    }
}
parity_tests!(qjl_planted_bugs_are_caught, msl);

/// A key norm beyond f16 is refused at entry with nothing stored, on every path.
fn qjl_bad_input(t: &Target) {
    let (h, d) = (2, 64);
    let mut l = Method::parse("qjl:m=64/kivi:bits=4,group=32,residual=32")
        .and_then(|m| m.layer(t.ctx(), h, d, t.path()))
        .expect("layer");
    let good: Vec<f32> = (0..40 * h * d)
        .map(|i| ((i % 7) as f32 - 3.0) * 0.5)
        .collect();
    l.append(Input::F32(&good), Input::F32(&good))
        .expect("append");
    let before = (l.snapshot().expect("snapshot"), l.memory(), l.len());
    let mut big = good[..5 * h * d].to_vec();
    for v in &mut big[2 * h * d + d..2 * h * d + 2 * d] {
        *v = 60_000.0;
    }
    let r = l.append(Input::F32(&big), Input::F32(&good[..5 * h * d]));
    match &r {
        Err(Error::Config(m)) if m.contains("token 42, head 1") && m.contains("f16") => {}
        other => panic!("{}: {other:?}", t.name()),
    }
    let after = (l.snapshot().expect("snapshot"), l.memory(), l.len());
    assert!(after.0 == before.0, "{}: words changed", t.name());
    assert_eq!((after.1, after.2), (before.1, before.2));
}
parity_tests!(qjl_bad_input);

/// Attention through a layer: QJL keys with KIVI / TurboQuant values against the CPU
/// reference over the same stored words (1e-4 per row), SmolLM2 q/k/v; the prefill kernel is
/// refused with a typed error. On the GPU targets both forms of the score hook: the nibble
/// table where the device's workgroup storage holds it, and masked sums on a context lowered
/// to WebGPU's default 16 KiB (where the table of m ≥ 64 at D = 64 does not fit); each layer's
/// `describe()` must name the form it runs. (The MSL twins of both forms run on the emulator
/// in tests/attend_kernels.rs: a layer cannot run on it.)
fn qjl_attention(t: &Target) {
    qjl_attention_on(t, t.ctx(), None);
    if t.is_gpu() {
        let small = t
            .ctx()
            .with_max_workgroup_storage_size(16 * 1024)
            .expect("lowered limit");
        qjl_attention_on(t, &small, Some("masked sums"));
    }
}

fn qjl_attention_on(t: &Target, ctx: &kvpack::Context, form: Option<&str>) {
    let Some(path) = common::shared_fixture("story-512.safetensors", "qjl_attention") else {
        return;
    };
    let (shape, k) = common::load_f16(&path, "k");
    let (_, v) = common::load_f16(&path, "v");
    let (qshape, q) = common::load_f16(&path, "q");
    let (tn, h, d, hq) = (shape[1], shape[2], shape[3], qshape[2]);
    let layer = 3;
    let kv = |x: &[f16]| -> Vec<f32> {
        x[layer * tn * h * d..][..tn * h * d]
            .iter()
            .map(|v| v.to_f32())
            .collect()
    };
    let (k, v) = (kv(&k), kv(&v));
    let qs: Vec<f32> = q[(layer * qshape[1] + tn - 4) * hq * d..][..4 * hq * d]
        .iter()
        .map(|v| v.to_f32())
        .collect();
    for spec in [
        "qjl:m=64/kivi:bits=4,group=32,residual=32",
        "qjl:m=128/turboquant-mse:bits=4",
        "qjl/f16:residual=100",
    ] {
        let mut l = Method::parse(spec)
            .and_then(|m| m.layer(ctx, h, d, t.path()))
            .expect("layer");
        let described = l.describe();
        if t.path() != PathChoice::Cpu {
            // The default limit of every device kvpack runs on holds the table at D = 64.
            let want = form.unwrap_or("nibble table");
            assert!(
                described.contains(want),
                "{} {spec}: expected the {want} form: {described}",
                t.name()
            );
        }
        l.append(Input::F32(&k[..300 * h * d]), Input::F32(&v[..300 * h * d]))
            .expect("append");
        l.append(Input::F32(&k[300 * h * d..]), Input::F32(&v[300 * h * d..]))
            .expect("append");
        let opts = AttendOptions::default();
        let got = l.attend(&qs, hq, &opts).expect("attend");
        let want = l.attend_reference(&qs, hq, &opts).expect("reference");
        let err = common::rel_l2_rows(&got, &want, d);
        eprintln!(
            "qjl attention[{}] {spec} ({described}): worst row rel L2 {err:e}",
            t.name()
        );
        assert!(err <= 1e-4, "{} {spec}: {err:e}", t.name());
        if t.is_gpu() {
            let r = l.attend(&qs, hq, &opts.kernel(AttendKernel::Prefill));
            assert!(
                matches!(r, Err(Error::Config(_))),
                "{} {spec}: prefill {:?}",
                t.name(),
                r.map(|_| ())
            );
        }
    }
}
parity_tests!(qjl_attention);

#[test]
fn qjl_method_grammar() {
    for (spec, canon) in [
        ("qjl/kivi:bits=4", "qjl/kivi:bits=4,group=32,params=f16"),
        (
            "qjl:m=128/turboquant-mse:bits=4",
            "qjl:m=128/turboquant-mse:bits=4",
        ),
    ] {
        let m = Method::parse(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        assert_eq!(m.to_string(), canon, "{spec}");
        assert!(!m.key().reconstructs());
    }
    for bad in [
        "qjl",
        "qjl:m=64",
        "kivi/qjl",
        "qjl:m=48/f16",
        "qjl:m=0/f16",
        "qjl:bits=2/f16",
    ] {
        match Method::parse(bad) {
            Err(Error::Config(m)) => eprintln!("{bad}: {m}"),
            other => panic!("{bad}: {:?}", other.map(|m| m.to_string())),
        }
    }
    let g = Geometry::new(3, 64).expect("geometry");
    let m = Method::parse("qjl:m=64/f16").expect("method");
    assert!((m.key().bits_per_value(g) - 80.0 / 64.0).abs() < 1e-12);
    // A layer without a key reconstruction: the values still reconstruct, the keys refuse.
    let ctx = kvpack::Context::cpu();
    let mut l = m.layer(&ctx, 3, 64, PathChoice::Cpu).expect("layer");
    let x: Vec<f32> = (0..5 * 3 * 64).map(|i| (i % 11) as f32 * 0.1).collect();
    l.append(Input::F32(&x), Input::F32(&x)).expect("append");
    assert!(matches!(
        l.reconstruct_side(kvpack::store::Side::Keys),
        Err(Error::Config(_))
    ));
    assert_eq!(
        l.reconstruct_side(kvpack::store::Side::Values)
            .expect("values")
            .len(),
        x.len()
    );
}
