//! KIVI parity and contract tests (../shared/spec/kivi.md), one body per path.
//!
//! The CPU target checks the spec itself (half-to-even, constant groups, chunking
//! invariance, near-lossless cases). GPU targets are compared with the CPU reference on the
//! same input by the spec's "Cross-backend agreement" rule: every lo and scale bit-identical;
//! a code may differ by ±1 only where (x − lo)/scale is within 1e-4 of a half-integer;
//! where codes agree, |x̂_gpu − x̂_ref| ≤ ulp(q·scale_st)/2 + ulp(x̂_ref). Boundary cases are
//! counted and printed; any other difference fails.

mod common;

use common::Target;
use half::f16;
use kvpack::codecs::kivi::{Layout, RawKivi};
use kvpack::cpu::kivi::kivi_group as g;
use kvpack::{Context, Error, Input, KiviConfig, KvLayer, Layer, ParamStorage, PathChoice};
use rand::Rng;

fn layer(t: &Target, h: usize, d: usize, cfg: &KiviConfig) -> Layer {
    Layer::kivi(t.ctx(), h, d, cfg, t.path())
        .unwrap_or_else(|e| panic!("{}: new layer: {e}", t.name()))
}

fn f16s(x: &[f32]) -> Vec<f16> {
    x.iter().map(|&v| f16::from_f32(v)).collect()
}

/// Random data with structure: per-channel offsets (as real keys have), outliers.
fn random_kv(rng: &mut impl Rng, t: usize, h: usize, d: usize) -> (Vec<f32>, Vec<f32>) {
    let offs: Vec<f32> = (0..h * d).map(|_| rng.random_range(-4.0..4.0)).collect();
    let make = |rng: &mut dyn rand::RngCore, base: &[f32]| -> Vec<f32> {
        (0..t * h * d)
            .map(|i| {
                let x: f32 = rand::Rng::random_range(rng, -1.0..1.0);
                let out = if rand::Rng::random_range(rng, 0..50) == 0 {
                    8.0 * x
                } else {
                    x
                };
                base[i % (h * d)] + out
            })
            .collect()
    };
    let k = make(rng, &offs);
    let v = make(rng, &vec![0.0; h * d]);
    (k, v)
}

