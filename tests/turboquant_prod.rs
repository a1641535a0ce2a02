//! TurboQuant-Prod keys as a cache method (`turboquant-prod:bits=B`, ../shared/spec/
//! turboquant.md "TurboQuant-Prod"). The reference functions' own checks are in
//! tests/turboquant_cpu.rs; this file checks the codec against them, and the fused encode
//! kernel `turboquant_prod_quant` against the codec on every path (cpu, both WGSL variants,
//! the emulated MSL: bit-identical there, the spec's agreement rules on a GPU) on random and
//! SmolLM2 keys, with planted bugs (the sketch of u instead of r, ρ written from n) caught.
//! GPU attention on Prod keys: tests/attend_kernels.rs, tests/mutants.rs.
//!
//! - the codec's stored words (stage-1 codes, sign rows, n, ρ) equal `quantize_prod`'s, and
//!   its score hook equals `prod_score` bit for bit, on real SmolLM2 keys;
//! - its scores are unbiased over 200 seeds on real keys (mean within 3 standard errors),
//!   where the MSE stage alone is not (printed);
//! - attention through a layer (Prod keys, TurboQuant-MSE values) equals a softmax over the
//!   reference scores with the reconstructed values;
//! - memory (the sketch and codebook counted as tables), bad input refused with nothing
//!   stored, the method grammar.

mod common;

use common::{POISON, Target, run_plan};
use half::f16;
use kvpack::codec::Codec;
use kvpack::codecs::turboquant::kernels::TURBOQUANT_PROD_QUANT;
use kvpack::codecs::turboquant::plans::{QuantSource, plan_prod_quant};
use kvpack::codecs::turboquant::{ProdCodec, ProdSide};
use kvpack::cpu::common::splitmix::DEFAULT_SEED;
use kvpack::cpu::turboquant::layout::ProdLayout;
use kvpack::cpu::turboquant::score::{ProdKey, prepare_query, prepare_sketch_query, prod_score};
use kvpack::cpu::turboquant::turboquant_quant::normalize_rotate;
use kvpack::cpu::turboquant::turboquant_quant::quantize_prod;
use kvpack::gpu::registry::KernelDef;
use kvpack::store::Geometry;
use kvpack::{AttendOptions, Context, Error, Input, Method, PathChoice};

const H: usize = 3;
const D: usize = 64;

/// T, then keys, values `[T][3][64]` and queries `[T][9][64]` of one layer, f32.
type Layer = (usize, Vec<f32>, Vec<f32>, Vec<f32>);

/// One SmolLM2 layer of story-512 ([`Layer`]), or `None` after a visible skip.
fn smollm2(layer: usize, test: &str) -> Option<Layer> {
    let path = common::shared_fixture("story-512.safetensors", test)?;
    let (shape, k) = common::load_f16(&path, "k");
    let (_, v) = common::load_f16(&path, "v");
    let (qs, q) = common::load_f16(&path, "q");
    let t = shape[1];
    assert_eq!((shape[2], shape[3], qs[2]), (H, D, 9));
    let f = |x: &[f16], w: usize| -> Vec<f32> {
        x[layer * t * w * D..][..t * w * D]
            .iter()
            .map(|v| v.to_f32())
            .collect()
    };
    Some((t, f(&k, H), f(&v, H), f(&q, 9)))
}

fn codec(bits: u32, m: Option<usize>, seed: u64, layer: usize) -> ProdCodec {
    ProdCodec::new(
        &Context::cpu(),
        ProdSide::new(bits).m(m).seed(seed),
        Geometry::new(H, D).expect("geometry"),
        layer,
        PathChoice::Cpu,
    )
    .expect("prod codec")
}

/// The codec's streams for tokens `[0, n)` of `k`.
fn encode(c: &ProdCodec, k: &[f32], n: usize) -> Vec<Vec<u32>> {
    let mut out = vec![Vec::new(); 4];
    c.encode(0, n, &|t, h, d| k[(t * H + h) * D + d], &mut out)
        .expect("encode");
    out
}

fn half_at(words: &[u32], i: usize) -> f16 {
    let nw = H.div_ceil(2);
    f16::from_bits((words[(i / H) * nw + (i % H) / 2] >> (16 * (i % H % 2))) as u16)
}

