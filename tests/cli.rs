//! The `kvpack` binary end to end: safetensors in, safetensors and a JSON summary out.
#![cfg(feature = "cli")]

mod cli_support;
mod common;

use cli_support::{failing, kvpack};

use common::st::{Named, f16_bytes, f32_bytes, random, scratch, write};

use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, SafeTensors};
use serde_json::Value;

/// Runs a roundtrip that must succeed; returns the JSON summary.
fn roundtrip(input: &Path, output: &Path, extra: &[&str]) -> Value {
    let (i, o) = (
        input.to_str().expect("utf-8 path"),
        output.to_str().expect("utf-8 path"),
    );
    let mut args = vec!["roundtrip", "--method", "kivi", "--input", i, "--output", o];
    args.extend_from_slice(extra);
    let out = kvpack(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kvpack {args:?} failed: {stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stderr}"))
}

/// (shape, f32 bytes) of `k_hat` and `v_hat` in an output file.
fn hats(path: &Path) -> Vec<(Vec<usize>, Vec<u8>)> {
    let bytes = std::fs::read(path).expect("read output");
    let st = SafeTensors::deserialize(&bytes).expect("parse output");
    ["k_hat", "v_hat"]
        .iter()
        .map(|n| {
            let t = st.tensor(n).expect("tensor in output");
            assert_eq!(t.dtype(), Dtype::F32, "{n} is f32");
            (t.shape().to_vec(), t.data().to_vec())
        })
        .collect()
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("`{key}` is not a number in {v}"))
}

/// Checks the summary's invariants; returns (ratio, rel error K, rel error V).
fn check_summary(s: &Value, layers: usize, tokens: usize) -> (f64, f64, f64) {
    assert_eq!(s["method"], "kivi");
    assert_eq!(s["layers"], layers);
    assert_eq!(s["tokens"], tokens);
    let per = s["per_layer"].as_array().expect("per_layer array");
    assert_eq!(per.len(), layers);
    let held: u64 = per
        .iter()
        .map(|l| l["bytes_held"]["total"].as_u64().expect("total"))
        .sum();
    assert_eq!(s["bytes_held"]["total"], held, "totals add up over layers");
    let kinds = [
        "key_codes",
        "key_params",
        "value_codes",
        "value_params",
        "residual",
    ];
    let by_kind: u64 = kinds
        .iter()
        .map(|k| s["bytes_held"][k].as_u64().expect("kind"))
        .sum();
    assert_eq!(by_kind, held);
    assert_eq!(
        num(s, "f16_bytes") as usize,
        layers * 2 * tokens * (num(s, "heads") * num(s, "dim")) as usize * 2
    );
    let (ek, ev) = (num(&s["rel_l2_error"], "k"), num(&s["rel_l2_error"], "v"));
    assert!(
        ek.is_finite() && ek >= 0.0 && ev.is_finite() && ev >= 0.0,
        "{ek} {ev}"
    );
    for l in per {
        assert_eq!(l["tokens"], tokens);
        assert!(
            num(&l["rel_l2_error"], "k").is_finite() && num(&l["rel_l2_error"], "v").is_finite()
        );
    }
    (num(s, "ratio"), ek, ev)
}

/// `[T, H, D]` f32 and `[L, T, H, D]` f16 inputs (plus tensors the tool must ignore).
fn inputs(dir: &Path) -> [(PathBuf, Vec<usize>); 2] {
    let mut rng = common::rng("cli inputs");
    let a = dir.join("thd_f32.safetensors");
    let sa = vec![100, 2, 40]; // D = 40: a ragged value group at G = 32
    let n: usize = sa.iter().product();
    write(
        &a,
        &[
            ("k", Dtype::F32, sa.clone(), f32_bytes(&random(&mut rng, n))),
            ("v", Dtype::F32, sa.clone(), f32_bytes(&random(&mut rng, n))),
            ("q", Dtype::F32, vec![3], f32_bytes(&[1.0, 2.0, 3.0])),
            (
                "token_ids",
                Dtype::I32,
                vec![2],
                vec![1, 0, 0, 0, 2, 0, 0, 0],
            ),
        ],
    );
    let b = dir.join("lthd_f16.safetensors");
    let sb = vec![3, 70, 2, 64];
    let n: usize = sb.iter().product();
    write(
        &b,
        &[
            ("k", Dtype::F16, sb.clone(), f16_bytes(&random(&mut rng, n))),
            ("v", Dtype::F16, sb.clone(), f16_bytes(&random(&mut rng, n))),
        ],
    );
    [(a, sa), (b, sb)]
}

