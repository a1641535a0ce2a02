//! The calibration pipeline (src/calib/, ../shared/spec/vecinfer.md "Codebooks" and
//! ../shared/spec/qfilters.md "Calibration") on real models: stories260K through the library
//! API (small presets: its head_dim is 8) and SmolLM2 through `kvpack calibrate`. Checked:
//! the same text and seed give the same bytes, another seed other codebooks; λ, the filters'
//! orientation and the GQA average recomputed here from the captured tensors by the spec's
//! formulas; mismatched, corrupt, missing and other-version files are typed errors.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kvpack::Error;
use kvpack::calib::Calibration;
use kvpack::calib::train::{CalibOptions, calibrate_capture, capture, identity};
use kvpack::cpu::vecinfer::Preset;
use kvpack::model::load_model;

fn stories(test: &str) -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/models/stories260K");
    if p.join("stories260K.bin").exists() {
        return Some(p);
    }
    let msg = format!("SKIP {test} because {} is absent", p.display());
    if std::env::var("KVPACK_REQUIRE_SHARED").is_ok_and(|v| v == "1") {
        panic!("{msg} (KVPACK_REQUIRE_SHARED=1 forbids skips)");
    }
    eprintln!("{msg}");
    None
}

fn small_opts(seed: u64) -> CalibOptions {
    CalibOptions {
        seed,
        vecinfer: vec![Preset::new(4, 16).unwrap(), Preset::new(8, 16).unwrap()],
        qfilters: true,
        chunk: 32,
        ..CalibOptions::default()
    }
}

/// (calibration, the capture it came from) for stories260K on its held-out story.
fn stories_calibration(dir: &Path, seed: u64) -> (Calibration, kvpack::model::QkvCapture) {
    let model = load_model(dir.join("stories260K.bin").to_str().unwrap(), None).unwrap();
    let text = std::fs::read_to_string(dir.join("story_heldout.txt")).unwrap();
    let ids = model.tokenizer.encode(&text);
    let id = identity(&model);
    let cap = capture(Arc::new(model.weights), &ids, 32, &|_| {}).unwrap();
    let cal = calibrate_capture(
        &cap,
        id,
        &text,
        "story_heldout.txt",
        &small_opts(seed),
        &|_| {},
    )
    .unwrap();
    (cal, cap)
}

