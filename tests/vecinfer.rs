//! The VecInfer codec on the architecture (src/codecs/vecinfer/, ../shared/spec/vecinfer.md),
//! CPU path, with a calibration made from the real SmolLM2 `paris` fixture (layers 0 and 10)
//! and data from `story-512` (another text): the method grammar (calib required, missing or
//! mismatched files refused, paths with `/` in a KEYS/VALUES pair), stored indices equal the
//! CPU reference's, attention through the LUT hooks equals f64 softmax attention over the
//! reconstructed keys and values (GQA: 9 query heads on 3 KV heads), and the same check run
//! with a planted bug (the LUT of the wrong head, λ on the key's side of the query) fails;
//! memory counts the codes and the tables. GPU paths: the fused quantize kernel through the
//! store, LUT attention on GPU layers (WGSL) against the CPU reference over the GPU's own
//! words, f32 and f16 LUT (the latter forced by a lowered workgroup-storage limit), and the
//! attention kernels one by one on every path including the MSL emulator.

mod common;

use half::f16;
use kvpack::calib::Calibration;
use kvpack::cpu::vecinfer::Preset;
use kvpack::cpu::vecinfer::attend_k::{lut_score, prepare_query};
use kvpack::cpu::vecinfer::vecinfer_dequant::vecinfer_dequant;
use kvpack::cpu::vecinfer::vecinfer_quant::vecinfer_quant;
use kvpack::{AttendOptions, Context, Error, Input, Method, PathChoice};

use common::vecinfer_calib::{LAYERS, calib_file, layer_of};

#[test]
fn grammar_and_bad_calibrations() {
    let Some(p) = calib_file("grammar") else {
        return;
    };
    let ps = p.display().to_string();
    let e = Method::parse("vecinfer:bits=1").unwrap_err();
    assert!(matches!(&e, Error::Config(m) if m.contains("calib")), "{e}");
    let e = Method::parse("vecinfer:bits=1,calib=/nonexistent/c.safetensors").unwrap_err();
    assert!(matches!(e, Error::Calibration { .. }), "{e}");
    assert!(Method::parse(&format!("vecinfer:bits=3,calib={ps}")).is_err());
    let m = Method::parse(&format!("vecinfer:kbits=1,vbits=2,calib={ps}")).unwrap();
    assert_eq!(m.residual(), 0);
    let pair = Method::parse(&format!("vecinfer:bits=2,calib={ps}/kivi-4")).unwrap();
    assert_eq!(pair.value().method(), "kivi");
    let pair = Method::parse(&format!("kivi:bits=4/vecinfer:bits=1,calib={ps}")).unwrap();
    assert_eq!(pair.value().method(), "vecinfer");
    // A file made for another shape: refused when the layer is built, nothing created.
    let ctx = Context::cpu();
    let e = m.layer(&ctx, 4, 64, PathChoice::Cpu).unwrap_err();
    assert!(matches!(e, Error::Calibration { .. }), "{e}");
    let e = m.layer_at(&ctx, 2, 3, 64, PathChoice::Cpu).unwrap_err();
    assert!(
        matches!(&e, Error::Calibration { message, .. } if message.contains("layer 2")),
        "{e}"
    );
    // A file with the λ of a head set to 0 (corrupt) is refused at parse time.
    let mut cal = Calibration::read(&p).unwrap();
    cal.vecinfer.as_mut().unwrap().lambda[5] = 0.0;
    let bad = p.with_extension("bad.safetensors");
    cal.write(&bad).unwrap();
    let e = Method::parse(&format!("vecinfer:bits=1,calib={}", bad.display())).unwrap_err();
    assert!(matches!(e, Error::Calibration { .. }), "{e}");
    // A GPU path on a context without a device is refused (no silent CPU fallback).
    let e = m.layer(&ctx, 3, 64, PathChoice::Wgsl).unwrap_err();
    assert!(matches!(e, Error::PathUnavailable { .. }), "{e}");
    std::fs::remove_file(&p).ok();
    std::fs::remove_file(&bad).ok();
}

/// f64 softmax attention of one query row over reconstructed keys/values of one KV head.
fn attend_f64(q: &[f32], keys: &[Vec<f32>], vals: &[Vec<f32>], scale: f64) -> Vec<f64> {
    let s: Vec<f64> = keys
        .iter()
        .map(|k| {
            q.iter()
                .zip(k)
                .map(|(&a, &b)| a as f64 * b as f64)
                .sum::<f64>()
                * scale
        })
        .collect();
    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
    let z: f64 = w.iter().sum();
    let d = vals[0].len();
    (0..d)
        .map(|i| {
            w.iter()
                .zip(vals)
                .map(|(p, v)| p * v[i] as f64)
                .sum::<f64>()
                / z
        })
        .collect()
}