#[test]
fn prod_codec_matches_reference() {
    let Some((_, k, _, q)) = smollm2(5, "prod_codec_matches_reference") else {
        return;
    };
    let n = 40;
    for (bits, m) in [(2, None), (3, None), (4, Some(128)), (3, Some(32))] {
        let c = codec(bits, m, DEFAULT_SEED, 5);
        let l = *c.layout();
        let signs: Vec<f32> = (0..H).flat_map(|h| c.head_signs(h).to_vec()).collect();
        let want = quantize_prod(&l, &signs, c.sketch(), &k[..n * H * D]).expect("reference");
        let got = encode(&c, &k, n);
        assert_eq!(got[0], want.codes, "bits={bits} m={m:?}: codes");
        assert_eq!(got[1], want.signs, "bits={bits} m={m:?}: sign rows");
        for i in 0..n * H {
            assert_eq!(half_at(&got[2], i), want.norms[i], "norm {i}");
            assert_eq!(half_at(&got[3], i), want.residual_norms[i], "rho {i}");
        }
        let words: Vec<&[u32]> = got.iter().map(|w| w.as_slice()).collect();
        let (rw, sw) = (l.stage1.row_words(), l.sign_words());
        let (mut prep, mut scratch, mut out) = (Vec::new(), Vec::new(), [0f32]);
        for (tq, hq) in [(39, 0), (20, 4), (7, 8)] {
            let qv = &q[(tq * 9 + hq) * D..][..D];
            let h = hq / 3;
            c.prepare_query(h, qv, &mut prep);
            let q_rot = prepare_query(qv, c.head_signs(h)).unwrap();
            let sq = prepare_sketch_query(qv, c.sketch(), l.m).unwrap();
            assert_eq!(prep, [q_rot.clone(), sq.clone()].concat(), "prepared query");
            for j in 0..n {
                let i = j * H + h;
                c.score(
                    &words,
                    std::slice::from_ref(&prep),
                    j,
                    h,
                    &mut scratch,
                    &mut out,
                );
                let key = ProdKey {
                    row: &want.codes[i * rw..][..rw],
                    signs: &want.signs[i * sw..][..sw],
                    norm_st: want.norms[i],
                    residual_norm_st: want.residual_norms[i],
                };
                let r = prod_score(&q_rot, &sq, key, c.codebook()).unwrap();
                assert_eq!(out[0].to_bits(), r.to_bits(), "bits={bits}: score j={j}");
            }
        }
    }
}

fn mean_se(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, (var / n).sqrt())
}

/// Over 200 seeds (key signs and sketch both redrawn) the codec's score of a real key has
/// mean ⟨q, k⟩ within 3 standard errors; the MSE stage alone (scores with ρ = 0) is shrunk.
#[test]
fn prod_scores_unbiased_over_seeds() {
    let Some((_, k, _, q)) = smollm2(10, "prod_scores_unbiased_over_seeds") else {
        return;
    };
    for (bits, tq, hq, tk) in [(2, 516, 4, 516), (3, 300, 2, 120), (2, 100, 6, 99)] {
        let h = hq / 3;
        let kv = &k[(tk * H + h) * D..][..D];
        let qv = &q[(tq * 9 + hq) * D..][..D];
        let truth: f64 = kv
            .iter()
            .zip(qv)
            .map(|(&a, &b)| f64::from(f16::from_f32(a).to_f32()) * f64::from(b))
            .sum();
        let (mut prod, mut mse) = (Vec::new(), Vec::new());
        for s in 0..200u64 {
            let c = codec(bits, None, 1000 + s, 10);
            let row: Vec<f32> = (0..H).flat_map(|_| kv.to_vec()).collect();
            let mut w = encode(&c, &row, 1);
            let words: Vec<&[u32]> = w.iter().map(|x| x.as_slice()).collect();
            let (mut prep, mut scratch, mut out) = (Vec::new(), Vec::new(), [0f32]);
            c.prepare_query(h, qv, &mut prep);
            c.score(
                &words,
                std::slice::from_ref(&prep),
                0,
                h,
                &mut scratch,
                &mut out,
            );
            prod.push(f64::from(out[0]));
            w[3].fill(0); // ρ = 0: the MSE stage's score alone
            let words: Vec<&[u32]> = w.iter().map(|x| x.as_slice()).collect();
            c.score(
                &words,
                std::slice::from_ref(&prep),
                0,
                h,
                &mut scratch,
                &mut out,
            );
            mse.push(f64::from(out[0]));
        }
        let (pm, pse) = mean_se(&prod);
        let (mm, mse_se) = mean_se(&mse);
        eprintln!(
            "prod bits={bits} ⟨q,k⟩ = {truth:.4}: Prod mean {pm:.4} ± {pse:.4} (se); \
             MSE stage ({}-bit) mean {mm:.4} ± {mse_se:.4}",
            bits - 1
        );
        assert!(
            (pm - truth).abs() <= 3.0 * pse,
            "bits={bits}: Prod mean {pm} vs {truth}, 3 se = {}",
            3.0 * pse
        );
    }
}

