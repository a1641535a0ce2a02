//! TurboQuant-Prod keys as a cache method (`turboquant-prod:bits=B`, ../shared/spec/
//! turboquant.md "TurboQuant-Prod"), CPU path (the GPU kernels are not written yet: a GPU
//! path is a typed error, tested here). The reference functions' own checks are in
//! tests/turboquant_cpu.rs; this file checks the codec against them:
//!
//! - the codec's stored words (stage-1 codes, sign rows, n, ρ) equal `quantize_prod`'s, and
//!   its score hook equals `prod_score` bit for bit, on real SmolLM2 keys;
//! - its scores are unbiased over 200 seeds on real keys (mean within 3 standard errors),
//!   where the MSE stage alone is not (printed);
//! - attention through a layer (Prod keys, TurboQuant-MSE values) equals a softmax over the
//!   reference scores with the reconstructed values;
//! - memory (the sketch and codebook counted as tables), bad input refused with nothing
//!   stored, the method grammar, GPU paths refused.

mod common;

use half::f16;
use kvpack::codec::Codec;
use kvpack::codecs::turboquant::{ProdCodec, ProdSide};
use kvpack::cpu::common::splitmix::DEFAULT_SEED;
use kvpack::cpu::turboquant::layout::ProdLayout;
use kvpack::cpu::turboquant::score::{ProdKey, prepare_query, prepare_sketch_query, prod_score};
use kvpack::cpu::turboquant::turboquant_quant::quantize_prod;
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
        ProdSide { bits, m, seed },
        Geometry { heads: H, dim: D },
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
    // GPU paths: a typed error, whatever the device.
    for p in [PathChoice::Wgsl, PathChoice::WgslSubgroup, PathChoice::Msl] {
        let r = method.layer(&ctx, H, D, p);
        assert!(
            matches!(r, Err(Error::PathUnavailable { .. })),
            "{p:?}: {:?}",
            r.map(|_| ())
        );
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