/// Boundary-aware comparison of a GPU layer with the CPU reference fed the same tokens.
/// Returns the number of boundary cases (codes that differ by one at a half-integer).
fn compare(
    t: &Target,
    l: &Layout,
    gpu: &RawKivi,
    cpu: &RawKivi,
    k: &[f16],
    v: &[f16],
    what: &str,
) -> usize {
    let name = t.name();
    words_eq(
        &gpu.key_params,
        &cpu.key_params,
        &format!("{name} {what}: key (scale, lo) must be bit-identical"),
    );
    words_eq(
        &gpu.value_params,
        &cpu.value_params,
        &format!("{name} {what}: value (scale, lo) must be bit-identical"),
    );
    let bits16 = |x: &[f16]| x.iter().map(|v| u32::from(v.to_bits())).collect::<Vec<_>>();
    words_eq(
        &bits16(&gpu.residual_k),
        &bits16(&cpu.residual_k),
        &format!("{name} {what}: residual K"),
    );
    words_eq(
        &bits16(&gpu.residual_v),
        &bits16(&cpu.residual_v),
        &format!("{name} {what}: residual V"),
    );
    assert_eq!(gpu.key_codes.len(), cpu.key_codes.len());
    assert_eq!(gpu.value_codes.len(), cpu.value_codes.len());
    let mut boundary = 0;
    let (hd, row) = (l.heads * l.dim, l.token_elems());
    let x = |src: &[f16], tok: usize, e: usize| src[tok * row + e].to_f32();
    // keys: group (block j, e) with stream of key_group codes
    let (gk, wpg) = (l.key_group, l.key_group_words());
    for j in 0..cpu.key_codes.len() / wpg.max(1) / hd.max(1) {
        for e in 0..hd {
            let gi = j * hd + e;
            let (lo, hi) = g::min_max((0..gk).map(|i| x(k, j * gk + i, e)));
            let (scale, lo) = g::group_params(lo, hi, l.key_bits);
            for i in 0..gk {
                let (a, b) = (
                    g::get_code(&gpu.key_codes[gi * wpg..], i, l.key_bits),
                    g::get_code(&cpu.key_codes[gi * wpg..], i, l.key_bits),
                );
                if a != b {
                    let r = (x(k, j * gk + i, e) - lo) / scale;
                    let near_half = ((r - r.floor()) - 0.5).abs() < 1e-4;
                    assert!(
                        near_half && a.abs_diff(b) == 1,
                        "{name} {what}: key code block {j} elem {e} token {i}: gpu {a} cpu {b}, (x-lo)/scale = {r}"
                    );
                    boundary += 1;
                }
            }
        }
    }
    let (gv, gw, ng, rw) = (
        l.value_group,
        l.value_group_words(),
        l.value_groups(),
        l.value_row_words(),
    );
    for tok in 0..cpu.value_codes.len() / rw.max(1) / l.heads {
        for h in 0..l.heads {
            for j in 0..ng {
                let (c0, c1) = (j * gv, ((j + 1) * gv).min(l.dim));
                let (lo, hi) = g::min_max((c0..c1).map(|c| x(v, tok, h * l.dim + c)));
                let (scale, lo) = g::group_params(lo, hi, l.value_bits);
                let base = (tok * l.heads + h) * rw + j * gw;
                for c in c0..c1 {
                    let a = g::get_code(&gpu.value_codes[base..], c - c0, l.value_bits);
                    let b = g::get_code(&cpu.value_codes[base..], c - c0, l.value_bits);
                    if a != b {
                        let r = (x(v, tok, h * l.dim + c) - lo) / scale;
                        let near_half = ((r - r.floor()) - 0.5).abs() < 1e-4;
                        assert!(
                            near_half && a.abs_diff(b) == 1,
                            "{name} {what}: value code token {tok} head {h} ch {c}: gpu {a} cpu {b}, r = {r}"
                        );
                        boundary += 1;
                    }
                }
            }
        }
    }
    // Padding bits of each group stream must be zero (the CPU's are).
    for j in 0..cpu.key_codes.len() / wpg.max(1) {
        let used = gk * l.key_bits as usize - (wpg - 1) * 32;
        assert!(
            used == 32 || gpu.key_codes[j * wpg + wpg - 1] >> used == 0,
            "{name} {what}: key group {j} padding bits set"
        );
    }
    for r in 0..cpu.value_codes.len() / rw.max(1) {
        for j in 0..ng {
            let n = (l.dim - j * gv).min(gv) * l.value_bits as usize;
            let last = r * rw + j * gw + n.div_ceil(32) - 1;
            let used = n - (n.div_ceil(32) - 1) * 32;
            assert!(
                used == 32 || gpu.value_codes[last] >> used == 0,
                "{name} {what}: value row {r} group {j} padding bits set"
            );
        }
    }
    boundary
}