/// Attention through a layer (Prod keys, MSE values, one query row at the last position, all
/// keys visible) equals softmax(scores / √D) · V̂ with the reference scores of
/// `quantize_prod`'s codes and the layer's reconstructed values (1e-4 per row).
#[test]
fn prod_layer_attention_matches_reference_scores() {
    let Some((t, k, v, q)) = smollm2(3, "prod_layer_attention") else {
        return;
    };
    let ctx = Context::cpu();
    let mut l = Method::parse("turboquant-prod:bits=3/turboquant-mse:bits=3")
        .and_then(|m| m.layer(&ctx, H, D, PathChoice::Cpu))
        .expect("layer");
    l.append(Input::F32(&k[..200 * H * D]), Input::F32(&v[..200 * H * D]))
        .expect("append");
    l.append(Input::F32(&k[200 * H * D..]), Input::F32(&v[200 * H * D..]))
        .expect("append");
    let qs = &q[(t - 1) * 9 * D..][..9 * D];
    let got = l.attend(qs, 9, &AttendOptions::default()).expect("attend");
    let c = codec(3, None, DEFAULT_SEED, 0);
    let pl = *c.layout();
    let signs: Vec<f32> = (0..H).flat_map(|h| c.head_signs(h).to_vec()).collect();
    let codes = quantize_prod(&pl, &signs, c.sketch(), &k).expect("reference");
    let vhat = l
        .reconstruct_side(kvpack::store::Side::Values)
        .expect("values");
    let (rw, sw) = (pl.stage1.row_words(), pl.sign_words());
    let mut want = vec![0f32; 9 * D];
    for hq in 0..9 {
        let (h, qv) = (hq / 3, &qs[hq * D..][..D]);
        let q_rot = prepare_query(qv, c.head_signs(h)).unwrap();
        let sq = prepare_sketch_query(qv, c.sketch(), pl.m).unwrap();
        let s: Vec<f64> = (0..t)
            .map(|j| {
                let i = j * H + h;
                let key = ProdKey {
                    row: &codes.codes[i * rw..][..rw],
                    signs: &codes.signs[i * sw..][..sw],
                    norm_st: codes.norms[i],
                    residual_norm_st: codes.residual_norms[i],
                };
                f64::from(prod_score(&q_rot, &sq, key, c.codebook()).unwrap()) / (D as f64).sqrt()
            })
            .collect();
        let mx = s.iter().cloned().fold(f64::MIN, f64::max);
        let e: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
        let z: f64 = e.iter().sum();
        for d in 0..D {
            let acc: f64 = (0..t)
                .map(|j| e[j] * f64::from(vhat[(j * H + h) * D + d]))
                .sum();
            want[hq * D + d] = (acc / z) as f32;
        }
    }
    let err = common::rel_l2_rows(&got, &want, D);
    eprintln!("prod layer attention: worst row rel L2 {err:e}");
    assert!(err <= 1e-4, "{err:e}");
}

