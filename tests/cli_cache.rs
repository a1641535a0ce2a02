//! `kvpack cache save`, `kvpack cache inspect` and `kvpack attend --cache` end to end: a
//! saved cache attends exactly as a freshly filled one on the same path, a cache saved on a
//! GPU path attends on the CPU within the spec's bound, and damaged or mismatched files fail
//! with a message.
#![cfg(feature = "cli")]

mod cli_support;
mod common;

use std::path::Path;

use cli_support::{failing, kvpack};
use common::st::{f32_bytes, random, scratch, write};
use safetensors::tensor::{Dtype, SafeTensors};
use serde_json::Value;

const SPEC: &str = "kivi:bits=4,group=32,residual=32";
const L: usize = 2;
const T: usize = 150;
const HQ: usize = 4;
const HKV: usize = 2;
const D: usize = 32;

fn input(dir: &Path, name: &str, t: usize) -> String {
    let mut rng = common::rng(name);
    let p = dir.join(format!("{name}.safetensors"));
    write(
        &p,
        &[
            (
                "q",
                Dtype::F32,
                vec![L, t, HQ, D],
                f32_bytes(&random(&mut rng, L * t * HQ * D)),
            ),
            (
                "k",
                Dtype::F32,
                vec![L, t, HKV, D],
                f32_bytes(&random(&mut rng, L * t * HKV * D)),
            ),
            (
                "v",
                Dtype::F32,
                vec![L, t, HKV, D],
                f32_bytes(&random(&mut rng, L * t * HKV * D)),
            ),
        ],
    );
    p.to_str().unwrap().to_string()
}

fn ok_json(args: &[&str]) -> Value {
    let out = kvpack(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kvpack {args:?} failed: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stderr}"))
}

fn out_values(path: &str) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor("out").unwrap();
    assert_eq!(t.shape(), [L, 4, HQ, D]);
    bytemuck::pod_collect_to_vec(t.data())
}