/// Word-for-word equality, reporting the first difference (not both whole vectors).
fn words_eq(a: &[u32], b: &[u32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    if let Some(i) = (0..a.len()).find(|&i| a[i] != b[i]) {
        panic!(
            "{what}: word {i} of {}: {:#010x} != {:#010x}",
            a.len(),
            a[i],
            b[i]
        );
    }
}

/// Every element of the layer's reconstruction against the spec applied to its own stored
/// words (exact on the CPU, the FMA bound on a GPU) and against the input within the per-element
/// bound of its stored parameters; the stored (scale, lo) words against the pair recomputed
/// from the input (tests/common/kivi_spec.rs, tests/common/recon.rs).
#[allow(clippy::too_many_arguments)]
fn check_spec_recon(
    t: &Target,
    lay: &Layer,
    h: usize,
    d: usize,
    cfg: &KiviConfig,
    k: &[f32],
    v: &[f32],
    what: &str,
) {
    let l = common::kivi_layout(h, d, cfg);
    let raw = common::raw(lay).expect("raw");
    let (kx, vx) = (rounded(k), rounded(v));
    let what = format!("{} {what}", t.name());
    common::kivi_spec::check_param_words(&what, &l, &raw, &kx, &vx);
    let (mut ke, mut ve) = common::kivi_spec::elems(&l, &raw, &kx, &vx);
    let (q, row) = (lay.memory().quantized, h * d);
    assert_eq!(ke.len(), q * row, "{what}: quantized key elements");
    ke.extend(common::recon::f16_elems(&kx[q * row..]));
    ve.extend(common::recon::f16_elems(&vx[q * row..]));
    let (kh, vh) = lay.reconstruct().expect("reconstruct");
    common::recon::check_recon(&format!("{what}: K"), !t.is_gpu(), &kh, &ke);
    common::recon::check_recon(&format!("{what}: V"), !t.is_gpu(), &vh, &ve);
}

/// The f16 rounding of an input (what the cache quantizes).
fn rounded(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| f16::from_f32(v).to_f32()).collect()
}

/// Runs the same appends on `t` and on the CPU reference and compares everything.
#[allow(clippy::too_many_arguments)]
fn run_and_compare(
    t: &Target,
    h: usize,
    d: usize,
    cfg: &KiviConfig,
    k: &[f32],
    v: &[f32],
    chunks: &[usize],
    what: &str,
) -> (Layer, usize) {
    let mut lay = layer(t, h, d, cfg);
    let mut reference =
        Layer::kivi(&Context::cpu(), h, d, cfg, PathChoice::Cpu).expect("cpu layer");
    let row = h * d;
    let mut at = 0;
    for &c in chunks {
        let (ks, vs) = (&k[at * row..(at + c) * row], &v[at * row..(at + c) * row]);
        lay.append(Input::F32(ks), Input::F32(vs))
            .unwrap_or_else(|e| panic!("{} {what}: append: {e}", t.name()));
        reference
            .append(Input::F32(ks), Input::F32(vs))
            .expect("reference append");
        at += c;
    }
    assert_eq!(lay.len(), at);
    let boundary = if t.is_gpu() {
        let (rg, rc) = (
            common::raw(&lay).expect("raw"),
            common::raw(&reference).expect("raw"),
        );
        compare(
            t,
            &common::kivi_layout(h, d, cfg),
            &rg,
            &rc,
            &f16s(k),
            &f16s(v),
            what,
        )
    } else {
        0
    };
    check_spec_recon(t, &lay, h, d, cfg, k, v, what);
    (lay, boundary)
}

fn kivi_grid(t: &Target) {
    let mut rng = common::rng("kivi_grid");
    let (h, d) = (2, 80);
    let mut boundary = 0;
    let mut cases = 0;
    for bits in [1u32, 2, 3, 4, 8] {
        for group in [4usize, 32, 128] {
            for residual in [0usize, 32, 128] {
                if residual % group != 0 {
                    let cfg = KiviConfig::uniform(bits, group, residual);
                    assert!(matches!(
                        Layer::kivi(t.ctx(), h, d, &cfg, t.path()),
                        Err(Error::Config(_))
                    ));
                    continue;
                }
                for tokens in [1usize, 31, 33, 200, 1000] {
                    let (k, v) = random_kv(&mut rng, tokens, h, d);
                    let mut cfg = KiviConfig::uniform(bits, group, residual);
                    cfg.params = if (bits + tokens as u32).is_multiple_of(2) {
                        ParamStorage::F16
                    } else {
                        ParamStorage::F32
                    };
                    let what = format!(
                        "b={bits} G={group} R={residual} T={tokens} params={:?}",
                        cfg.params
                    );
                    let (lay, n) = run_and_compare(t, h, d, &cfg, &k, &v, &[tokens], &what);
                    boundary += n;
                    cases += 1;
                    let q = lay.memory().quantized;
                    assert_eq!(q, tokens.saturating_sub(residual) / group * group, "{what}");
                    let m = lay.memory();
                    assert_eq!(m.quantized, q);
                    assert!(m.held.total() >= m.payload.total(), "{what}");
                }
            }
        }
    }
    eprintln!(
        "kivi_grid[{}]: {cases} configurations, {boundary} boundary codes (±1 at a half-integer)",
        t.name()
    );
}
parity_tests!(kivi_grid);