#[test]
fn prod_memory_bad_input_and_paths() {
    let ctx = Context::cpu();
    let method = Method::parse("turboquant-prod:bits=4/turboquant-mse:bits=4").expect("method");
    let mut l = method.layer(&ctx, H, D, PathChoice::Cpu).expect("layer");
    let n = 10;
    let k: Vec<f32> = (0..n * H * D)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0)
        .collect();
    l.append(Input::F32(&k), Input::F32(&k)).expect("append");
    let m = l.memory();
    let pl = ProdLayout::new(H, D, 4, None).unwrap();
    let sketch_bytes = (pl.m * 64 * 4) as u64;
    // Key tables: the sketch, the key signs and the 3-bit codebook (and the values' own).
    let key_tables = sketch_bytes + (H * 2 * 4) as u64 + (2 * 8 * 4) as u64;
    assert!(
        m.held.tables >= key_tables,
        "tables {} < {key_tables}",
        m.held.tables
    );
    let per_token = (H * (pl.stage1.row_words() + pl.sign_words()) * 4) as u64;
    assert_eq!(m.payload.key_codes, n as u64 * per_token, "key codes");
    assert_eq!(m.payload.key_params, n as u64 * 2 * 2 * 4, "n and ρ");
    // A key whose norm f16 cannot hold: refused, nothing stored.
    let before = (l.snapshot().expect("snapshot"), l.memory(), l.len());
    let mut big = k.clone();
    big[(3 * H + 1) * D..][..D].fill(60000.0);
    match l.append(Input::F32(&big), Input::F32(&k)) {
        Err(Error::Config(msg)) if msg.contains("f16") => {}
        other => panic!("{:?}", other.map(|_| ())),
    }
    let after = (l.snapshot().expect("snapshot"), l.memory(), l.len());
    assert!(after.0 == before.0, "words changed");
    assert_eq!((after.1, after.2), (before.1, before.2));
    // Reconstruction is the MSE stage's (both sides reconstruct).
    let (rk, _) = l.reconstruct().expect("reconstruct");
    assert_eq!(rk.len(), n * H * D);
    // GPU paths on a CPU-only context: a typed error (the kernels exist; no device here).
    for p in [PathChoice::Wgsl, PathChoice::WgslSubgroup, PathChoice::Msl] {
        let r = method.layer(&ctx, H, D, p);
        assert!(r.is_err(), "{p:?}: a GPU path on a CPU context");
    }
}