#[test]
fn stories260k_reproducible_and_by_the_spec() {
    let Some(dir) = stories("stories260k_reproducible_and_by_the_spec") else {
        return;
    };
    let (a, cap) = stories_calibration(&dir, 7);
    let (b, _) = stories_calibration(&dir, 7);
    let bytes = a.to_bytes().unwrap();
    assert_eq!(
        bytes,
        b.to_bytes().unwrap(),
        "same text and seed, same file"
    );
    let (c, _) = stories_calibration(&dir, 8);
    let (va, vc) = (a.vecinfer.as_ref().unwrap(), c.vecinfer.as_ref().unwrap());
    assert_ne!(
        va.keys, vc.keys,
        "another seed draws other k-means++ centres"
    );
    assert_eq!(va.lambda, vc.lambda, "λ does not depend on the seed");
    // The file round-trips.
    let back = Calibration::from_bytes(&bytes, "mem").unwrap();
    assert!(back.meta == a.meta, "meta {:?} vs {:?}", back.meta, a.meta);
    assert!(
        back.vecinfer == a.vecinfer,
        "vecinfer tables differ after the round trip"
    );
    let (qa, qb) = (
        a.qfilters.as_ref().unwrap(),
        back.qfilters.as_ref().unwrap(),
    );
    assert!(qa.filters == qb.filters && qa.query_filters == qb.query_filters && qa.rows == qb.rows);
    for (x, y) in qa.report.iter().zip(&qb.report) {
        assert_eq!(x, y);
    }

    let m = &a.meta.model;
    let (l, h, hq, d) = (m.layers, m.kv_heads, m.q_heads, m.head_dim);
    assert_eq!(cap.tokens, a.meta.tokens);
    // λ by the spec's formula, from the f16-rounded keys.
    for li in 0..l {
        for hi in 0..h {
            for ch in 0..d {
                let mx = cap.k[li]
                    .chunks_exact(h * d)
                    .map(|t| t[hi * d + ch].abs())
                    .fold(0.0f32, f32::max);
                let want = mx.sqrt().max(1e-4);
                assert_eq!(
                    va.lambda[(li * h + hi) * d + ch],
                    want,
                    "λ[{li}][{hi}][{ch}]"
                );
            }
        }
    }
    // Centered keys: λ of f16(k − μ), μ the file's key means; codebooks for every key preset,
    // trained on other points than the plain ones.
    let (mu, ce) = (
        a.key_means.as_ref().unwrap(),
        va.centered.as_ref().expect("centered key tables"),
    );
    for li in 0..l {
        for hi in 0..h {
            for ch in 0..d {
                let i = (li * h + hi) * d + ch;
                let mx = cap.k[li]
                    .chunks_exact(h * d)
                    .map(|t| half::f16::from_f32(t[hi * d + ch] - mu[i]).to_f32().abs())
                    .fold(0.0f32, f32::max);
                assert_eq!(
                    ce.lambda[i],
                    mx.sqrt().max(1e-4),
                    "centered λ[{li}][{hi}][{ch}]"
                );
            }
        }
    }
    assert_eq!(
        ce.keys.keys().collect::<Vec<_>>(),
        va.keys.keys().collect::<Vec<_>>()
    );
    assert_ne!(ce.keys, va.keys, "centered codebooks are the plain ones");
    // Every codebook row finite; sizes per preset.
    for (&(ds, cc), cb) in va.keys.iter().chain(&va.values).chain(&ce.keys) {
        assert_eq!(cb.len(), l * h * cc * ds);
        assert!(cb.iter().all(|x| x.is_finite()));
    }
    // Q-Filters: unit vectors, majority orientation recomputed here, GQA mean renormalized.
    let q = a.qfilters.as_ref().unwrap();
    assert_eq!(q.report.len(), l * hq);
    let group = hq / h;
    for li in 0..l {
        for qh in 0..hq {
            let u = &q.query_filters[(li * hq + qh) * d..][..d];
            let n: f64 = u.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
            assert!((n - 1.0).abs() < 1e-5, "‖u_h‖ = {n}");
            let pos = cap.q[li]
                .chunks_exact(hq * d)
                .filter(|t| {
                    t[qh * d..][..d]
                        .iter()
                        .zip(u)
                        .map(|(a, b)| a * b)
                        .sum::<f32>()
                        > 0.0
                })
                .count();
            assert!(
                2 * pos > cap.tokens,
                "layer {li} head {qh}: {pos} of {} rows positive",
                cap.tokens
            );
        }
        for g in 0..h {
            let mut mean = vec![0.0f64; d];
            for qh in g * group..(g + 1) * group {
                for (m, &x) in mean
                    .iter_mut()
                    .zip(&q.query_filters[(li * hq + qh) * d..][..d])
                {
                    *m += x as f64;
                }
            }
            let n = mean.iter().map(|x| x * x).sum::<f64>().sqrt();
            for (i, m) in mean.iter().enumerate() {
                let got = q.filters[(li * h + g) * d + i] as f64;
                assert!(
                    (got - m / n).abs() < 1e-5,
                    "filter [{li}][{g}][{i}] {got} vs {}",
                    m / n
                );
            }
        }
    }
    let dis = q.report.iter().filter(|r| r.disagree()).count();
    eprintln!(
        "stories260K: {} query heads, majority and sum-of-signs rules disagree on {dis}",
        q.report.len()
    );
}