/// One prefill of 200 then 40 single-token appends gives exactly the one-shot result of 240
/// (same path), and the GPU result matches the CPU reference.
fn kivi_chunking_is_invisible(t: &Target) {
    let mut rng = common::rng("kivi_chunking_is_invisible");
    let (h, d) = (3, 64);
    for cfg in [
        KiviConfig::uniform(2, 32, 128),
        KiviConfig::default()
            .key_bits(3)
            .value_bits(4)
            .key_group(32)
            .value_group(16)
            .residual(32)
            .params(ParamStorage::F32),
    ] {
        let (k, v) = random_kv(&mut rng, 240, h, d);
        let mut chunks = vec![200];
        chunks.extend(std::iter::repeat_n(1, 40));
        let (streamed, _) = run_and_compare(t, h, d, &cfg, &k, &v, &chunks, "200 + 40×1");
        let (oneshot, _) = run_and_compare(t, h, d, &cfg, &k, &v, &[240], "one shot");
        let (a, b) = (
            common::raw(&streamed).expect("raw"),
            common::raw(&oneshot).expect("raw"),
        );
        words_eq(
            &a.key_codes,
            &b.key_codes,
            &format!("{}: key codes depend on chunking", t.name()),
        );
        words_eq(
            &a.value_codes,
            &b.value_codes,
            &format!("{}: value codes depend on chunking", t.name()),
        );
        words_eq(
            &a.key_params,
            &b.key_params,
            "key params depend on chunking",
        );
        words_eq(
            &a.value_params,
            &b.value_params,
            "value params depend on chunking",
        );
        let (ra, rb) = (
            streamed.reconstruct().expect("r"),
            oneshot.reconstruct().expect("r"),
        );
        assert!(
            ra.0.iter()
                .zip(&rb.0)
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "{}: K̂ depends on chunking",
            t.name()
        );
        assert!(
            ra.1.iter()
                .zip(&rb.1)
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "{}: V̂ depends on chunking",
            t.name()
        );
        // A mix of odd chunk sizes too.
        let (mixed, _) = run_and_compare(
            t,
            h,
            d,
            &cfg,
            &k,
            &v,
            &[1, 30, 2, 64, 7, 100, 36],
            "mixed chunks",
        );
        words_eq(
            &common::raw(&mixed).expect("raw").key_codes,
            &b.key_codes,
            "mixed chunks",
        );
    }
}
parity_tests!(kivi_chunking_is_invisible);