#[test]
fn story_attention_through_the_lut_hooks() {
    let Some(p) = calib_file("story") else { return };
    let Some(story) = common::shared_fixture("story-512.safetensors", "story") else {
        return;
    };
    let (sq, q) = common::load_f16(&story, "q");
    let (sk, k) = common::load_f16(&story, "k");
    let (_, v) = common::load_f16(&story, "v");
    let (t, hq, h, d) = (200usize, sq[2], sk[2], sk[3]);
    let cal = Calibration::read(&p).unwrap();
    let ctx = Context::cpu();
    for bits in [1u32, 2] {
        let preset = Preset::for_bits(bits).unwrap();
        let m = Method::parse(&format!("vecinfer:bits={bits},calib={}", p.display())).unwrap();
        for (li, &l) in LAYERS.iter().enumerate() {
            let kl: Vec<f32> = layer_of(&k, &sk, l)[..t * h * d].to_vec();
            let vl: Vec<f32> = layer_of(&v, &sk, l)[..t * h * d].to_vec();
            let ql: Vec<f32> = layer_of(&q, &sq, l)[(t - 4) * hq * d..t * hq * d].to_vec();
            let mut layer = m.layer_at(&ctx, li, h, d, PathChoice::Cpu).unwrap();
            // Two appends (chunking must not matter for a per-token codec).
            let (k16, v16): (Vec<f16>, Vec<f16>) = (
                kl.iter().map(|&x| f16::from_f32(x)).collect(),
                vl.iter().map(|&x| f16::from_f32(x)).collect(),
            );
            let cut = 77 * h * d;
            layer
                .append(Input::F16(&k16[..cut]), Input::F16(&v16[..cut]))
                .unwrap();
            layer
                .append(Input::F16(&k16[cut..]), Input::F16(&v16[cut..]))
                .unwrap();
            let mem = layer.memory();
            let n_sub = 64 / preset.sub_dim;
            assert_eq!(
                mem.held.key_codes,
                (t * h * n_sub) as u64,
                "one byte per index"
            );
            assert_eq!(
                mem.held.tables,
                4 * (h * d + 2 * h * 256 * preset.sub_dim) as u64,
                "λ + two codebooks"
            );
            // Stored reconstruction = the CPU reference's.
            let tab = cal.vecinfer_layer(li, preset, preset).unwrap();
            let kr = vecinfer_quant(&kl, h, d, Some(&tab.lambda), &tab.keys, preset, 64);
            let vr = vecinfer_quant(&vl, h, d, None, &tab.values, preset, 64);
            let khat = vecinfer_dequant(&kr, h, d, Some(&tab.lambda), &tab.keys, preset, 64);
            let vhat = vecinfer_dequant(&vr, h, d, None, &tab.values, preset, 64);
            let (rk, rv) = layer.reconstruct().unwrap();
            assert_eq!(rk, khat, "keys: the layer stores the reference's indices");
            assert_eq!(rv, vhat);
            // Attention of the last 4 positions (causal) through the hooks.
            let out = layer.attend(&ql, hq, &AttendOptions::default()).unwrap();
            let scale = 1.0 / (d as f64).sqrt();
            let group = hq / h;
            let mut worst = 0.0f64;
            let mut worst_wrong_head = f64::INFINITY;
            for r in 0..4 {
                let upto = t - 4 + r + 1;
                for qh in 0..hq {
                    let kv = qh / group;
                    let rows = |x: &[f32], hh: usize| -> Vec<Vec<f32>> {
                        (0..upto)
                            .map(|j| x[(j * h + hh) * d..][..d].to_vec())
                            .collect()
                    };
                    let qrow = &ql[(r * hq + qh) * d..][..d];
                    let want = attend_f64(qrow, &rows(&khat, kv), &rows(&vhat, kv), scale);
                    let got = &out[(r * hq + qh) * d..][..d];
                    let n: f64 = want.iter().map(|x| x * x).sum::<f64>().sqrt();
                    let err: f64 = got
                        .iter()
                        .zip(&want)
                        .map(|(&a, b)| (a as f64 - b).powi(2))
                        .sum::<f64>()
                        .sqrt()
                        / n.max(1e-6);
                    worst = worst.max(err);
                    // Planted bug: the LUT of the wrong head (KV head kv+1's λ and codebook)
                    // scored against head kv's indices.
                    let wrong = (kv + 1) % h;
                    let mut lut = Vec::new();
                    let cbn = 256 * preset.sub_dim;
                    prepare_query(
                        qrow,
                        &tab.lambda[wrong * d..][..d],
                        &tab.keys[wrong * cbn..][..cbn],
                        preset,
                        64,
                        &mut lut,
                    );
                    let rw = kr.len() / (t * h);
                    let s: Vec<f64> = (0..upto)
                        .map(|j| {
                            lut_score(&lut, &kr[(j * h + kv) * rw..][..rw], preset) as f64 * scale
                        })
                        .collect();
                    let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let w: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
                    let z: f64 = w.iter().sum();
                    let vrows = rows(&vhat, kv);
                    let bad: Vec<f64> = (0..d)
                        .map(|i| {
                            w.iter()
                                .zip(&vrows)
                                .map(|(p, v)| p * v[i] as f64)
                                .sum::<f64>()
                                / z
                        })
                        .collect();
                    let berr = bad
                        .iter()
                        .zip(&want)
                        .map(|(a, b)| (a - b).powi(2))
                        .sum::<f64>()
                        .sqrt()
                        / n.max(1e-6);
                    worst_wrong_head = worst_wrong_head.min(berr);
                }
            }
            eprintln!(
                "vecinfer:bits={bits} layer {l}: attention rel. error vs f64 over the reconstruction {worst:.2e}; wrong-head LUT (planted) best row {worst_wrong_head:.2e}"
            );
            assert!(worst < 1e-4, "attention through the hooks: {worst}");
            assert!(
                worst_wrong_head > 1e-3,
                "the planted wrong-head LUT must be visible: {worst_wrong_head}"
            );
        }
    }
    std::fs::remove_file(&p).ok();
}

