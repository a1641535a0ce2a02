//! `kvpack dump-kv` end to end: stories260K's q/k/v round-trip through `kvpack roundtrip` and
//! `kvpack attend`; chunking and `--dtype f32` do not change the values; bad arguments are
//! errors; on SmolLM2 the dump equals the Paris fixture (an independent numpy forward) when the
//! GGUF has been fetched.
#![cfg(feature = "cli")]

mod cli_support;
mod common;

use cli_support::{failing, kvpack};

use std::path::{Path, PathBuf};
use std::process::Output;

use common::st::scratch;
use safetensors::SafeTensors;
use safetensors::tensor::Dtype;
use serde_json::Value;

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

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

fn ok(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kvpack failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stdout}"))
}

/// A tensor of a safetensors file: (dtype, shape, values as f32).
fn tensor(path: &Path, name: &str) -> (Dtype, Vec<usize>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let t = st
        .tensor(name)
        .unwrap_or_else(|_| panic!("{name} in {}", path.display()));
    let values = match t.dtype() {
        Dtype::F16 => t
            .data()
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::F32 => t
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::I32 => t
            .data()
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32)
            .collect(),
        other => panic!("unexpected dtype {other:?}"),
    };
    (t.dtype(), t.shape().to_vec(), values)
}

fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let num: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
        .sum();
    let den: f64 = b.iter().map(|&y| (y as f64).powi(2)).sum();
    (num / den).sqrt()
}