/// Constant groups: codes 0, x̂ = lo exactly. Half-integers: ties go to even.
fn kivi_constant_groups_and_ties(t: &Target) {
    let (h, d) = (1, 32);
    let cfg = KiviConfig::uniform(2, 32, 0);
    // Keys constant along tokens per channel, values constant along channels per token.
    let k: Vec<f32> = (0..32 * d).map(|i| ((i % d) as f32) * 0.25 - 3.0).collect();
    let v: Vec<f32> = (0..32 * d).map(|i| ((i / d) as f32) * 0.5 + 1.0).collect();
    let mut lay = layer(t, h, d, &cfg);
    lay.append(Input::F32(&k), Input::F32(&v)).expect("append");
    let raw = common::raw(&lay).expect("raw");
    assert!(
        raw.key_codes.iter().all(|&w| w == 0) && raw.value_codes.iter().all(|&w| w == 0),
        "{}",
        t.name()
    );
    let (kh, vh) = lay.reconstruct().expect("reconstruct");
    assert_eq!(kh, k, "{}: constant key groups reconstruct to lo", t.name());
    assert_eq!(
        vh,
        v,
        "{}: constant value groups reconstruct to lo",
        t.name()
    );

    // b = 2: lo = 0, hi = 3 → scale = 3·f32(1/3) = 1.0; x = 0.5, 1.5, 2.5 are exact ties.
    assert_eq!(g::group_params(0.0, 3.0, 2).0, 1.0);
    let pattern = [0.0f32, 3.0, 0.5, 1.5, 2.5, 1.0, 2.0, 0.5];
    let expected = [0u32, 3, 0, 2, 2, 1, 2, 0];
    let v: Vec<f32> = (0..32 * d).map(|i| pattern[(i % d) % 8]).collect();
    let k: Vec<f32> = (0..32 * d).map(|i| pattern[(i / d) % 8]).collect();
    let mut lay = layer(t, h, d, &cfg);
    lay.append(Input::F32(&k), Input::F32(&v)).expect("append");
    let raw = common::raw(&lay).expect("raw");
    let mut ties_off = 0;
    for c in 0..d {
        let got = g::get_code(&raw.value_codes, c, 2);
        let key = g::get_code(&raw.key_codes[c * 2..], c % 32, 2); // key group c: token c's code
        for (what, got) in [("value", got), ("key", key)] {
            let want = expected[c % 8];
            if got != want {
                // Only a GPU may miss a tie, and only by one (its division may be inexact).
                assert!(
                    t.is_gpu() && got.abs_diff(want) == 1 && pattern[c % 8].fract() == 0.5,
                    "{} {what} ch {c}: {got} != {want}",
                    t.name()
                );
                ties_off += 1;
            }
        }
    }
    eprintln!(
        "kivi_ties[{}]: {ties_off} of 24 ties rounded away from even (allowed on GPUs only)",
        t.name()
    );
}
parity_tests!(kivi_constant_groups_and_ties);

/// G = 1 keys are lossless (every group is constant); 8 bits on a small range is within
/// half a step.
fn kivi_near_lossless(t: &Target) {
    let mut rng = common::rng("kivi_near_lossless");
    let (h, d, n) = (2, 64, 64);
    let k: Vec<f32> = (0..n * h * d)
        .map(|_| rng.random_range(-2.0..2.0))
        .collect();
    let v: Vec<f32> = (0..n * h * d)
        .map(|_| rng.random_range(0.25..0.5))
        .collect();
    let cfg = KiviConfig::default()
        .key_bits(2)
        .key_group(1)
        .value_bits(8)
        .value_group(32)
        .residual(0)
        .params(ParamStorage::F16);
    let mut lay = layer(t, h, d, &cfg);
    lay.append(Input::F32(&k), Input::F32(&v)).expect("append");
    let (kh, vh) = lay.reconstruct().expect("reconstruct");
    for (i, (&a, &x)) in kh.iter().zip(&k).enumerate() {
        assert_eq!(a, f16::from_f32(x).to_f32(), "{}: G=1 key {i}", t.name());
    }
    // step = range/255 ≤ 0.25/255; f16 scale/lo rounding adds a little.
    let worst = vh
        .iter()
        .zip(&v)
        .map(|(a, x)| (a - x).abs())
        .fold(0f32, f32::max);
    assert!(
        worst <= 0.25 / 255.0 * 0.5 + 2e-3,
        "{}: 8-bit worst error {worst}",
        t.name()
    );
}
parity_tests!(kivi_near_lossless);

fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        num += (f64::from(x) - f64::from(y)).powi(2);
        den += f64::from(y).powi(2);
    }
    (num / den).sqrt()
}