#[test]
fn cli_cache_save_inspect_attend() {
    let dir = scratch("cli-cache", "save_inspect_attend");
    let inp = input(&dir, "qkv", T);
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let cache = s(&dir.join("c.kvc"));
    let saved = ok_json(&[
        "cache", "save", "--method", SPEC, "--path", "cpu", "--input", &inp, "--out", &cache,
    ]);
    let info = ok_json(&["cache", "inspect", &cache]);
    for j in [&saved, &info] {
        assert_eq!(j["format_version"], 1);
        assert_eq!(j["checksums_ok"], true);
        assert_eq!(j["layers"].as_array().unwrap().len(), L);
        assert_eq!(j["layers"][1]["tokens"], T);
        assert_eq!(j["layers"][1]["kv_heads"], HKV);
        assert_eq!(j["layers"][1]["dim"], D);
        assert_eq!(
            j["layers"][0]["method"],
            kvpack::Method::parse(SPEC).unwrap().to_string()
        );
        assert_eq!(j["metadata"]["input"], inp.as_str());
        assert_eq!(j["file_bytes"], std::fs::metadata(&cache).unwrap().len());
    }
    // 2 layers × 2 sides × (codes, params, residual, tables).
    assert_eq!(info["sections"].as_array().unwrap().len(), L * 2 * 4);

    // The saved cache attends as a freshly filled one: bit for bit on the same path.
    let (o1, o2) = (
        s(&dir.join("o1.safetensors")),
        s(&dir.join("o2.safetensors")),
    );
    let a = ok_json(&[
        "attend",
        "--cache",
        &cache,
        "--input",
        &inp,
        "--queries",
        "4",
        "--output",
        &o1,
        "--path",
        "cpu",
    ]);
    let b = ok_json(&[
        "attend",
        "--method",
        SPEC,
        "--input",
        &inp,
        "--queries",
        "4",
        "--output",
        &o2,
        "--path",
        "cpu",
    ]);
    assert_eq!(a["from_cache_file"], true);
    assert_eq!(b["from_cache_file"], false);
    assert_eq!(a["spec"], b["spec"]);
    assert_eq!(a["rel_l2_error"], b["rel_l2_error"]);
    let (x, y) = (out_values(&o1), out_values(&o2));
    assert_eq!(
        x.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        y.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );

    // Saved on a GPU path, attended on the CPU: within 1e-4 of the GPU's own attention.
    match common::gpu_context() {
        Err(e) => common::skip("cli_cache_save_inspect_attend[wgsl]", &e),
        Ok(_) => {
            let gcache = s(&dir.join("g.kvc"));
            let g = ok_json(&[
                "cache", "save", "--method", SPEC, "--path", "wgsl", "--input", &inp, "--out",
                &gcache,
            ]);
            assert!(
                g["saved_from_path"].as_str().unwrap().starts_with("wgsl"),
                "{g}"
            );
            let (o3, o4) = (
                s(&dir.join("o3.safetensors")),
                s(&dir.join("o4.safetensors")),
            );
            ok_json(&[
                "attend",
                "--cache",
                &gcache,
                "--input",
                &inp,
                "--queries",
                "4",
                "--output",
                &o3,
                "--path",
                "cpu",
            ]);
            ok_json(&[
                "attend",
                "--method",
                SPEC,
                "--input",
                &inp,
                "--queries",
                "4",
                "--output",
                &o4,
                "--path",
                "wgsl",
            ]);
            let err = common::rel_l2_rows(&out_values(&o3), &out_values(&o4), D);
            assert!(err <= 1e-4, "gpu-saved cache on cpu: rel L2 {err:e}");
        }
    }

    // Failures: each a message, never a panic.
    let other = input(&dir, "short", T - 10);
    let e = failing(&[
        "attend",
        "--cache",
        &cache,
        "--input",
        &other,
        "--queries",
        "4",
        "--output",
        &o1,
        "--path",
        "cpu",
    ]);
    assert!(e.contains("140") && e.contains("150"), "{e}");
    let e = failing(&[
        "attend",
        "--cache",
        &cache,
        "--method",
        "f16",
        "--input",
        &inp,
        "--queries",
        "4",
        "--output",
        &o1,
    ]);
    assert!(
        e.contains("--method") || e.contains("cannot be used"),
        "{e}"
    );
    let e = failing(&[
        "cache",
        "save",
        "--method",
        "kivi:bits=9",
        "--input",
        &inp,
        "--out",
        &cache,
    ]);
    assert!(e.contains("bit width 9"), "{e}");
    let e = failing(&[
        "cache",
        "save",
        "--method",
        SPEC,
        "--path",
        "cpu",
        "--input",
        &inp,
        "--out",
        &s(&dir.join("nope/c.kvc")),
    ]);
    assert!(e.contains("nope"), "{e}");
    assert_eq!(
        ok_json(&["cache", "inspect", &cache]),
        info,
        "failed saves left the file as it was"
    );
    let e = failing(&["cache", "inspect", &inp]);
    assert!(e.contains("not a kvpack cache file"), "{e}");
    // A flipped bit in a section: the JSON names the section, the command fails.
    let mut bytes = std::fs::read(&cache).unwrap();
    let sec = &info["sections"][2];
    let at = (sec["offset"].as_u64().unwrap() + 5) as usize;
    bytes[at] ^= 0x10;
    let damaged = s(&dir.join("damaged.kvc"));
    std::fs::write(&damaged, &bytes).unwrap();
    let out = kvpack(&["cache", "inspect", &damaged]);
    assert!(!out.status.success());
    let j: Value = serde_json::from_slice(&out.stdout).expect("JSON before the failure");
    assert_eq!(j["checksums_ok"], false);
    assert_eq!(j["sections"][2]["checksum_ok"], false);
    assert_eq!(j["sections"][1]["checksum_ok"], true);
    let e = failing(&[
        "attend",
        "--cache",
        &damaged,
        "--input",
        &inp,
        "--queries",
        "4",
        "--output",
        &o1,
        "--path",
        "cpu",
    ]);
    assert!(
        e.contains(sec["name"].as_str().unwrap()) && e.contains("checksum"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
