//! Q-Filters on real SmolLM2-135M tensors (../shared/spec/qfilters.md, "Quality checks"):
//! filters calibrated on the `paris` fixture's queries (all 30 layers), checked on the other
//! text (`story-512`): the Spearman correlation of ⟨k_j, u⟩ with the attention mass each key
//! receives from later queries, per (layer, KV head), and its negative control (−u, asserted
//! negative); then end to end (the model, teacher-forced): evicting with the flipped filter is
//! clearly worse than with u at the same budget.

mod common;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use kvpack::calib::ModelIdentity;
use kvpack::calib::train::{CalibOptions, calibrate_capture};
use kvpack::model::{QkvCapture, Session, Weights};
use kvpack::policy::spearman;
use kvpack::{Context, Method, PathChoice};

use common::vecinfer_calib::layer_of;

/// The Q-Filters calibration of the paris fixture (30 layers), once per process.
fn paris_filters(test: &str) -> Option<&'static (PathBuf, Vec<f32>)> {
    static P: OnceLock<Option<(PathBuf, Vec<f32>)>> = OnceLock::new();
    let made = P.get_or_init(|| {
        let paris = common::shared_fixture("paris.safetensors", "paris_filters")?;
        let (sq, q) = common::load_f16(&paris, "q");
        let (sk, k) = common::load_f16(&paris, "k");
        let (_, v) = common::load_f16(&paris, "v");
        let layers = sq[0];
        let cap = QkvCapture {
            tokens: sk[1],
            q: (0..layers).map(|l| layer_of(&q, &sq, l)).collect(),
            k: (0..layers).map(|l| layer_of(&k, &sk, l)).collect(),
            v: (0..layers).map(|l| layer_of(&v, &sk, l)).collect(),
        };
        let id = ModelIdentity {
            name: "SmolLM2-135M-Instruct (paris fixture)".into(),
            arch: "llama".into(),
            layers,
            q_heads: sq[2],
            kv_heads: sk[2],
            head_dim: sk[3],
        };
        let opts = CalibOptions {
            vecinfer: Vec::new(),
            ..Default::default()
        };
        let cal =
            calibrate_capture(&cap, id, "paris", "paris.safetensors", &opts, &|_| {}).unwrap();
        let p = std::env::temp_dir().join(format!(
            "kvpack-eviction-model-{}-paris.safetensors",
            std::process::id()
        ));
        cal.write(&p).unwrap();
        Some((p, cal.qfilters.unwrap().filters))
    });
    // shared_fixture reported the skip (a failure under KVPACK_REQUIRE_SHARED=1).
    let _ = test;
    made.as_ref()
}

/// SmolLM2's weights, loaded once; `None` after a visible skip (a failure under
/// `KVPACK_REQUIRE_MODELS=1`).
fn smollm2(test: &str) -> Option<Arc<Weights>> {
    static W: OnceLock<Option<Arc<Weights>>> = OnceLock::new();
    let model = kvpack::model::gguf::smollm2_path();
    let w = W.get_or_init(|| {
        model
            .is_file()
            .then(|| Arc::new(kvpack::model::load_model("smollm2", None).unwrap().weights))
    });
    if w.is_none() {
        let msg = format!(
            "SKIP {test} because {} is absent (run scripts/fetch-models.sh)",
            model.display()
        );
        if std::env::var("KVPACK_REQUIRE_MODELS").is_ok_and(|v| v == "1") {
            panic!("{msg} (KVPACK_REQUIRE_MODELS=1 forbids skips)");
        }
        eprintln!("{msg}");
    }
    w.clone()
}

/// The first `n` token ids of a fixture.
fn story_ids(path: &std::path::Path, n: usize) -> Vec<u32> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensor("token_ids")
        .unwrap()
        .data()
        .chunks_exact(4)
        .take(n)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u32)
        .collect()
}