/// All 30 layers of both SmolLM2-135M fixtures at 2 and 4 bits: parity with the CPU
/// reference on GPU paths; compression ratio and relative error printed.
fn kivi_smollm2_fixtures(t: &Target) {
    for file in ["paris.safetensors", "story-512.safetensors"] {
        let Some(path) = common::shared_fixture(file, "kivi_smollm2_fixtures") else {
            return;
        };
        let (shape, k) = common::load_f16(&path, "k");
        let (_, v) = common::load_f16(&path, "v");
        let (layers, tokens, h, d) = (shape[0], shape[1], shape[2], shape[3]);
        let per = tokens * h * d;
        for bits in [2u32, 4] {
            let cfg = KiviConfig::uniform(bits, 32, 128);
            let (mut ek, mut ev, mut held, mut f16b, mut boundary) =
                (0f64, 0f64, 0u64, 0u64, 0usize);
            for l in 0..layers {
                let (kl, vl) = (&k[l * per..(l + 1) * per], &v[l * per..(l + 1) * per]);
                let mut lay = layer(t, h, d, &cfg);
                lay.append(Input::F16(kl), Input::F16(vl)).expect("append");
                let (kh, vh) = lay.reconstruct().expect("reconstruct");
                let kf: Vec<f32> = kl.iter().map(|x| x.to_f32()).collect();
                let vf: Vec<f32> = vl.iter().map(|x| x.to_f32()).collect();
                ek += rel_l2(&kh, &kf) / layers as f64;
                ev += rel_l2(&vh, &vf) / layers as f64;
                let m = lay.memory();
                held += m.held.total();
                f16b += m.f16_bytes;
                if t.is_gpu() {
                    let mut reference =
                        Layer::kivi(&Context::cpu(), h, d, &cfg, PathChoice::Cpu).expect("cpu");
                    reference
                        .append(Input::F16(kl), Input::F16(vl))
                        .expect("append");
                    boundary += compare(
                        t,
                        &common::kivi_layout(h, d, &cfg),
                        &common::raw(&lay).expect("raw"),
                        &common::raw(&reference).expect("raw"),
                        kl,
                        vl,
                        file,
                    );
                }
            }
            eprintln!(
                "kivi_smollm2[{}] {file} T={tokens} {bits}-bit G=32 R=128: ratio {:.2}x, mean rel L2 K {ek:.4} V {ev:.4}, boundary codes {boundary}",
                t.name(),
                f16b as f64 / held as f64
            );
            assert!(ek.is_finite() && ev.is_finite());
        }
    }
}
parity_tests!(kivi_smollm2_fixtures);