#[test]
fn prod_method_grammar() {
    for (spec, canon) in [
        (
            "turboquant-prod:bits=3/turboquant-mse:bits=3",
            "turboquant-prod:bits=3/turboquant-mse:bits=3",
        ),
        (
            "turboquant-prod:bits=4,m=128,residual=128/kivi:bits=4",
            "turboquant-prod:bits=4,m=128/kivi:bits=4,group=32,params=f16",
        ),
    ] {
        let m = Method::parse(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        eprintln!("{spec} -> {m}");
        assert_eq!(m.to_string(), canon, "{spec}");
        assert_eq!(Method::parse(&m.to_string()).unwrap(), m);
    }
    for bad in [
        "turboquant-prod:bits=3",
        "f16/turboquant-prod:bits=3",
        "turboquant-prod:bits=1/f16",
        "turboquant-prod:bits=9/f16",
        "turboquant-prod:bits=3,m=40/f16",
        "turboquant-prod:bits=3,vbits=2/f16",
    ] {
        match Method::parse(bad) {
            Err(Error::Config(msg)) => eprintln!("{bad}: {msg}"),
            Err(Error::BitsOutOfRange { .. }) => eprintln!("{bad}: bits out of range"),
            other => panic!("{bad}: {other:?}"),
        }
    }
}

// ---- turboquant_prod_quant on every path (the kernel against the CPU reference) ----

/// One kernel case: geometry, bits, m, tokens from the ring and the incoming rows, the
/// destination token in the segment; `real`: SmolLM2 keys (layer 5, H = 3, D = 64).
struct KCase {
    what: &'static str,
    heads: usize,
    dim: usize,
    bits: u32,
    m: Option<usize>,
    n: usize,
    from_ring: usize,
    seg_token: usize,
    real: bool,
}

fn kcases() -> Vec<KCase> {
    let base = KCase {
        what: "",
        heads: 3,
        dim: 64,
        bits: 3,
        m: None,
        n: 9,
        from_ring: 3,
        seg_token: 2,
        real: false,
    };
    vec![
        KCase {
            what: "random D=64 H=3 bits=3 (2-bit stage 1), m=64, ring + incoming",
            ..base
        },
        KCase {
            what: "random D=64 bits=2 (1-bit stage 1), m=32",
            bits: 2,
            m: Some(32),
            ..base
        },
        KCase {
            what: "random D=80 (P=128) H=2 bits=4, m=96 (a partial pass)",
            heads: 2,
            dim: 80,
            bits: 4,
            m: Some(96),
            ..base
        },
        KCase {
            what: "random D=3 (P=4) H=1 bits=2",
            heads: 1,
            dim: 3,
            bits: 2,
            ..base
        },
        KCase {
            what: "random D=512 (P beyond a workgroup) H=1 bits=5, m=512",
            heads: 1,
            dim: 512,
            bits: 5,
            n: 4,
            ..base
        },
        KCase {
            what: "SmolLM2 keys layer 5, bits=4, m=128",
            bits: 4,
            m: Some(128),
            n: 40,
            from_ring: 5,
            real: true,
            ..base
        },
        KCase {
            what: "SmolLM2 keys layer 5, bits=3, m=64",
            n: 40,
            from_ring: 0,
            seg_token: 0,
            real: true,
            ..base
        },
    ]
}

/// Keys `[n][H][D]` f16 of a case: random (offsets per channel, a zero token, a large one) or
/// SmolLM2's; `None` after a visible skip.
fn kinputs(rng: &mut impl rand::Rng, c: &KCase) -> Option<Vec<f16>> {
    let row = c.heads * c.dim;
    if c.real {
        let (_, k, _, _) = smollm2(5, "prod_kernels_match_reference")?;
        return Some(k[..c.n * row].iter().map(|&v| f16::from_f32(v)).collect());
    }
    let offs: Vec<f32> = (0..row).map(|_| rng.random_range(-2.0..2.0)).collect();
    let mut x: Vec<f16> = (0..c.n * row)
        .map(|i| f16::from_f32(offs[i % row] + rng.random_range(-1.0f32..1.0)))
        .collect();
    x[row..2 * row].fill(f16::ZERO);
    for (i, v) in x[2 * row..3 * row].iter_mut().enumerate() {
        *v = f16::from_f32(if i % 2 == 0 { 3000.0 } else { -2000.0 } / (c.dim as f32).sqrt());
    }
    Some(x)
}

fn kcodec(c: &KCase) -> ProdCodec {
    ProdCodec::new(
        &Context::cpu(),
        ProdSide::new(c.bits).m(c.m),
        Geometry::new(c.heads, c.dim).expect("geometry"),
        5,
        PathChoice::Cpu,
    )
    .expect("prod codec")
}

/// The first absolute token a case encodes.
const K_OLD: usize = 11;

/// The reference's four streams of the case's tokens.
fn kreference(codec: &ProdCodec, c: &KCase, x: &[f16]) -> Vec<Vec<u32>> {
    let row = c.heads * c.dim;
    let mut out = vec![Vec::new(); 4];
    codec
        .encode(
            K_OLD,
            c.n,
            &|t, h, d| x[t * row + h * c.dim + d].to_f32(),
            &mut out,
        )
        .expect("reference");
    out
}

/// Runs `def` (turboquant_prod_quant or a planted copy) on `t`; the four streams of the tokens
/// written, after checking that nothing else changed.
fn encode_on(
    t: &Target,
    def: &'static KernelDef,
    codec: &ProdCodec,
    c: &KCase,
    x: &[f16],
) -> Vec<Vec<u32>> {
    let row = c.heads * c.dim;
    let rw = row.div_ceil(2);
    let rows = kvpack::store::input::f16_rows_to_words(row, x);
    let t_old = K_OLD + c.from_ring;
    let cap = c.from_ring + 3;
    let mut ring = vec![0x7e00_7e00u32; cap * rw];
    for s in K_OLD..t_old {
        ring[(s % cap) * rw..][..rw].copy_from_slice(&rows[(s - K_OLD) * rw..][..rw]);
    }
    let incoming = rows[c.from_ring * rw..].to_vec();
    let total = c.seg_token + c.n + 2;
    let l = codec.layout();
    let stage1 = kvpack::codecs::turboquant::layout::Layout::new(c.heads, c.dim, c.bits - 1, 1)
        .expect("stage-1 layout");
    let per: Vec<usize> = codec.streams().iter().map(|s| s.words_per_block).collect();
    let mut plan = plan_prod_quant(
        &stage1,
        l.m,
        c.n,
        QuantSource {
            start: K_OLD,
            t_old,
            inc_start: t_old,
            ring_tokens: cap,
        },
        c.seg_token,
    );
    plan.kernel = def;
    let b = |w: &[u32]| bytemuck::cast_slice::<u32, u8>(w).to_vec();
    let mut bufs = vec![
        b(&ring),
        b(if incoming.is_empty() {
            &[0u32]
        } else {
            &incoming
        }),
    ];
    bufs.extend(per.iter().map(|&p| b(&vec![POISON; total * p])));
    bufs.push(b(codec.tables()));
    run_plan(t, &plan, &mut bufs).unwrap_or_else(|e| panic!("{} {}: {e}", t.name(), c.what));
    let (a, z) = (c.seg_token, c.seg_token + c.n);
    (0..4)
        .map(|i| {
            let w: Vec<u32> = bytemuck::pod_collect_to_vec(&bufs[2 + i]);
            assert!(
                w[..a * per[i]]
                    .iter()
                    .chain(&w[z * per[i]..])
                    .all(|&x| x == POISON),
                "{} {}: stream {i} written outside tokens [{a}, {z})",
                t.name(),
                c.what
            );
            w[a * per[i]..z * per[i]].to_vec()
        })
        .collect()
}

/// What the agreement check counted on a real GPU.
#[derive(Debug, Default)]
struct KAgreement {
    codes_moved: usize,
    norms_ulp: usize,
    rhos_ulp: usize,
    signs_near_zero: usize,
    keys_excused: usize,
}

/// The spec's agreement rules: `exact` (emulated MSL) wants identical words. On a GPU: n and ρ
/// equal or 1 f16 ulp apart; a stage-1 code ±1 only where y lies within 1e-5·(1 + |y|) of a
/// boundary (the key's ρ and signs are then free: its residual moved); a sign bit only where
/// |(S r)_i| ≤ 1e-5·‖S_i‖·‖r‖ (r in f64 from the reference's codes).
fn kagree(
    codec: &ProdCodec,
    c: &KCase,
    x: &[f16],
    want: &[Vec<u32>],
    got: &[Vec<u32>],
    exact: bool,
) -> Result<KAgreement, String> {
    use kvpack::codecs::turboquant::layout::code_at;
    use kvpack::cpu::turboquant::rotation::inverse_rotate;
    let mut a = KAgreement::default();
    if exact {
        for (i, (w, g)) in want.iter().zip(got).enumerate() {
            if w != g {
                let at = w.iter().zip(g).position(|(p, q)| p != q);
                return Err(format!("stream {i} not bit-identical (first word {at:?})"));
            }
        }
        return Ok(a);
    }
    let l = codec.layout();
    let (p, m, rw, sw) = (l.stage1.padded, l.m, l.stage1.row_words(), l.sign_words());
    let nw = c.heads.div_ceil(2);
    let cb = codec.codebook();
    let s = codec.sketch();
    let row = c.heads * c.dim;
    for t in 0..c.n {
        // An odd head count: the absent head's halves of n and ρ stay 0.
        if c.heads % 2 == 1 {
            for k in [2, 3] {
                let w = got[k][t * nw + nw - 1];
                if w >> 16 != 0 {
                    return Err(format!(
                        "token {t}: stream {k}'s padding half is {:#x}",
                        w >> 16
                    ));
                }
            }
        }
        for h in 0..c.heads {
            let key = t * c.heads + h;
            let xr: Vec<f32> = x[t * row + h * c.dim..][..c.dim]
                .iter()
                .map(|v| v.to_f32())
                .collect();
            let rot = normalize_rotate(&xr, codec.head_signs(h), t, h).expect("rotate");
            let (cw, cg) = (&want[0][key * rw..][..rw], &got[0][key * rw..][..rw]);
            let mut moved = false;
            for i in 0..p {
                let (u, v) = (code_at(cw, i, l.stage1.bits), code_at(cg, i, l.stage1.bits));
                if u != v {
                    let y = rot.y[i];
                    let near = cb
                        .boundaries
                        .iter()
                        .any(|&b| (y - b).abs() <= 1e-5 * (1.0 + y.abs()));
                    if u.abs_diff(v) != 1 || !near {
                        return Err(format!(
                            "key {key} coordinate {i}: code {u} vs {v} (y = {y}, not at a boundary)"
                        ));
                    }
                    moved = true;
                    a.codes_moved += 1;
                }
            }
            if cw != cg && !moved {
                return Err(format!("key {key}: code row padding differs"));
            }
            let half = |w: &[u32]| (w[t * nw + h / 2] >> (16 * (h % 2))) & 0xffff;
            for (k, what, count) in [(2, "n", &mut a.norms_ulp), (3, "rho", &mut a.rhos_ulp)] {
                let (u, v) = (half(&want[k]), half(&got[k]));
                if u != v {
                    if u.abs_diff(v) > 1 && !(k == 3 && moved) {
                        return Err(format!("key {key}: {what} bits {u:#x} vs {v:#x}"));
                    }
                    *count += 1;
                }
            }
            if moved {
                a.keys_excused += 1;
                continue;
            }
            let yhat: Vec<f32> = (0..p)
                .map(|i| cb.centroids[code_at(cw, i, l.stage1.bits)])
                .collect();
            let u1 = inverse_rotate(&yhat, codec.head_signs(h)).expect("inverse");
            let r: Vec<f64> = rot
                .unit
                .iter()
                .zip(&u1)
                .map(|(&u, &v)| f64::from(u) - f64::from(v))
                .collect();
            let rn = r.iter().map(|v| v * v).sum::<f64>().sqrt();
            let (sw_want, sw_got) = (&want[1][key * sw..][..sw], &got[1][key * sw..][..sw]);
            for i in 0..m {
                if (sw_want[i / 32] ^ sw_got[i / 32]) >> (i % 32) & 1 == 0 {
                    continue;
                }
                let srow = &s[i * p..][..p];
                let dot: f64 = srow.iter().zip(&r).map(|(a, b)| f64::from(*a) * b).sum();
                let sn = srow
                    .iter()
                    .map(|a| f64::from(*a).powi(2))
                    .sum::<f64>()
                    .sqrt();
                if dot.abs() > 1e-5 * sn * rn {
                    return Err(format!(
                        "key {key} sign {i}: (S r)_i = {dot:e} is not near 0"
                    ));
                }
                a.signs_near_zero += 1;
            }
        }
    }
    Ok(a)
}

fn prod_kernels_match_reference(t: &Target) {
    let mut rng = common::rng("prod_kernels_match_reference");
    let exact = matches!(t, Target::MslEmulated(_));
    for c in kcases() {
        let Some(x) = kinputs(&mut rng, &c) else {
            continue;
        };
        let codec = kcodec(&c);
        let want = kreference(&codec, &c, &x);
        if let Target::Cpu(_) = t {
            // The codec against the reference function (tests above: on SmolLM2 keys too).
            let signs: Vec<f32> = (0..c.heads)
                .flat_map(|h| codec.head_signs(h).to_vec())
                .collect();
            let xs: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
            let r = quantize_prod(codec.layout(), &signs, codec.sketch(), &xs).expect("reference");
            assert_eq!((&want[0], &want[1]), (&r.codes, &r.signs), "{}", c.what);
            continue;
        }
        let got = encode_on(t, &TURBOQUANT_PROD_QUANT, &codec, &c, &x);
        match kagree(&codec, &c, &x, &want, &got, exact) {
            Ok(a) => eprintln!(
                "turboquant_prod_quant[{}] {}: agrees {a:?}",
                t.name(),
                c.what
            ),
            Err(e) => panic!("turboquant_prod_quant[{}] {}: {e}", t.name(), c.what),
        }
    }
}
parity_tests!(prod_kernels_match_reference, msl, gl);

/// turboquant_prod_quant with `from` replaced by `to` in every source of the variant `t` runs
/// (a leaked KernelDef of its own name: never the cached pipeline).
fn planted(name: &str, from: &str, to: &str) -> &'static KernelDef {
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let d = &TURBOQUANT_PROD_QUANT;
    let full = leak(format!("turboquant_prod_quant_planted_{name}"));
    let edit = |s: &str| {
        leak(s.replace(from, to).replace(
            "kernel void turboquant_prod_quant(",
            &format!("kernel void {full}("),
        ))
    };
    let common: Vec<&'static str> = d.wgsl_common.iter().map(|s| edit(s)).collect();
    let n = d
        .wgsl_common
        .iter()
        .chain([&d.wgsl, &d.msl.expect("msl")])
        .map(|s| s.matches(from).count())
        .sum::<usize>();
    assert!(n > 0, "planted {name}: `{from}` occurs in no source");
    Box::leak(Box::new(KernelDef {
        name: full,
        folder: d.folder,
        wgsl_common: Box::leak(common.into_boxed_slice()),
        wgsl_subgroup: d.wgsl_subgroup.map(edit),
        wgsl: edit(d.wgsl),
        msl_common: d.msl_common,
        msl: d.msl.map(edit),
        bindings: d.bindings,
        workgroup_size: d.workgroup_size,
    }))
}