/// A VecInfer layer on a WGSL path (the fused quantize kernel through the store: ring, two
/// appends, a residual window): its reconstruction equals the CPU layer's up to near-tie
/// indices (rows that differ counted; the reconstruction MSE within 1 % of the CPU's, the
/// spec's rule); the bytes the GPU append allocates are O(N) (printed, and far below one
/// `[N, C, d_s]` distance tensor). Its attention: [`gpu_lut_attention_matches_reference`].
fn gpu_layer_quantizes_like_the_reference(t: &common::Target) {
    if !t.is_gpu() {
        eprintln!(
            "gpu_layer_quantizes_like_the_reference[{}]: GPU layers only (kernel parity: tests/vecinfer_kernels.rs)",
            t.name()
        );
        return;
    }
    let Some(p) = calib_file(&format!("gpu-{}", t.name())) else {
        return;
    };
    let Some(story) = common::shared_fixture("story-512.safetensors", "gpu_layer") else {
        return;
    };
    let (sk, k) = common::load_f16(&story, "k");
    let (_, v) = common::load_f16(&story, "v");
    let (n, h, d) = (512usize, sk[2], sk[3]);
    let ctx = t.ctx();
    for bits in [1u32, 2] {
        let preset = Preset::for_bits(bits).unwrap();
        let spec = format!("vecinfer:bits={bits},residual=16,calib={}", p.display());
        let m = Method::parse(&spec).unwrap();
        let kl: Vec<f16> = layer_of(&k, &sk, 10)[..n * h * d]
            .iter()
            .map(|&x| f16::from_f32(x))
            .collect();
        let vl: Vec<f16> = layer_of(&v, &sk, 10)[..n * h * d]
            .iter()
            .map(|&x| f16::from_f32(x))
            .collect();
        let mut cpu = m
            .layer_at(&Context::cpu(), 1, h, d, PathChoice::Cpu)
            .unwrap();
        let mut gpu = m.layer_at(ctx, 1, h, d, t.path()).unwrap();
        let cut = 301 * h * d;
        for l in [&mut cpu, &mut gpu] {
            l.append(Input::F16(&kl[..cut]), Input::F16(&vl[..cut]))
                .unwrap();
        }
        let before = ctx.allocated_bytes();
        gpu.append(Input::F16(&kl[cut..]), Input::F16(&vl[cut..]))
            .unwrap();
        let grown = ctx.allocated_bytes() - before;
        cpu.append(Input::F16(&kl[cut..]), Input::F16(&vl[cut..]))
            .unwrap();
        let appended = (n - 301) as u64;
        let n_sub = 64 / preset.sub_dim as u64;
        let dist_tensor = appended * h as u64 * n_sub * 256 * 4 * 2;
        // O(N): the incoming rows (f16, both sides), the segments' codes (a byte per index,
        // both sides, possibly with capacity ahead: ×4), the ring and uniforms (constant).
        let linear = appended * (h * d) as u64 * 2 * 2 + 4 * appended * h as u64 * n_sub * 2;
        eprintln!(
            "{spec} [{}]: append of {appended} tokens allocated {grown} bytes (O(N) bound {} bytes; one [N, C, d_s] distance tensor would be {dist_tensor})",
            t.name(),
            linear + (1 << 16)
        );
        assert!(
            grown <= linear + (1 << 16),
            "{spec}: the append allocated {grown} bytes"
        );
        let (ck, cv) = cpu.reconstruct().unwrap();
        let (gk, gv) = gpu.reconstruct().unwrap();
        for (side, c, g, x) in [("keys", &ck, &gk, &kl), ("values", &cv, &gv, &vl)] {
            let rows = c
                .chunks_exact(d)
                .zip(g.chunks_exact(d))
                .filter(|(a, b)| a != b)
                .count();
            let mse = |r: &[f32]| {
                r.iter()
                    .zip(x.iter())
                    .map(|(a, b)| (a - b.to_f32()) as f64)
                    .map(|e| e * e)
                    .sum::<f64>()
                    / r.len() as f64
            };
            let (mc, mg) = (mse(c), mse(g));
            eprintln!(
                "{spec} [{}] {side}: {rows} of {} vectors differ (near-tie indices); MSE {mg:.4e} vs CPU {mc:.4e}",
                t.name(),
                n * h
            );
            assert!(
                (mg - mc).abs() <= 0.01 * mc,
                "{spec} {side}: MSE {mg} vs CPU {mc}"
            );
            assert!(rows * 100 <= n * h, "{spec} {side}: {rows} vectors differ");
        }
    }
    std::fs::remove_file(&p).ok();
}
parity_tests!(gpu_layer_quantizes_like_the_reference);