/// Bad input is a typed error and leaves the cache exactly as it was.
fn kivi_bad_input_leaves_cache_unchanged(t: &Target) {
    let mut rng = common::rng("kivi_bad_input");
    let (h, d) = (2, 16);
    let cfg = KiviConfig::uniform(2, 4, 8);
    let mut lay = layer(t, h, d, &cfg);
    let (k, v) = random_kv(&mut rng, 13, h, d);
    lay.append(Input::F32(&k), Input::F32(&v)).expect("append");
    let before = (
        common::raw(&lay).expect("raw"),
        lay.reconstruct().expect("r"),
        lay.len(),
    );
    let (k2, v2) = random_kv(&mut rng, 9, h, d);
    let mut nan = k2.clone();
    nan[37] = f32::NAN;
    let mut inf = v2.clone();
    inf[5] = f32::NEG_INFINITY;
    let mut big = k2.clone();
    big[2] = 1e6; // f16 cannot hold it
    let nan16: Vec<f16> = f16s(&v2)
        .into_iter()
        .enumerate()
        .map(|(i, x)| if i == 3 { f16::NAN } else { x })
        .collect();
    let ok16 = f16s(&k2);
    let cases: Vec<(&str, kvpack::Result<()>)> = vec![
        ("NaN in k", lay.append(Input::F32(&nan), Input::F32(&v2))),
        ("-Inf in v", lay.append(Input::F32(&k2), Input::F32(&inf))),
        ("1e6 in k", lay.append(Input::F32(&big), Input::F32(&v2))),
        (
            "f16 NaN in v",
            lay.append(Input::F16(&ok16), Input::F16(&nan16)),
        ),
        (
            "ragged k",
            lay.append(Input::F32(&k2[1..]), Input::F32(&v2[1..])),
        ),
        (
            "k/v mismatch",
            lay.append(Input::F32(&k2), Input::F32(&v2[..h * d * 8])),
        ),
    ];
    for (what, r) in cases {
        match (what, r) {
            (
                "NaN in k",
                Err(Error::NonFinite {
                    what: "k",
                    index: 37,
                    ..
                }),
            )
            | (
                "-Inf in v",
                Err(Error::NonFinite {
                    what: "v",
                    index: 5,
                    ..
                }),
            )
            | (
                "1e6 in k",
                Err(Error::NonFinite {
                    what: "k",
                    index: 2,
                    ..
                }),
            )
            | (
                "f16 NaN in v",
                Err(Error::NonFinite {
                    what: "v",
                    index: 3,
                    ..
                }),
            )
            | ("ragged k", Err(Error::Shape { what: "k", .. }))
            | ("k/v mismatch", Err(Error::Shape { what: "v", .. })) => {}
            (what, other) => panic!("{}: {what}: unexpected {other:?}", t.name()),
        }
    }
    // b = 1 with f16 parameters: a range of 120000 gives a scale f16 cannot hold; the flush
    // fails on the device (status word) and nothing is committed.
    let cfg1 = KiviConfig::uniform(1, 4, 0);
    let mut one = layer(t, h, d, &cfg1);
    let small: Vec<f32> = (0..4 * h * d).map(|i| (i % 7) as f32).collect();
    one.append(Input::F32(&small), Input::F32(&small))
        .expect("append");
    let before1 = (common::raw(&one).expect("raw"), one.len());
    let mut wide = small.clone();
    wide[0] = -60000.0;
    wide[h * d] = 60000.0; // same channel, next token: key group range 120000
    assert!(
        matches!(
            one.append(Input::F32(&wide), Input::F32(&small)),
            Err(Error::Config(_))
        ),
        "{}",
        t.name()
    );
    assert_eq!(
        (common::raw(&one).expect("raw"), one.len()),
        before1,
        "{}: failed flush changed the cache",
        t.name()
    );
    one.append(Input::F32(&small), Input::F32(&small))
        .expect("the cache still works");
    // Configuration errors.
    for (cfg, what) in [
        (KiviConfig::uniform(0, 32, 0), "bits 0"),
        (KiviConfig::uniform(9, 32, 0), "bits 9"),
        (KiviConfig::uniform(2, 32, 48), "R not a multiple of G"),
        (KiviConfig::uniform(2, 0, 0), "G = 0"),
    ] {
        let r = Layer::kivi(t.ctx(), h, d, &cfg, t.path());
        assert!(
            matches!(r, Err(Error::BitsOutOfRange { .. }) | Err(Error::Config(_))),
            "{what}: {r:?}"
        );
    }
    assert!(matches!(
        Layer::kivi(t.ctx(), 0, d, &cfg, t.path()),
        Err(Error::Shape { .. })
    ));
    let after = (
        common::raw(&lay).expect("raw"),
        lay.reconstruct().expect("r"),
        lay.len(),
    );
    assert_eq!(
        before,
        after,
        "{}: a failed append changed the cache",
        t.name()
    );
}
parity_tests!(kivi_bad_input_leaves_cache_unchanged);

