//! `kvpack eval` end to end: stories260K (../shared/models/stories260K/) through f16 and two
//! KIVI caches, the JSON and PNG outputs, bad arguments, and SmolLM2's f16 perplexity on the
//! Paris fixture's ids when the GGUF has been fetched.
#![cfg(feature = "cli")]

mod cli_support;
mod common;

use cli_support::{BIN, kvpack};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::st::scratch;
use serde_json::Value;

/// Reference perplexity of stories260K on story_heldout.txt (f32 forward following run.c).
const HELDOUT_PPL: f64 = 3.388;
/// Full-precision perplexity of SmolLM2-135M-Instruct on the Paris fixture's ids.
const PARIS_PPL: f64 = 6.095;

/// `../shared/models/stories260K/`, or `None` after a visible skip (a failure when
/// `KVPACK_REQUIRE_SHARED=1`).
fn stories(test: &str) -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/models/stories260K");
    if ["stories260K.bin", "tok512.bin", "story_heldout.txt"]
        .iter()
        .all(|f| p.join(f).is_file())
    {
        return Some(p);
    }
    let msg = format!(
        "SKIP {test} because {} is absent (it exists in CI)",
        p.display()
    );
    if std::env::var("KVPACK_REQUIRE_SHARED").is_ok_and(|v| v == "1") {
        panic!("{msg} (KVPACK_REQUIRE_SHARED=1 forbids skips)");
    }
    eprintln!("{msg}");
    None
}