/// LUT attention on GPU layers (the fused quantize kernel's words) against the CPU reference
/// over the same words, decode and a windowed Tq = 5 chunk, within 1e-4 per row, 1e-3 with an
/// f16 LUT (vecinfer.md): on the story fixture (D = 64) VecInfer on both sides and paired with
/// KIVI either way; on the synthetic D = 32 model with the device's limit (an f32 LUT where it
/// fits) and with the limit lowered to 24 KiB (f16 forced, said by `describe()`). Where not
/// even the f16 LUT fits (bits=2 at D = 64 on a 32 KiB device; bits=2 at D = 32 on a context
/// lowered to 16 KiB), the keys are scored from the codebook, within 1e-4; where not even that
/// fits, attention is a typed `Limit` error and the cache is untouched (it still reconstructs
/// as before).
fn gpu_lut_attention_matches_reference(t: &common::Target) {
    use common::vecinfer_calib::{shared_calib, story, synthetic, synthetic_calib};
    use kvpack::attention::plan::workgroup_bytes;
    use kvpack::codecs::vecinfer::codec::{LutForm, codebook_bytes, lut_bytes, lut_form};
    if !t.is_gpu() {
        eprintln!(
            "gpu_lut_attention_matches_reference[{}]: GPU layers only (the CPU reference: story_attention_through_the_lut_hooks; kernels on every path: lut_attention_kernels_match_reference)",
            t.name()
        );
        return;
    }
    let Some(p) = shared_calib() else {
        return;
    };
    let (tk, tq) = (300usize, 5usize);
    let (ps, ss) = (p.display(), synthetic_calib().display());
    let limit = t.ctx().max_workgroup_storage_size();
    let forced = t.ctx().with_max_workgroup_storage_size(24 << 10).unwrap();
    let forced16 = t.ctx().with_max_workgroup_storage_size(16 << 10).unwrap();
    let dev = t.ctx().clone();
    let specs = [
        (
            format!("vecinfer:bits=1,residual=16,calib={ps}"),
            &dev,
            false,
        ),
        (format!("vecinfer:bits=2,calib={ps}"), &dev, false),
        (
            format!("vecinfer:bits=1,calib={ps}/kivi:bits=4,group=32,residual=32"),
            &dev,
            false,
        ),
        (
            format!("kivi:bits=4,group=32/vecinfer:bits=2,residual=32,calib={ps}"),
            &dev,
            false,
        ),
        (
            format!("vecinfer:bits=1,residual=16,calib={ss}"),
            &dev,
            true,
        ),
        (
            format!("vecinfer:bits=1,residual=16,calib={ss}"),
            &forced,
            true,
        ),
        (
            format!("vecinfer:bits=2,residual=16,calib={ss}"),
            &forced16,
            true,
        ),
    ];
    let mut ran = [false; 3];
    for (spec, ctx, synth) in &specs {
        let (q, k, v, (hq, h, d)) = if *synth {
            synthetic(3, tk, tq)
        } else {
            story("gpu_lut", 10, tk, tq).expect("story fixture")
        };
        let m = Method::parse(spec).unwrap();
        let mut layer = m
            .layer_at(ctx, usize::from(!synth), h, d, t.path())
            .unwrap();
        let cut = 113 * h * d;
        layer
            .append(Input::F32(&k[..cut]), Input::F32(&v[..cut]))
            .unwrap();
        layer
            .append(Input::F32(&k[cut..]), Input::F32(&v[cut..]))
            .unwrap();
        let desc = layer.describe();
        let keys_vi = spec.starts_with("vecinfer");
        let lut16 = desc.contains("GPU LUT f16");
        let cb = desc.contains("GPU scores from the codebook");
        assert_eq!(
            keys_vi,
            lut16 || cb || desc.contains("GPU LUT f32"),
            "{spec}: describe() names the form of VecInfer keys' scores: {desc}"
        );
        let lim = ctx.max_workgroup_storage_size() as usize;
        let (p_, n_sub) = (
            d.next_power_of_two(),
            if spec.starts_with("vecinfer:bits=1") {
                d / 8
            } else {
                d / 4
            },
        );
        let mut fits = true;
        if keys_vi {
            let form = lut_form(d, p_, n_sub, 256, lim);
            assert_eq!(
                (lut16, cb),
                (form == LutForm::F16, form == LutForm::Codebook),
                "{spec}: {desc}"
            );
            let ds = if n_sub == d / 8 { 8 } else { 4 };
            let own = if cb {
                codebook_bytes(256, ds)
            } else {
                lut_bytes(n_sub, 256, lut16)
            };
            fits = workgroup_bytes(d, p_, p_) + own <= lim;
        }
        if std::ptr::eq(*ctx, &forced) {
            assert!(lut16, "the lowered limit must force the f16 LUT: {desc}");
        }
        if std::ptr::eq(*ctx, &forced16) {
            assert!(cb, "16 KiB must force the codebook form: {desc}");
        }
        for (rows, opts) in [
            (1, AttendOptions::default()),
            (tq, AttendOptions::default().window(Some(90)).sinks(3)),
        ] {
            let qq = &q[(tq - rows) * hq * d..];
            let reference = layer.attend_reference(qq, hq, &opts).unwrap();
            if !fits {
                let before = layer.reconstruct().unwrap();
                let e = layer.attend(qq, hq, &opts).unwrap_err();
                eprintln!(
                    "gpu_lut[{}] {spec} Tq={rows} (device limit {limit}): {desc}: refused: {e}",
                    t.name()
                );
                assert!(matches!(e, Error::Limit { .. }), "{spec}: {e}");
                assert_eq!(layer.reconstruct().unwrap(), before, "{spec}: nothing lost");
                continue;
            }
            let out = layer.attend(qq, hq, &opts).unwrap();
            let err = common::rel_l2_rows(&out, &reference, d);
            let tol = if lut16 { 1e-3 } else { 1e-4 };
            if keys_vi {
                ran[usize::from(lut16) + 2 * usize::from(cb)] = true;
            }
            eprintln!(
                "gpu_lut[{}] {spec} Tq={rows} (device limit {limit}, planned {lim}): {desc}: worst row rel L2 {err:.2e} (bound {tol:e})",
                t.name(),
            );
            assert!(
                err <= tol,
                "{} {spec} Tq={rows}: worst row rel L2 {err:e}",
                t.name()
            );
        }
    }
    assert_eq!(
        ran,
        [true, true, true],
        "{}: both LUT precisions and the codebook form ran on the device",
        t.name()
    );
}
parity_tests!(gpu_lut_attention_matches_reference);

/// The LUT attention kernels one by one (tests/common/vecinfer_calib.rs `lut_cases`) on every
/// path including the MSL emulator; both LUT precisions are run.
fn lut_attention_kernels_match_reference(t: &common::Target) {
    let Some(p) = common::vecinfer_calib::shared_calib() else {
        return;
    };
    let mut seen = [false; 3];
    for lc in common::vecinfer_calib::lut_cases(Some(p), true) {
        let form = common::vecinfer_calib::check_lut_case(t, &lc);
        if lc.case.method.starts_with("vecinfer") {
            seen[form] = true;
        }
    }
    assert_eq!(
        seen,
        [true, true, true],
        "{}: both LUT precisions and the codebook form ran",
        t.name()
    );
}
parity_tests!(lut_attention_kernels_match_reference, msl);