#[test]
fn mismatched_and_bad_files_are_typed_errors() {
    let Some(dir) = stories("mismatched_and_bad_files_are_typed_errors") else {
        return;
    };
    let (a, _) = stories_calibration(&dir, 7);
    let m = a.meta.model.clone();
    assert!(a.check_shape(m.layers, m.kv_heads, m.head_dim).is_ok());
    for (l, h, d) in [
        (m.layers + 1, m.kv_heads, m.head_dim),
        (m.layers, m.kv_heads * 2, m.head_dim),
        (m.layers, m.kv_heads, 64),
    ] {
        assert!(
            matches!(a.check_shape(l, h, d), Err(Error::Calibration { .. })),
            "{l} {h} {d}"
        );
    }
    let p4 = Preset::new(4, 16).unwrap();
    assert!(a.vecinfer_layer(0, p4, p4).is_ok());
    let other = Preset::for_bits(2).unwrap();
    let e = a.vecinfer_layer(0, other, p4).unwrap_err();
    assert!(
        matches!(&e, Error::Calibration { message, .. } if message.contains("d_s 4 C 256")),
        "{e}"
    );
    assert!(matches!(
        a.vecinfer_layer(m.layers, p4, p4),
        Err(Error::Calibration { .. })
    ));
    let mut no_vec = a.clone();
    no_vec.vecinfer = None;
    assert!(matches!(
        no_vec.vecinfer_layer(0, p4, p4),
        Err(Error::Calibration { .. })
    ));

    let bytes = a.to_bytes().unwrap();
    let bad = |b: &[u8]| Calibration::from_bytes(b, "bad");
    assert!(matches!(
        bad(&bytes[..bytes.len() - 4]),
        Err(Error::Calibration { .. })
    ));
    assert!(matches!(bad(b"not a file"), Err(Error::Calibration { .. })));
    // Another version: patch the metadata's "version":1 (same length).
    // (Searched in the bytes: a lossy string would shift offsets where the header's length
    // prefix is not UTF-8.)
    let pat = b"\\\"version\\\":1";
    let at = bytes
        .windows(pat.len())
        .position(|w| w == pat)
        .expect("version in the header");
    let mut v2 = bytes.clone();
    v2[at + "\\\"version\\\":".len()] = b'2';
    let e = bad(&v2).unwrap_err();
    assert!(
        matches!(&e, Error::Calibration { message, .. } if message.contains("version")),
        "{e}"
    );
    // A safetensors file without kvpack metadata (a KV fixture-like file).
    let plain = safetensors::serialize(
        [(
            "k",
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![1], &[0u8; 4])
                .unwrap(),
        )],
        None,
    )
    .unwrap();
    assert!(matches!(bad(&plain), Err(Error::Calibration { .. })));
    assert!(matches!(
        Calibration::read(Path::new("/nonexistent/calib.safetensors")),
        Err(Error::Calibration { .. })
    ));
}

/// `kvpack calibrate` on SmolLM2 (40 tokens, C = 256 at d_s 8): twice the same bytes.
#[test]
fn cli_calibrate_smollm2_reproducible() {
    if kvpack::model::fetched::path("smollm2").is_none() {
        let msg = "SKIP cli_calibrate_smollm2_reproducible because SmolLM2 is not fetched (scripts/fetch-models.sh)";
        if std::env::var("KVPACK_REQUIRE_MODELS").is_ok_and(|v| v == "1") {
            panic!("{msg} (KVPACK_REQUIRE_MODELS=1 forbids skips)");
        }
        eprintln!("{msg}");
        return;
    }
    let Some(dir) = stories("cli_calibrate_smollm2_reproducible") else {
        return;
    };
    let text = dir.join("story_heldout.txt");
    let tmp = std::env::temp_dir().join(format!("kvpack-calib-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let run = |out: &Path| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_kvpack"))
            .args([
                "calibrate",
                "--model",
                "smollm2",
                "--max-tokens",
                "40",
                "--bits",
                "1",
                "--text",
            ])
            .arg(&text)
            .arg("--out")
            .arg(out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let (f1, f2) = (tmp.join("a.safetensors"), tmp.join("b.safetensors"));
    let j = run(&f1);
    run(&f2);
    assert_eq!(std::fs::read(&f1).unwrap(), std::fs::read(&f2).unwrap());
    assert_eq!(j["qfilters"]["heads"], 270);
    let cal = Calibration::read(&f1).unwrap();
    cal.check_shape(30, 3, 64).unwrap();
    assert!(
        cal.vecinfer_layer(
            29,
            Preset::for_bits(1).unwrap(),
            Preset::for_bits(1).unwrap()
        )
        .is_ok()
    );
    // --bits 1 only: asking the 2-bit preset is an error.
    assert!(
        cal.vecinfer_layer(
            0,
            Preset::for_bits(2).unwrap(),
            Preset::for_bits(1).unwrap()
        )
        .is_err()
    );
    // A bad --for is refused.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_kvpack"))
        .args([
            "calibrate",
            "--model",
            "smollm2",
            "--for",
            "vecinfer,bogus",
            "--text",
        ])
        .arg(&text)
        .arg("--out")
        .arg(tmp.join("c.safetensors"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("bogus"));
    std::fs::remove_dir_all(&tmp).ok();
}