#[test]
fn roundtrip_random_inputs() {
    let dir = scratch("cli", "roundtrip");
    for (input, shape) in inputs(&dir) {
        let (layers, tokens) = if shape.len() == 4 {
            (shape[0], shape[1])
        } else {
            (1, shape[0])
        };
        let out = dir.join("out.safetensors");
        let cfg = ["--group", "32", "--residual", "32", "--path", "cpu"];

        let mut args = cfg.to_vec();
        args.extend(["--k-bits", "8", "--v-bits", "8"]);
        let s = roundtrip(&input, &out, &args);
        assert_eq!(s["path"], "cpu");
        assert_eq!(s["adapter"], "cpu");
        assert_eq!(s["spec"], "kivi:bits=8,group=32,params=f16,residual=32");
        assert_eq!(s["config"]["keys"]["options"], "bits=8,group=32,params=f16");
        assert_eq!(s["config"]["residual"], 32);
        let (ratio, ek, ev) = check_summary(&s, layers, tokens);
        assert!(ratio > 1.0, "8-bit ratio {ratio}");
        assert!(
            ek > 0.0 && ek < 0.01 && ev > 0.0 && ev < 0.01,
            "8-bit errors {ek} {ev}"
        );
        for (hat_shape, bytes) in hats(&out) {
            assert_eq!(hat_shape, shape);
            assert_eq!(bytes.len(), shape.iter().product::<usize>() * 4);
        }

        // 2 bits: smaller, worse; chunked appends give the very same bits.
        let mut args = cfg.to_vec();
        args.extend(["--k-bits", "2", "--v-bits", "2"]);
        let s2 = roundtrip(&input, &out, &args);
        let (ratio2, ek2, ev2) = check_summary(&s2, layers, tokens);
        assert!(
            ratio2 > ratio && ek2 > ek && ev2 > ev,
            "2-bit {ratio2} {ek2} {ev2} vs 8-bit {ratio} {ek} {ev}"
        );
        let prefill = hats(&out);
        let chunked_out = dir.join("chunked.safetensors");
        args.extend(["--chunk", "7"]);
        let s7 = roundtrip(&input, &chunked_out, &args);
        assert_eq!(s7["config"]["chunk"], 7);
        assert_eq!(s7["rel_l2_error"], s2["rel_l2_error"]);
        assert!(
            hats(&chunked_out) == prefill,
            "--chunk 7 differs from one prefill"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_inputs_fail_with_a_message() {
    let dir = scratch("cli", "bad");
    let [(good, _), _] = inputs(&dir);
    let out = dir.join("out.safetensors");
    let o = out.to_str().expect("utf-8");
    let g = good.to_str().expect("utf-8");
    // A file with these k and v tensors must be refused with `expect` on stderr.
    let refuse = |name: &str, tensors: &[Named], expect: &str| {
        let path = dir.join(name);
        write(&path, tensors);
        let p = path.to_str().expect("utf-8");
        let e = failing(&["roundtrip", "--path", "cpu", "--input", p, "--output", o]);
        assert!(e.contains(expect), "{name}: {e}");
    };
    let f = |x: &[f32]| f32_bytes(x);
    refuse(
        "no_v.safetensors",
        &[("k", Dtype::F32, vec![4, 1, 2], f(&[0.0; 8]))],
        "`v`",
    );
    let (s2, z) = (vec![4, 2], f(&[0.0; 8]));
    refuse(
        "rank2.safetensors",
        &[
            ("k", Dtype::F32, s2.clone(), z.clone()),
            ("v", Dtype::F32, s2, z),
        ],
        "shape",
    );
    let (s3, z) = (vec![2, 1, 2], vec![0u8; 16]);
    refuse(
        "ints.safetensors",
        &[
            ("k", Dtype::I32, s3.clone(), z.clone()),
            ("v", Dtype::I32, s3, z),
        ],
        "dtype",
    );
    let (s3, x) = (vec![2, 1, 2], f(&[0.0, f32::NAN, 1.0, 2.0]));
    refuse(
        "nan.safetensors",
        &[
            ("k", Dtype::F32, s3.clone(), x.clone()),
            ("v", Dtype::F32, s3, x),
        ],
        "non-finite",
    );
    let (sk, sv) = (vec![2, 1, 2], vec![2, 2, 1]);
    let z = f(&[0.0; 4]);
    refuse(
        "mismatch.safetensors",
        &[("k", Dtype::F32, sk, z.clone()), ("v", Dtype::F32, sv, z)],
        "same shape",
    );

    let with = |extra: &[&str]| {
        let mut a = vec!["roundtrip", "--path", "cpu", "--input", g, "--output", o];
        a.extend_from_slice(extra);
        failing(&a)
    };
    let e = with(&["--k-bits", "9"]);
    assert!(e.contains("k-bits"), "{e}");
    let e = with(&["--residual", "33", "--group", "32"]);
    assert!(e.contains("multiple"), "{e}");
    let e = with(&["--path", "tpu"]);
    assert!(e.contains("tpu"), "{e}");
    let e = with(&["--chunk", "0"]);
    assert!(e.contains("chunk"), "{e}");
    let e = with(&["--method", "h2o"]);
    assert!(e.contains("h2o"), "{e}");
    let e = failing(&[
        "roundtrip",
        "--path",
        "cpu",
        "--input",
        "/nonexistent/kv.safetensors",
        "--output",
        o,
    ]);
    assert!(e.contains("/nonexistent/kv.safetensors"), "{e}");
    let e = failing(&["roundtrip", "--path", "cpu", "--input", o, "--output", o]);
    assert!(e.contains("cannot read"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `../shared/fixtures/smollm2-135m/<name>`, or `None` after a visible skip.
fn fixture(name: &str, test: &str) -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/smollm2-135m")
        .join(name);
    if p.exists() {
        return Some(p);
    }
    let msg = format!("SKIP {test} because ../shared/fixtures is absent");
    if std::env::var("KVPACK_REQUIRE_SHARED").is_ok_and(|v| v == "1") {
        panic!("{msg} (KVPACK_REQUIRE_SHARED=1 forbids skips)");
    }
    eprintln!("{msg}");
    None
}

#[test]
fn roundtrip_paris_fixture() {
    let Some(input) = fixture("paris.safetensors", "roundtrip_paris_fixture") else {
        return;
    };
    let dir = scratch("cli", "paris");
    let out = dir.join("paris_hat.safetensors");
    let mut last = None;
    for bits in ["2", "4"] {
        let s = roundtrip(
            &input,
            &out,
            &[
                "--path",
                "cpu",
                "--residual",
                "32",
                "--k-bits",
                bits,
                "--v-bits",
                bits,
            ],
        );
        let (ratio, ek, ev) = check_summary(&s, 30, 122);
        assert_eq!(s["dtype"]["k"], "f16");
        assert_eq!(s["quantized_tokens"], 64);
        eprintln!("paris {bits} bits: ratio {ratio:.3}, rel L2 K {ek:.4}, V {ev:.4}");
        assert!(
            ratio > 1.0 && ek > 0.0 && ek < 0.5 && ev > 0.0 && ev < 0.5,
            "{ratio} {ek} {ev}"
        );
        if let Some((r2, ek2, ev2)) = last {
            assert!(
                ratio < r2 && ek < ek2 && ev < ev2,
                "4 bits: smaller ratio, smaller errors"
            );
        }
        last = Some((ratio, ek, ev));
        for (shape, _) in hats(&out) {
            assert_eq!(shape, vec![30, 122, 3, 64]);
        }
    }
    // With the default residual (128 > T = 122) nothing is quantized: f16 input comes back exactly.
    let s = roundtrip(&input, &out, &["--path", "cpu"]);
    assert_eq!(s["quantized_tokens"], 0);
    assert_eq!(s["rel_l2_error"]["k"], 0.0);
    assert_eq!(s["rel_l2_error"]["v"], 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn roundtrip_wgsl_matches_cpu_closely() {
    let dir = scratch("cli", "wgsl");
    let [_, (input, shape)] = inputs(&dir);
    let cpu_out = dir.join("cpu.safetensors");
    let gpu_out = dir.join("gpu.safetensors");
    let args = ["--residual", "32", "--k-bits", "3", "--v-bits", "3"];
    let (i, o) = (
        input.to_str().expect("utf-8"),
        gpu_out.to_str().expect("utf-8"),
    );
    let mut a = vec!["roundtrip", "--path", "wgsl", "--input", i, "--output", o];
    a.extend_from_slice(&args);
    let run = kvpack(&a);
    if !run.status.success() {
        let e = String::from_utf8_lossy(&run.stderr);
        assert!(
            e.contains("not available"),
            "wgsl failed for another reason than a missing GPU: {e}"
        );
        common::skip("roundtrip_wgsl_matches_cpu_closely", e.trim());
        return;
    }
    let s: Value = serde_json::from_slice(&run.stdout).expect("JSON");
    assert!(
        s["path"].as_str().is_some_and(|p| p.starts_with("wgsl-")),
        "{}",
        s["path"]
    );
    assert_ne!(s["adapter"], "cpu");
    let (_, ek, ev) = check_summary(&s, shape[0], shape[1]);
    let c = roundtrip(
        &input,
        &cpu_out,
        &[&["--path", "cpu"][..], &args[..]].concat(),
    );
    let (_, ck, cv) = check_summary(&c, shape[0], shape[1]);
    // Codes may differ by ±1 at rounding boundaries (spec), so only close, not equal.
    assert!(
        (ek - ck).abs() < 1e-3 * ck && (ev - cv).abs() < 1e-3 * cv,
        "gpu {ek} {ev} cpu {ck} {cv}"
    );
    assert_eq!(hats(&gpu_out)[0].0, shape);
    let _ = std::fs::remove_dir_all(&dir);
}

/// QJL keys have no reconstruction: `roundtrip` says so on stderr, writes no `k_hat` and no
/// key error (null), and still reconstructs and measures the values (issue 14).
#[test]
fn roundtrip_qjl_keys_refuses_key_reconstruction() {
    let dir = scratch("cli", "roundtrip_qjl");
    let [_, (input, shape)] = inputs(&dir);
    let out_path = dir.join("qjl_out.safetensors");
    let (i, o) = (input.to_str().unwrap(), out_path.to_str().unwrap());
    let args = [
        "roundtrip",
        "--method",
        "qjl:m=64/kivi:bits=4,residual=32",
        "--path",
        "cpu",
        "--input",
        i,
        "--output",
        o,
    ];
    let out = kvpack(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kvpack {args:?} failed: {stderr}");
    assert!(
        stderr.contains("qjl keys have no reconstruction")
            && stderr.contains("values are reconstructed"),
        "no clear message on stderr: {stderr}"
    );
    let s: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stderr}"));
    assert_eq!(s["keys_reconstructed"], false, "{s}");
    assert!(
        s["rel_l2_error"]["k"].is_null(),
        "key error must be null: {s}"
    );
    let ev = num(&s["rel_l2_error"], "v");
    assert!(ev.is_finite() && ev > 0.0 && ev < 0.2, "value error {ev}");
    let bytes = std::fs::read(&out_path).expect("read output");
    let st = SafeTensors::deserialize(&bytes).expect("parse output");
    assert!(st.tensor("k_hat").is_err(), "k_hat written for QJL keys");
    let v = st.tensor("v_hat").expect("v_hat");
    assert_eq!(v.shape(), shape.as_slice());
    eprintln!(
        "qjl roundtrip: value rel L2 {ev:.4}; stderr: {}",
        stderr.trim()
    );
}

/// `kvpack devices --json`: every adapter with its facts, whether kvpack's requirements are
/// met, and each kernel's path; on lavapipe (CI) the Vulkan adapter has subgroups of 8 and
/// runs the WGSL kernels (the subgroup variant where a kernel has one), never MSL.
#[test]
fn devices_json_lists_adapters_and_kernel_paths() {
    let out = kvpack(&["devices", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "kvpack devices --json failed: {stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stderr}"));
    let adapters = v["adapters"].as_array().expect("an adapters array");
    for a in adapters {
        for key in ["name", "backend", "device_type", "driver", "driver_info"] {
            assert!(a[key].is_string(), "`{key}` of {a}");
        }
        for key in [
            "subgroup_min_size",
            "subgroup_max_size",
            "max_compute_workgroup_storage_size",
        ] {
            assert!(a[key].is_u64(), "`{key}` of {a}");
        }
        assert!(a["meets_requirements"].is_boolean(), "{a}");
        assert_eq!(
            a["meets_requirements"] == true,
            a["missing"].as_array().is_some_and(|m| m.is_empty()),
            "{a}"
        );
        assert!(
            a["device_error"].is_string() || a["kernels"].is_array(),
            "neither kernels nor a device error: {a}"
        );
    }
    let Some(vk) = adapters
        .iter()
        .find(|a| a["backend"] == "Vulkan" && a["device_type"] == "Cpu")
    else {
        let names: Vec<String> = adapters
            .iter()
            .map(|a| format!("{} ({})", a["name"], a["backend"]))
            .collect();
        common::skip(
            "devices_json_lists_adapters_and_kernel_paths",
            &format!("no Vulkan CPU adapter (lavapipe) among {names:?}"),
        );
        return;
    };
    let name = vk["name"].as_str().unwrap_or_default();
    assert!(name.contains("llvmpipe"), "lavapipe's name: {name}");
    assert_eq!(vk["meets_requirements"], true, "{vk}");
    let (min, max) = (
        vk["subgroup_min_size"].as_u64().unwrap_or(0),
        vk["subgroup_max_size"].as_u64().unwrap_or(0),
    );
    assert!(min >= 1 && min <= max, "subgroup range {min}..{max}");
    assert!(vk["max_compute_workgroup_storage_size"].as_u64() >= Some(16384));
    assert!(
        vk["features"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == "SUBGROUP")),
        "{vk}"
    );
    let kernels = vk["kernels"].as_array().expect("kernels");
    assert!(kernels.len() > 20, "{} kernels", kernels.len());
    for k in kernels {
        let tensor = k["kernel"].as_str().is_some_and(|n| {
            n.starts_with("attend_prefill_tc_") || n.starts_with("attend_decode_tc_")
        });
        for choice in ["auto", "wgsl"] {
            let p = k[choice].as_str().unwrap_or_default();
            if tensor && vk["tensor_cores"] != true {
                // The tensor-core kernels where the device has none (lavapipe): unavailable,
                // for the reason the adapter's report gives.
                let why = vk["tensor_cores"].as_str().expect("a reason");
                assert!(
                    p.starts_with("unavailable:") && p.contains(why),
                    "{} on {choice}: {p} (tensor cores: {why})",
                    k["kernel"]
                );
                continue;
            }
            assert!(
                p == "wgsl-subgroup" || p == "wgsl-workgroup",
                "{} on {choice}: {p}",
                k["kernel"]
            );
        }
        if !tensor {
            assert_eq!(k["auto"], k["wgsl"], "off Metal, auto is WGSL: {k}");
        }
    }
    // Lavapipe lays subgroups out in invocation order: every kernel takes the subgroup
    // variant (a kernel with one source names it too).
    assert_eq!(vk["subgroups_in_order"], true, "{vk}");
    for kind in [
        "codec encode",
        "attention decode",
        "attention prefill",
        "attention merge",
    ] {
        assert_eq!(
            vk["kinds"][kind]["auto"],
            serde_json::json!(["wgsl-subgroup"]),
            "{kind}: {}",
            vk["kinds"]
        );
    }
    // The text form names the adapter and the kinds.
    let text = kvpack(&["devices"]);
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(name) && text.contains("attention decode"),
        "{text}"
    );
}