/// The fetched SmolLM2 GGUF and the Paris fixture, or `None` after a visible skip (a failure
/// when `KVPACK_REQUIRE_MODELS=1`).
fn smollm2(test: &str) -> Option<PathBuf> {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/smollm2-135m/paris.safetensors");
    let reason = match kvpack::model::gguf::find_smollm2() {
        Ok(_) if fixture.is_file() => return Some(fixture),
        Ok(_) => format!("{} is absent", fixture.display()),
        Err(e) => e.to_string(),
    };
    let msg = format!("SKIP {test} because {reason}");
    if std::env::var("KVPACK_REQUIRE_MODELS").is_ok_and(|v| v == "1") {
        panic!("{msg} (KVPACK_REQUIRE_MODELS=1 forbids skips)");
    }
    eprintln!("{msg}");
    None
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kvpack failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn num(row: &Value, key: &str) -> f64 {
    row[key]
        .as_f64()
        .unwrap_or_else(|| panic!("`{key}` of {row} is not a number"))
}

#[test]
fn eval_stories260k_f16_and_kivi() {
    let Some(dir) = stories("eval_stories260k_f16_and_kivi") else {
        return;
    };
    let tmp = scratch("eval", "stories");
    let (json, png) = (tmp.join("eval.json"), tmp.join("eval.png"));
    let out = kvpack(&[
        "eval",
        "--model",
        s(&dir.join("stories260K.bin")),
        "--tokenizer",
        s(&dir.join("tok512.bin")),
        "--text",
        s(&dir.join("story_heldout.txt")),
        "--methods",
        "f16,kivi-4-32-0,kivi-2-32-0",
        "--path",
        "cpu",
        "--json",
        s(&json),
        "--plot",
        s(&png),
    ]);
    let stdout = ok(&out);
    eprintln!("{stdout}");

    // The table: a header in the specified column order and one row per method.
    let header = stdout
        .lines()
        .find(|l| l.starts_with("| method"))
        .expect("a table header");
    let cols: Vec<&str> = header.split('|').map(str::trim).collect();
    assert_eq!(
        &cols[1..7],
        [
            "method",
            "bits/value (held)",
            "perplexity",
            "Δ vs f16 (%)",
            "mean KL vs f16",
            "top-1 agreement"
        ]
    );
    assert!(stdout.contains("measured from the bytes the caches hold"));
    for m in ["f16", "kivi-4-32-0", "kivi-2-32-0"] {
        assert!(
            stdout.lines().any(|l| l.starts_with(&format!("| {m} "))),
            "no row for {m}"
        );
    }

    // The JSON: one object per method, f16 first, the specified keys.
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = v.as_array().expect("a JSON list");
    assert_eq!(rows.len(), 3);
    for row in rows {
        let mut keys: Vec<&str> = row
            .as_object()
            .expect("an object")
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "bits_per_value",
                "budget",
                "bytes_held",
                "delta_pct",
                "kl",
                "method",
                "perplexity",
                "policy",
                "spearman_flipped_mean",
                "spearman_insample_mean",
                "spearman_insample_worst",
                "spearman_mean",
                "spearman_mean_logit_mean",
                "spearman_mean_logit_worst",
                "spearman_worst",
                "tokens_held_per_head",
                "top1"
            ]
        );
        for k in [
            "bits_per_value",
            "perplexity",
            "delta_pct",
            "kl",
            "top1",
            "tokens_held_per_head",
            "bytes_held",
        ] {
            assert!(num(row, k).is_finite(), "{k} of {row}");
        }
        // No eviction in this run: the policy fields are null.
        for k in [
            "policy",
            "budget",
            "spearman_mean",
            "spearman_insample_mean",
            "spearman_mean_logit_mean",
        ] {
            assert!(row[k].is_null(), "{k} of {row}");
        }
        assert!(num(row, "bits_per_value") > 0.0);
        assert!(num(row, "perplexity") > 1.0);
        assert!(num(row, "kl") >= -1e-12);
        assert!((0.0..=1.0).contains(&num(row, "top1")));
    }
    let f16 = &rows[0];
    assert_eq!(f16["method"], "f16");
    assert!(
        (num(f16, "perplexity") - HELDOUT_PPL).abs() <= 0.01,
        "f16 perplexity {} vs {HELDOUT_PPL}",
        num(f16, "perplexity")
    );
    assert_eq!(num(f16, "delta_pct"), 0.0);
    assert_eq!(num(f16, "kl"), 0.0);
    assert_eq!(num(f16, "top1"), 1.0);
    assert_eq!(rows[1]["method"], "kivi-4-32-0");
    assert_eq!(rows[2]["method"], "kivi-2-32-0");
    // R = 0: every token is quantized, so both use fewer bits than f16 and differ from it.
    for row in &rows[1..] {
        assert!(num(row, "bits_per_value") < num(f16, "bits_per_value"));
        assert!(num(row, "kl") > 0.0);
        let delta = (num(row, "perplexity") / num(f16, "perplexity") - 1.0) * 100.0;
        assert!((num(row, "delta_pct") - delta).abs() < 1e-9);
    }
    assert!(num(&rows[2], "bits_per_value") <= num(&rows[1], "bits_per_value"));

    // The PNG.
    let bytes = std::fs::read(&png).expect("the plot was written");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `eval --evict` on stories260K: filters calibrated on another text (`tests/data`'s short
/// text), Q-Filters (plain and flipped) and StreamingLLM rows at one budget; the JSON's
/// policy, budget and Spearman fields, and the Spearman references on Q-Filters rows only.
#[test]
fn eval_stories260k_evict_reports_spearman_and_its_references() {
    let Some(dir) = stories("eval_stories260k_evict") else {
        return;
    };
    let tmp = scratch("eval", "evict");
    let (calib, json) = (tmp.join("calib.safetensors"), tmp.join("evict.json"));
    let model = dir.join("stories260K.bin");
    let tok = dir.join("tok512.bin");
    let text = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/text_short.txt");
    ok(&kvpack(&[
        "calibrate",
        "--model",
        s(&model),
        "--tokenizer",
        s(&tok),
        "--text",
        s(&text),
        "--max-tokens",
        "400",
        "--for",
        "qfilters",
        "--out",
        s(&calib),
    ]));
    let c = s(&calib);
    let out = kvpack(&[
        "eval",
        "--model",
        s(&model),
        "--tokenizer",
        s(&tok),
        "--text",
        s(&dir.join("story_heldout.txt")),
        "--path",
        "cpu",
        "--method",
        "f16",
        "--evict",
        &format!("qfilters:budget=32,calib={c}"),
        "--evict",
        &format!("qfilters:budget=32,calib={c},flip=true"),
        "--evict",
        "streaming:budget=32",
        "--json",
        s(&json),
    ]);
    let stdout = ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}{stderr}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = v.as_array().expect("a JSON list");
    let methods: Vec<&str> = rows.iter().map(|r| r["method"].as_str().unwrap()).collect();
    assert_eq!(
        methods,
        [
            "f16".to_string(),
            format!("f16+qfilters:budget=32,calib={c}"),
            format!("f16+qfilters:budget=32,calib={c},flip=true"),
            "f16+streaming:budget=32".to_string(),
        ]
    );
    let rho_keys = [
        "spearman_mean",
        "spearman_worst",
        "spearman_flipped_mean",
        "spearman_insample_mean",
        "spearman_insample_worst",
        "spearman_mean_logit_mean",
        "spearman_mean_logit_worst",
    ];
    // The f16 row has no policy; StreamingLLM has no scores to correlate.
    for (row, policy) in [(&rows[0], None), (&rows[3], Some("streaming"))] {
        assert_eq!(row["policy"].as_str(), policy, "{row}");
        for k in rho_keys {
            assert!(row[k].is_null(), "{k} of {row}");
        }
    }
    let (plain, flipped) = (&rows[1], &rows[2]);
    for row in [plain, flipped] {
        assert_eq!(row["policy"], "qfilters");
        assert_eq!(num(row, "budget"), 32.0);
        assert_eq!(num(row, "tokens_held_per_head"), 32.0);
        for k in rho_keys {
            assert!((-1.0..=1.0).contains(&num(row, k)), "{k} of {row}");
        }
        for (mean, worst) in [
            ("spearman_mean", "spearman_worst"),
            ("spearman_insample_mean", "spearman_insample_worst"),
            ("spearman_mean_logit_mean", "spearman_mean_logit_worst"),
        ] {
            assert!(num(row, worst) <= num(row, mean), "{worst} of {row}");
        }
    }
    // −u ranks every key in reverse: ρ changes sign exactly; the references do not depend on
    // the calibration file or its orientation.
    assert_eq!(num(plain, "spearman_mean"), -num(flipped, "spearman_mean"));
    assert_eq!(
        num(plain, "spearman_flipped_mean"),
        num(flipped, "spearman_mean")
    );
    for k in &rho_keys[3..] {
        assert_eq!(num(plain, k), num(flipped, k), "{k}");
    }
    // The in-sample filters are not the file's (calibrated on another text).
    assert_ne!(
        num(plain, "spearman_insample_mean"),
        num(plain, "spearman_mean")
    );
    // The filter is real on this model too (the seed's backwards filter was ≈ 0).
    assert!(num(plain, "spearman_mean") > 0.2, "{plain}");
    assert!(
        stderr.contains("references: filters calibrated on this text"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
fn eval_ids_from_json_match_the_text() {
    let Some(dir) = stories("eval_ids_from_json_match_the_text") else {
        return;
    };
    let tmp = scratch("eval", "json-ids");
    let model = dir.join("stories260K.bin");
    let text_out = kvpack(&[
        "eval",
        "--model",
        s(&model),
        "--text",
        s(&dir.join("story_heldout.txt")),
        "--methods",
        "f16",
        "--path",
        "cpu",
        "--max-tokens",
        "40",
        "--json",
        s(&tmp.join("a.json")),
    ]);
    ok(&text_out);
    // The same 40 ids through --ids (BOS + the encoded text, as the tokenizer gives them).
    let tok = kvpack::model::Tokenizer::load(dir.join("tok512.bin")).unwrap();
    let text = std::fs::read_to_string(dir.join("story_heldout.txt")).unwrap();
    let ids: Vec<u32> = tok.encode(&text, true, false)[..40].to_vec();
    let ids_path = tmp.join("ids.json");
    std::fs::write(&ids_path, serde_json::to_string(&ids).unwrap()).unwrap();
    // f16 is added as the reference when not listed.
    let ids_out = kvpack(&[
        "eval",
        "--model",
        s(&model),
        "--ids",
        s(&ids_path),
        "--methods",
        "kivi-4-32-0",
        "--path",
        "cpu",
        "--json",
        s(&tmp.join("b.json")),
    ]);
    ok(&ids_out);
    let read = |p: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(tmp.join(p)).unwrap()).unwrap()
    };
    let (a, b) = (read("a.json"), read("b.json"));
    assert_eq!(a.as_array().unwrap().len(), 1);
    assert_eq!(b.as_array().unwrap().len(), 2);
    assert_eq!(b[0]["method"], "f16");
    assert_eq!(a[0]["perplexity"], b[0]["perplexity"]);
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn eval_bad_arguments_fail_cleanly() {
    let tmp = scratch("eval", "bad");
    let missing = tmp.join("missing.bin");
    let text = tmp.join("t.txt");
    std::fs::write(&text, "Once upon a time").unwrap();
    let bad_ids = tmp.join("bad.json");
    std::fs::write(&bad_ids, "[1, -3, 4]").unwrap();
    let stories_dir = stories("eval_bad_arguments_fail_cleanly (model-dependent cases)");
    let model = stories_dir
        .as_ref()
        .map(|d| d.join("stories260K.bin"))
        .unwrap_or_else(|| missing.clone());
    let mut cases: Vec<Vec<String>> = vec![
        // No --methods.
        vec!["eval", "--model", s(&model), "--text", s(&text)],
        // Neither --text nor --ids, then both.
        vec!["eval", "--model", s(&model), "--methods", "f16"],
        vec![
            "eval",
            "--model",
            s(&model),
            "--text",
            s(&text),
            "--ids",
            s(&text),
            "--methods",
            "f16",
        ],
        // Unknown method, duplicate method, empty entry.
        vec![
            "eval",
            "--model",
            s(&model),
            "--text",
            s(&text),
            "--methods",
            "f16,kivi-x",
        ],
        vec![
            "eval",
            "--model",
            s(&model),
            "--text",
            s(&text),
            "--methods",
            "f16,f16",
        ],
        vec![
            "eval",
            "--model",
            s(&model),
            "--text",
            s(&text),
            "--methods",
            "f16,,kivi-4",
        ],
        // Bad path, --max-tokens below 2.
        vec![
            "eval",
            "--model",
            s(&model),
            "--text",
            s(&text),
            "--methods",
            "f16",
            "--path",
            "nowhere",
        ],
        vec![
            "eval",
            "--model",
            s(&model),
            "--text",
            s(&text),
            "--methods",
            "f16",
            "--max-tokens",
            "1",
        ],
        // A plot that is not a PNG, an output folder that does not exist.
        vec![
            "eval",
            "--model",
            s(&model),
            "--text",
            s(&text),
            "--methods",
            "f16",
            "--plot",
            s(&tmp.join("p.svg")),
        ],
        vec![
            "eval",
            "--model",
            s(&model),
            "--text",
            s(&text),
            "--methods",
            "f16",
            "--json",
            s(&tmp.join("no/such/dir/o.json")),
        ],
        // Missing model, missing text, negative id.
        vec![
            "eval",
            "--model",
            s(&missing),
            "--text",
            s(&text),
            "--methods",
            "f16",
        ],
        vec![
            "eval",
            "--model",
            s(&model),
            "--text",
            s(&tmp.join("none.txt")),
            "--methods",
            "f16",
        ],
        vec![
            "eval",
            "--model",
            s(&model),
            "--ids",
            s(&bad_ids),
            "--methods",
            "f16",
        ],
        // A model that is not a checkpoint.
        vec![
            "eval",
            "--model",
            s(&text),
            "--text",
            s(&text),
            "--methods",
            "f16",
        ],
    ]
    .into_iter()
    .map(|v| v.into_iter().map(String::from).collect())
    .collect();
    if stories_dir.is_some() {
        // Token ids outside the 512-token vocabulary; a one-token text.
        let big = tmp.join("big.json");
        std::fs::write(&big, "[1, 600, 2]").unwrap();
        let one = tmp.join("one.json");
        std::fs::write(&one, "[1]").unwrap();
        for ids in [&big, &one] {
            cases.push(
                [
                    "eval",
                    "--model",
                    s(&model),
                    "--ids",
                    s(ids),
                    "--methods",
                    "f16",
                ]
                .map(String::from)
                .to_vec(),
            );
        }
    }
    for args in &cases {
        let out = Command::new(BIN).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
        assert!(
            stderr.contains("error"),
            "{args:?}: no error message: {stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn eval_smollm2_paris_f16() {
    let Some(paris) = smollm2("eval_smollm2_paris_f16") else {
        return;
    };
    let tmp = scratch("eval", "smollm2");
    let json = tmp.join("paris.json");
    let out = kvpack(&[
        "eval",
        "--model",
        "smollm2",
        "--ids",
        s(&paris),
        "--methods",
        "f16",
        "--path",
        "cpu",
        "--json",
        s(&json),
    ]);
    eprintln!("{}", ok(&out));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let ppl = num(&v[0], "perplexity");
    assert!(
        (ppl - PARIS_PPL).abs() <= 0.01,
        "SmolLM2 f16 perplexity on Paris {ppl} vs {PARIS_PPL}"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}