/// Planted bugs in the encoder: the sketch taken of u instead of the residual r = u − û₁
/// (WGSL and MSL spellings), and the ρ words written from n. Each must make the kernel
/// disagree with the reference on the cases (SmolLM2 keys among them).
fn prod_planted_bugs_are_caught(t: &Target) {
    if let Target::Cpu(_) = t {
        return; // nothing planted in the reference
    }
    let exact = matches!(t, Target::MslEmulated(_));
    let plants = [
        (
            "sketch_of_u_wgsl",
            "pq_u[e] - tq_flip(tq_x[e] * P.inv_sqrt_p, hs, e); // @pq-residual",
            "pq_u[e];",
        ),
        (
            "sketch_of_u_msl",
            "us[e] - tq_flip(tables, xs[e] * P.inv_sqrt_p, hs, e); // @pq-residual",
            "us[e];",
        ),
        (
            "rho_from_n_wgsl",
            "tq_f16_bits(nr[t].z) | (tq_f16_bits(nr[t].w) << 16u)",
            "tq_f16_bits(nr[t].x) | (tq_f16_bits(nr[t].y) << 16u)",
        ),
        (
            "rho_from_n_msl",
            "tq_f16_bits(rr[2u * t]) | (tq_f16_bits(rr[2u * t + 1u]) << 16u)",
            "tq_f16_bits(nn[2u * t]) | (tq_f16_bits(nn[2u * t + 1u]) << 16u)",
        ),
    ];
    let mut rng = common::rng("prod_planted_bugs_are_caught");
    let mut caught = 0;
    for (name, from, to) in plants {
        // Each spelling belongs to one language: the other's source does not hold it.
        let msl_plant = name.ends_with("_msl");
        if msl_plant != exact {
            continue;
        }
        let def = planted(name, from, to);
        let mut found = None;
        for c in kcases() {
            let Some(x) = kinputs(&mut rng, &c) else {
                continue;
            };
            let codec = kcodec(&c);
            let want = kreference(&codec, &c, &x);
            let got = encode_on(t, def, &codec, &c, &x);
            if let Err(e) = kagree(&codec, &c, &x, &want, &got, exact) {
                found = Some(format!("{}: {e}", c.what));
                break;
            }
        }
        match found {
            Some(e) => {
                eprintln!("turboquant_prod planted[{}] {name}: caught ({e})", t.name());
                caught += 1;
            }
            None => panic!("turboquant_prod planted[{}] {name}: NOT caught", t.name()),
        }
    }
    assert_eq!(caught, 2, "{}: planted bugs run", t.name());
}
parity_tests!(prod_planted_bugs_are_caught, msl);