#[test]
fn spearman_on_real_keys_is_positive_and_the_flipped_filter_negative() {
    let test = "spearman_on_real_keys";
    let Some((_, filters)) = paris_filters(test) else {
        return;
    };
    let Some(story) = common::shared_fixture("story-512.safetensors", test) else {
        return;
    };
    let (sq, q) = common::load_f16(&story, "q");
    let (sk, k) = common::load_f16(&story, "k");
    let (layers, hq, hkv, d) = (sq[0], sq[2], sk[2], sk[3]);
    let (mut own, mut flipped) = (Vec::new(), Vec::new());
    let (mut in_sample, mut logit) = (Vec::new(), Vec::new());
    for l in 0..layers {
        let (ql, kl) = (layer_of(&q, &sq, l), layer_of(&k, &sk, l));
        let u = &filters[l * hkv * d..(l + 1) * hkv * d];
        let neg: Vec<f32> = u.iter().map(|x| -x).collect();
        let mass = spearman::attention_mass(&ql, &kl, hq, hkv, d);
        let c = kvpack::calib::qfilters::references(&ql, &kl, hq, hkv, d, l, 3000, &mass);
        in_sample.extend(c.in_sample.into_iter().flatten());
        logit.extend(c.mean_logit.into_iter().flatten());
        own.extend(
            spearman::filter_spearman_with_mass(&kl, hkv, d, u, &mass)
                .into_iter()
                .flatten(),
        );
        flipped.extend(
            spearman::filter_spearman_with_mass(&kl, hkv, d, &neg, &mass)
                .into_iter()
                .flatten(),
        );
    }
    assert_eq!(
        own.len(),
        layers * hkv,
        "a head without a defined correlation"
    );
    let mean = |x: &[f64]| x.iter().sum::<f64>() / x.len() as f64;
    let worst = own.iter().copied().fold(f64::INFINITY, f64::min);
    eprintln!(
        "{test}: Spearman over {} (layer, KV head) pairs: mean {:+.3}, worst {worst:+.3}; flipped mean {:+.3} (spec target: mean ≥ 0.80)",
        own.len(),
        mean(&own),
        mean(&flipped)
    );
    // Filters from the 122-token paris text measure +0.49 here (deterministic data; 900
    // tokens of calibration text give +0.685 through `kvpack eval`, README): the bound
    // guards the sign and most of the size (the seed's backwards filter gave −0.03).
    assert!(mean(&own) > 0.4, "Spearman mean {:.3}", mean(&own));
    assert!(mean(&flipped) < -0.4, "flipped mean {:.3}", mean(&flipped));
    // The references on the story (`kvpack eval` reports them): filters calibrated on the
    // story itself, and the mean logit from the story's later queries (the score a filter
    // stands in for). Measured +0.745 and +0.795: the spec's 0.80 target is above both on this
    // model and text. Deterministic data: the order with margins guards the in-sample
    // calibration and the mean logit against regressions (it is not a law: on stories260K the
    // in-sample filters beat the mean logit).
    assert_eq!((in_sample.len(), logit.len()), (layers * hkv, layers * hkv));
    eprintln!(
        "{test}: references: filters calibrated on the story {:+.3}, mean logit {:+.3}",
        mean(&in_sample),
        mean(&logit)
    );
    assert!(
        mean(&own) + 0.1 < mean(&in_sample) && mean(&in_sample) + 0.02 < mean(&logit),
        "paris filters {:+.3}, in-sample filters {:+.3}, mean logit {:+.3}",
        mean(&own),
        mean(&in_sample),
        mean(&logit)
    );
}

/// What the end-to-end tests need: the paris filters' file, the story fixture and the model;
/// `None` after a visible skip.
fn setup(test: &str) -> Option<(&'static PathBuf, PathBuf, Arc<Weights>)> {
    let (calib, _) = paris_filters(test)?;
    let story = common::shared_fixture("story-512.safetensors", test)?;
    Some((calib, story, smollm2(test)?))
}

#[test]
fn evicting_with_the_flipped_filter_is_clearly_worse() {
    let test = "evicting_with_the_flipped_filter";
    let Some((calib, story, weights)) = setup(test) else {
        return;
    };
    let ids = story_ids(&story, 160);
    let ctx = Context::cpu();
    let ppl = |spec: &str| -> f64 {
        let m = Method::parse(spec).unwrap();
        let mut s = Session::new(weights.clone(), &ctx, m, PathChoice::Cpu).unwrap();
        let (p, _) = kvpack::model::forward::perplexity(&mut s, &ids).unwrap();
        let held = s.memory().tokens / s.config().layers;
        eprintln!("{test}: {spec}: perplexity {p:.3}, {held} tokens held per KV head");
        p
    };
    let c = calib.display();
    let good = ppl(&format!("f16+qfilters:budget=48,calib={c}"));
    let bad = ppl(&format!("f16+qfilters:budget=48,calib={c},flip=true"));
    assert!(
        bad > 1.15 * good,
        "the flipped filter must be clearly worse: {bad:.3} vs {good:.3}"
    );
}

/// A session under Q-Filters eviction saves after 70 tokens and resumes: the next tokens'
/// logits are the ones the saved session gives (the file holds the positions and scores).
#[test]
fn a_session_under_eviction_saves_and_resumes() {
    let test = "a_session_under_eviction_saves_and_resumes";
    let Some((calib, story, weights)) = setup(test) else {
        return;
    };
    let ids = story_ids(&story, 76);
    let ctx = Context::cpu();
    let m = Method::parse(&format!(
        "kivi:bits=4,group=8,residual=8+qfilters:budget=40,sinks=2,calib={}",
        calib.display()
    ))
    .unwrap();
    let mut a = Session::new(weights.clone(), &ctx, m, PathChoice::Cpu).unwrap();
    for &t in &ids[..70] {
        a.forward_token(t).unwrap();
    }
    assert!(
        a.memory().tokens / a.config().layers < 70,
        "nothing evicted"
    );
    let file = std::env::temp_dir().join(format!(
        "kvpack-eviction-session-{}.kvc",
        std::process::id()
    ));
    a.save(&file).unwrap();
    let mut b = Session::resume(weights, &ctx, &file, PathChoice::Cpu).unwrap();
    std::fs::remove_file(&file).ok();
    assert_eq!(b.pos(), 70);
    for &t in &ids[70..] {
        assert_eq!(a.forward_token(t).unwrap(), b.forward_token(t).unwrap());
    }
}