/// stories260K: the dump has the layout `roundtrip` and `attend` read, and both run on it; exact
/// attention on the f16 cache matches the reference to rounding, KIVI-4 approximately.
#[test]
fn stories_dump_roundtrip_and_attend() {
    let test = "stories_dump_roundtrip_and_attend";
    let Some(dir) = stories(test) else {
        return;
    };
    let out = scratch("dumpkv", test);
    let dump = out.join("qkv.safetensors");
    let model = dir.join("stories260K.bin");
    let text = dir.join("story_heldout.txt");
    let summary = ok(&kvpack(&[
        "dump-kv",
        "--model",
        s(&model),
        "--text",
        s(&text),
        "--out",
        s(&dump),
    ]));
    let t = summary["tokens"].as_u64().unwrap() as usize;
    eprintln!("dump-kv stories260K: {summary}");
    assert!(t > 40);
    assert_eq!(summary["layers"], 5);
    assert_eq!(summary["dtype"], "f16");
    let ppl = summary["perplexity_f16_cache"].as_f64().unwrap();
    assert!(ppl > 1.0 && ppl < 10.0, "perplexity {ppl}");
    let (dq, sq, q) = tensor(&dump, "q");
    let (dk, sk, _) = tensor(&dump, "k");
    let (_, sv, _) = tensor(&dump, "v");
    assert_eq!((dq, dk), (Dtype::F16, Dtype::F16));
    assert_eq!(sq, vec![5, t, 8, 8]);
    assert_eq!(sk, vec![5, t, 4, 8]);
    assert_eq!(sv, sk);
    assert!(q.iter().all(|x| x.is_finite()));
    let (di, si, ids) = tensor(&dump, "token_ids");
    assert_eq!((di, si), (Dtype::I32, vec![t]));
    assert_eq!(ids[0], 1.0, "llama2.c text starts with BOS");
    assert_eq!(tensor(&dump, "logits_last").1, vec![512]);

    let rt = ok(&kvpack(&[
        "roundtrip",
        "--method",
        "kivi:bits=4,group=16,residual=16",
        "--path",
        "cpu",
        "--input",
        s(&dump),
        "--output",
        s(&out.join("hat.safetensors")),
    ]));
    assert_eq!(rt["shape"], serde_json::json!([5, t, 4, 8]));
    for kv in ["k", "v"] {
        let e = rt["rel_l2_error"][kv].as_f64().unwrap();
        assert!(e > 0.0 && e < 0.2, "roundtrip {kv} error {e}");
    }
    let (_, shape, _) = tensor(&out.join("hat.safetensors"), "k_hat");
    assert_eq!(shape, vec![5, t, 4, 8]);

    for (name, method, bound) in [
        ("f16", "f16", 1e-3),
        ("kivi", "kivi:bits=4,group=16,residual=16", 0.3),
    ] {
        let a = ok(&kvpack(&[
            "attend",
            "--method",
            method,
            "--path",
            "cpu",
            "--queries",
            "8",
            "--input",
            s(&dump),
            "--output",
            s(&out.join(format!("att-{name}.safetensors"))),
        ]));
        let e = a["rel_l2_error"]["overall"].as_f64().unwrap();
        eprintln!("attend {name} on the dump: rel L2 {e:.2e}");
        assert!(e < bound, "attend {name}: rel L2 {e}");
        assert_eq!(a["q_heads"], 8);
        assert_eq!(a["kv_heads"], 4);
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// Small chunks and one chunk record the same values; `--dtype f32` keeps f32; `--max-tokens`
/// truncates.
#[test]
fn stories_dump_chunks_dtype_max_tokens() {
    let test = "stories_dump_chunks_dtype_max_tokens";
    let Some(dir) = stories(test) else {
        return;
    };
    let out = scratch("dumpkv", test);
    let model = dir.join("stories260K.bin");
    let text = dir.join("story_heldout.txt");
    let dump = |name: &str, extra: &[&str]| -> (PathBuf, Value) {
        let p = out.join(name);
        let mut args = vec![
            "dump-kv",
            "--model",
            s(&model),
            "--text",
            s(&text),
            "--out",
            s(&p),
            "--dtype",
            "f32",
        ];
        args.extend_from_slice(extra);
        let summary = ok(&kvpack(&args));
        (p, summary)
    };
    let (one, s1) = dump("one.safetensors", &[]);
    let (many, s7) = dump("many.safetensors", &["--chunk", "7"]);
    assert_eq!(s1["dtype"], "f32");
    for name in ["q", "k", "v", "logits_last"] {
        let (d1, sh1, a) = tensor(&one, name);
        let (_, sh7, b) = tensor(&many, name);
        assert_eq!(d1, Dtype::F32);
        assert_eq!(sh1, sh7);
        let e = rel_l2(&b, &a);
        assert!(e < 1e-5, "{name}: chunked vs one chunk rel L2 {e}");
    }
    let (p1, p7) = (
        s1["perplexity_f16_cache"].as_f64().unwrap(),
        s7["perplexity_f16_cache"].as_f64().unwrap(),
    );
    assert!((p1 / p7 - 1.0).abs() < 1e-5, "{p1} vs {p7}");
    let (short, s20) = dump("short.safetensors", &["--max-tokens", "20"]);
    assert_eq!(s20["tokens"], 20);
    let (_, shape, q20) = tensor(&short, "q");
    assert_eq!(shape[1], 20);
    // The first 20 positions are those of the full run (causal).
    let (_, full_shape, q) = tensor(&one, "q");
    let row = full_shape[2] * full_shape[3];
    for l in 0..full_shape[0] {
        let a = &q20[l * 20 * row..(l + 1) * 20 * row];
        let b = &q[l * full_shape[1] * row..(l * full_shape[1] + 20) * row];
        assert!(rel_l2(a, b) < 1e-5, "layer {l}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn dump_kv_bad_arguments() {
    let test = "dump_kv_bad_arguments";
    let out = scratch("dumpkv", test);
    let text = out.join("t.txt");
    std::fs::write(&text, "hello").unwrap();
    let o = out.join("o.safetensors");
    let e = failing(&[
        "dump-kv",
        "--model",
        "no-such-model",
        "--text",
        s(&text),
        "--out",
        s(&o),
    ]);
    assert!(e.contains("qwen2.5-coder-0.5b"), "{e}");
    let e = failing(&[
        "dump-kv",
        "--model",
        "smollm2",
        "--text",
        s(&out.join("missing.txt")),
        "--out",
        s(&o),
    ]);
    assert!(e.contains("missing.txt"), "{e}");
    let e = failing(&[
        "dump-kv",
        "--model",
        "smollm2",
        "--text",
        s(&text),
        "--out",
        s(&out.join("no/such/dir/o.safetensors")),
    ]);
    assert!(e.contains("does not exist"), "{e}");
    failing(&[
        "dump-kv",
        "--model",
        "smollm2",
        "--text",
        s(&text),
        "--out",
        s(&o),
        "--chunk",
        "0",
    ]);
    failing(&[
        "dump-kv",
        "--model",
        "smollm2",
        "--text",
        s(&text),
        "--out",
        s(&o),
        "--dtype",
        "bf16",
    ]);
    assert!(!o.exists());
    let _ = std::fs::remove_dir_all(&out);
}

/// SmolLM2 on the Paris fixture's text: the dump equals the fixture's q/k/v, ids and last logits
/// (a float32 numpy forward stored in f16) to rounding, and its perplexity is 6.095.
#[test]
fn smollm2_dump_matches_paris_fixture() {
    let test = "smollm2_dump_matches_paris_fixture";
    let Some(fixture) = common::shared_fixture("paris.safetensors", test) else {
        return;
    };
    if let Err(e) = kvpack::model::gguf::find_smollm2() {
        let msg = format!("SKIP {test} because {e}");
        if std::env::var("KVPACK_REQUIRE_MODELS").is_ok_and(|v| v == "1") {
            panic!("{msg} (KVPACK_REQUIRE_MODELS=1 forbids skips)");
        }
        eprintln!("{msg}");
        return;
    }
    let out = scratch("dumpkv", test);
    let bytes = std::fs::read(&fixture).unwrap();
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let text = meta.metadata().as_ref().unwrap()["text"].clone();
    let text_path = out.join("paris.txt");
    std::fs::write(&text_path, text).unwrap();
    let dump = out.join("paris.safetensors");
    let summary = ok(&kvpack(&[
        "dump-kv",
        "--model",
        "smollm2",
        "--text",
        s(&text_path),
        "--out",
        s(&dump),
    ]));
    let ppl = summary["perplexity_f16_cache"].as_f64().unwrap();
    assert!((ppl - 6.095).abs() < 0.01, "perplexity {ppl}");
    assert_eq!(
        tensor(&dump, "token_ids").2,
        tensor(&fixture, "token_ids").2
    );
    for name in ["q", "k", "v", "logits_last"] {
        let (_, sa, a) = tensor(&dump, name);
        let (_, sb, b) = tensor(&fixture, name);
        assert_eq!(sa, sb, "{name}");
        let e = rel_l2(&a, &b);
        eprintln!("smollm2 dump-kv {name} vs the Paris fixture: rel L2 {e:.2e}");
        assert!(e < 2e-3, "{name}: rel L2 {e}");
    }
    let _ = std::fs::remove_dir_all(&out);
}