/// Attention on TurboQuant-Prod keys through a layer on every path, on SmolLM2 keys, values
/// and queries (layer 5, GQA 3): the layer's attention against the CPU attention over the same
/// stored words (read back), worst row rel L2 ≤ 1e-4 (attention.md), with the residual
/// window and without (the layer's own encode kernel and attention kernels end to end; the
/// encode kernel's words against the reference: prod_kernels_match_reference).
fn prod_attention_on_real_keys(t: &Target) {
    let Some((n, k, v, q)) = smollm2(5, "prod_attention_on_real_keys") else {
        return;
    };
    let n = n.min(300);
    for spec in [
        "turboquant-prod:bits=3/turboquant-mse:bits=3",
        "turboquant-prod:bits=4,m=96,residual=40/f16",
    ] {
        let method = Method::parse(spec).expect("method");
        let mut layer = method.layer(t.ctx(), H, D, t.path()).expect("layer");
        layer
            .append(Input::F32(&k[..n * H * D]), Input::F32(&v[..n * H * D]))
            .expect("append");
        let qs = &q[(n - 4) * 9 * D..n * 9 * D];
        let o = AttendOptions::default();
        let got = layer.attend(qs, 9, &o).expect("attend");
        let want = layer.attend_reference(qs, 9, &o).expect("reference");
        let err = common::rel_l2_rows(&got, &want, D);
        eprintln!(
            "prod attention[{}] {spec}: worst row rel L2 {err:e}",
            t.name()
        );
        assert!(err <= 1e-4, "{} {spec}: worst row rel L2 {err:e}", t.name());
    }
}
parity_tests!(prod_attention_on_real_keys);