/// A device with small storage bindings: the cache spreads its codes over several segments
/// (and grows the last one by device copies) and still matches the CPU reference exactly.
fn kivi_segments(t: &Target) {
    let small = match t {
        Target::Wgsl(ctx, p) => Target::Wgsl(
            ctx.with_max_storage_binding_size(32 * 1024).expect("limit"),
            *p,
        ),
        _ => return, // no storage bindings on the CPU path
    };
    let mut rng = common::rng("kivi_segments");
    let (h, d) = (2, 80);
    let cfg = KiviConfig::default()
        .key_bits(3)
        .key_group(32)
        .value_bits(3)
        .value_group(32)
        .residual(32)
        .params(ParamStorage::F16);
    let (k, v) = random_kv(&mut rng, 2000, h, d);
    let (lay, _) = run_and_compare(&small, h, d, &cfg, &k, &v, &[700, 1, 33, 1266], "segments");
    let m = lay.memory();
    // 64 bytes of value codes per token and 32 KiB per binding: at least 4 segments.
    assert!(
        m.held.value_codes >= m.payload.value_codes && m.payload.value_codes > 3 * 32 * 1024,
        "{m:?}"
    );
    // A cache whose residual ring alone exceeds the limit is refused up front.
    let tiny = small
        .ctx()
        .with_max_storage_binding_size(1024)
        .expect("limit");
    assert!(matches!(
        Layer::kivi(&tiny, h, d, &cfg, small.path()),
        Err(Error::Limit { .. })
    ));
}
parity_tests!(kivi_segments);

/// Appends recorded into the application's own encoder (submitted by the test, as an app
/// would) store exactly what the blocking appends store.
fn kivi_encode_append_into_app_encoder(t: &Target) {
    let mut rng = common::rng("kivi_encode_append");
    let (h, d) = (3, 64);
    let cfg = KiviConfig::uniform(3, 32, 32);
    let (k, v) = random_kv(&mut rng, 300, h, d);
    let mut recorded = layer(t, h, d, &cfg);
    let Target::Wgsl(ctx, _) = t else {
        let mut enc_less = recorded;
        let dev = common::gpu_context().ok();
        if let Some(dev) = dev.as_ref().and_then(|c| c.device()) {
            let mut enc = dev.create_command_encoder(&Default::default());
            let r = enc_less.encode_append(&mut enc, Input::F32(&k), Input::F32(&v));
            assert!(matches!(r, Err(Error::PathUnavailable { .. })), "{r:?}");
        }
        return;
    };
    let mut blocking = layer(t, h, d, &cfg);
    let row = h * d;
    for (a, b) in [(0, 100), (100, 101), (101, 300)] {
        let (ks, vs) = (&k[a * row..b * row], &v[a * row..b * row]);
        let device = ctx.device().expect("device");
        let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("app encoder"),
        });
        recorded
            .encode_append(&mut enc, Input::F32(ks), Input::F32(vs))
            .expect("encode_append");
        ctx.queue().expect("queue").submit([enc.finish()]);
        blocking
            .append(Input::F32(ks), Input::F32(vs))
            .expect("append");
    }
    assert_eq!(recorded.len(), 300);
    let (a, b) = (
        common::raw(&recorded).expect("raw"),
        common::raw(&blocking).expect("raw"),
    );
    words_eq(&a.key_codes, &b.key_codes, "recorded vs blocking key codes");
    words_eq(
        &a.value_codes,
        &b.value_codes,
        "recorded vs blocking value codes",
    );
    words_eq(
        &a.key_params,
        &b.key_params,
        "recorded vs blocking key params",
    );
    assert_eq!(a.residual_k, b.residual_k);
    // 1-bit codes with f16 parameters need the blocking append's status check.
    let mut one = layer(t, h, d, &KiviConfig::uniform(1, 32, 0));
    let mut enc = ctx
        .device()
        .expect("device")
        .create_command_encoder(&Default::default());
    assert!(matches!(
        one.encode_append(&mut enc, Input::F32(&k), Input::F32(&v)),
        Err(Error::Config(_))
    ));
    assert_eq!(one.len(), 0);
}
parity_tests!(kivi_encode_append_into_app_encoder);
