//! `kvpack attend` end to end: q/k/v in, `out` and a JSON summary out.
#![cfg(feature = "cli")]

mod cli_support;
mod common;

use cli_support::{failing, kvpack};

use common::st::{Named, f16_bytes, f32_bytes, random, scratch, write};

use std::path::{Path, PathBuf};

use half::f16;
use kvpack::AttendOptions;
use kvpack::cpu::attend::attend_exact;

use safetensors::tensor::{Dtype, SafeTensors};
use serde_json::Value;

/// A random input: q `[.., T, hq, d]`, k/v `[.., T, hkv, d]`, values as stored (f16-rounded
/// for f16), with `layers = None` for the rank-3 form.
struct Input {
    path: PathBuf,
    layers: Option<usize>,
    t: usize,
    hq: usize,
    hkv: usize,
    d: usize,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
}

#[allow(clippy::too_many_arguments)]
fn make_input(
    dir: &Path,
    name: &str,
    dtype: Dtype,
    layers: Option<usize>,
    t: usize,
    hq: usize,
    hkv: usize,
    d: usize,
) -> Input {
    let mut rng = common::rng(name);
    let l = layers.unwrap_or(1);
    let round = |x: Vec<f32>| -> Vec<f32> {
        if dtype == Dtype::F16 {
            x.iter().map(|&v| f16::from_f32(v).to_f32()).collect()
        } else {
            x
        }
    };
    let q = round(random(&mut rng, l * t * hq * d));
    let k = round(random(&mut rng, l * t * hkv * d));
    let v = round(random(&mut rng, l * t * hkv * d));
    let shape = |h| match layers {
        Some(l) => vec![l, t, h, d],
        None => vec![t, h, d],
    };
    let bytes = |x: &[f32]| {
        if dtype == Dtype::F16 {
            f16_bytes(x)
        } else {
            f32_bytes(x)
        }
    };
    let path = dir.join(format!("{name}.safetensors"));
    write(
        &path,
        &[
            ("q", dtype, shape(hq), bytes(&q)),
            ("k", dtype, shape(hkv), bytes(&k)),
            ("v", dtype, shape(hkv), bytes(&v)),
        ],
    );
    Input {
        path,
        layers,
        t,
        hq,
        hkv,
        d,
        q,
        k,
        v,
    }
}

impl Input {
    /// Exact attention of the last `n` queries of every layer, `[L·n·hq·d]`.
    fn exact(&self, n: usize, opts: &AttendOptions) -> Vec<f32> {
        let (t, hq, hkv, d) = (self.t, self.hq, self.hkv, self.d);
        let mut out = Vec::new();
        for l in 0..self.layers.unwrap_or(1) {
            let kv = &self.k[l * t * hkv * d..][..t * hkv * d];
            let vv = &self.v[l * t * hkv * d..][..t * hkv * d];
            let q = &self.q[(l * t + t - n) * hq * d..][..n * hq * d];
            out.extend(attend_exact(kv, vv, hkv, q, hq, d, opts));
        }
        out
    }

    fn out_shape(&self, n: usize) -> Vec<usize> {
        match self.layers {
            Some(l) => vec![l, n, self.hq, self.d],
            None => vec![n, self.hq, self.d],
        }
    }
}

/// Runs `kvpack attend` that must succeed; returns the summary and `out` (shape, values).
fn attend(input: &Path, output: &Path, extra: &[&str]) -> (Value, Vec<usize>, Vec<f32>) {
    let (i, o) = (
        input.to_str().expect("utf-8 path"),
        output.to_str().expect("utf-8 path"),
    );
    let mut args = vec!["attend", "--input", i, "--output", o];
    args.extend_from_slice(extra);
    let out = kvpack(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kvpack {args:?} failed: {stderr}");
    let s: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stderr}"));
    let bytes = std::fs::read(output).expect("read output");
    let st = SafeTensors::deserialize(&bytes).expect("output is safetensors");
    assert_eq!(st.names().len(), 1, "only `out` is written");
    let t = st.tensor("out").expect("tensor `out`");
    assert_eq!(t.dtype(), Dtype::F32);
    let shape = t.shape().to_vec();
    (s, shape, bytemuck::pod_collect_to_vec(t.data()))
}

/// ||a−b||/||b|| in f64.
fn rel(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let (mut diff, mut norm) = (0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        diff += (f64::from(x) - f64::from(y)).powi(2);
        norm += f64::from(y).powi(2);
    }
    (diff / norm).sqrt()
}

/// The worst per-row (D values) relative error of `a` against `b`.
fn worst_row(a: &[f32], b: &[f32], d: usize) -> f64 {
    a.chunks_exact(d)
        .zip(b.chunks_exact(d))
        .map(|(x, y)| rel(x, y))
        .fold(0.0, f64::max)
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Checks the summary's shape fields and the reported error against the test's own; returns
/// the overall error.
fn check_summary(s: &Value, x: &Input, n: usize, out: &[f32], exact: &[f32]) -> f64 {
    assert_eq!(s["tokens"], x.t);
    assert_eq!(s["queries"], n);
    assert_eq!(s["q_heads"], x.hq);
    assert_eq!(s["kv_heads"], x.hkv);
    assert_eq!(s["dim"], x.d);
    assert_eq!(s["layers"], x.layers.unwrap_or(1));
    assert_eq!(
        s["per_layer"].as_array().expect("per_layer").len(),
        x.layers.unwrap_or(1)
    );
    let overall = num(&s["rel_l2_error"]["overall"]);
    let mine = rel(out, exact);
    assert!(
        (overall - mine).abs() <= 1e-6 + 1e-3 * mine,
        "summary says {overall}, the test measures {mine}"
    );
    let worst = num(&s["rel_l2_error"]["row_max"]);
    let mine_worst = worst_row(out, exact, x.d);
    assert!(
        (worst - mine_worst).abs() <= 1e-6 + 1e-3 * mine_worst,
        "worst row: summary {worst}, test {mine_worst}"
    );
    assert!(num(&s["rel_l2_error"]["row_mean"]) <= worst);
    assert!(num(&s["bytes_held"]["total"]) > 0.0);
    assert!(num(&s["ratio"]) > 0.0);
    overall
}

#[test]
fn attend_f32_single_layer_methods() {
    let dir = scratch("attend", "f32");
    let x = make_input(&dir, "attend_f32", Dtype::F32, None, 80, 4, 2, 32);
    let out = dir.join("out.safetensors");
    let n = 6;
    let exact = x.exact(n, &AttendOptions::default());
    let q = "6";

    let (s, shape, o) = attend(
        &x.path,
        &out,
        &["--path", "cpu", "--queries", q, "--method", "f16"],
    );
    assert_eq!(shape, x.out_shape(n));
    assert_eq!(s["method"], "f16");
    assert_eq!(s["path"], "cpu");
    assert_eq!(s["adapter"], "cpu");
    assert_eq!(s["dtype"]["q"], "f32");
    let e16 = check_summary(&s, &x, n, &o, &exact);
    assert!(e16 <= 1e-3, "f16 cache error {e16}");
    assert!((num(&s["ratio"]) - 1.0).abs() < 1e-9, "{}", s["ratio"]);

    let kivi = |bits: &str| {
        let (s, shape, o) = attend(
            &x.path,
            &out,
            &[
                "--path",
                "cpu",
                "--queries",
                q,
                "--method",
                "kivi",
                "--k-bits",
                bits,
                "--v-bits",
                bits,
                "--residual",
                "32",
            ],
        );
        assert_eq!(shape, x.out_shape(n));
        assert_eq!(s["method"], "kivi");
        assert_eq!(
            s["config"]["keys"]["options"],
            format!("bits={bits},group=32,params=f16")
        );
        (check_summary(&s, &x, n, &o, &exact), num(&s["ratio"]))
    };
    let (e8, r8) = kivi("8");
    let (e2, r2) = kivi("2");
    eprintln!("f32 input: f16 {e16:.2e}, kivi-8 {e8:.2e} ({r8:.2}x), kivi-2 {e2:.2e} ({r2:.2}x)");
    assert!(e8 > 0.0 && e8 < 2e-2, "8-bit error {e8}");
    assert!(e2 > 5.0 * e8 && e2 < 0.5, "2-bit error {e2} vs 8-bit {e8}");
    assert!(r2 > r8 && r8 > 1.0, "ratios {r2} {r8}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn attend_f16_layers() {
    let dir = scratch("attend", "f16");
    let x = make_input(&dir, "attend_f16", Dtype::F16, Some(3), 48, 6, 2, 16);
    let out = dir.join("out.safetensors");
    let n = 5;
    let exact = x.exact(n, &AttendOptions::default());
    let (s, shape, o) = attend(
        &x.path,
        &out,
        &["--path", "cpu", "--queries", "5", "--method", "f16"],
    );
    assert_eq!(shape, vec![3, 5, 6, 16]);
    assert_eq!(s["dtype"]["k"], "f16");
    let e16 = check_summary(&s, &x, n, &o, &exact);
    assert!(e16 <= 1e-3, "f16 cache on f16 input: {e16}");
    // The whole cache quantized (R = 0) and part of it (R = 32 > T − G).
    for residual in ["0", "16"] {
        let (s, shape, o) = attend(
            &x.path,
            &out,
            &[
                "--path",
                "cpu",
                "--queries",
                "5",
                "--method",
                "kivi",
                "--k-bits",
                "4",
                "--v-bits",
                "4",
                "--group",
                "16",
                "--residual",
                residual,
            ],
        );
        assert_eq!(shape, vec![3, 5, 6, 16]);
        let e = check_summary(&s, &x, n, &o, &exact);
        eprintln!("f16 layers: kivi-4 R={residual} {e:.2e}");
        assert!(e > 0.0 && e < 0.2, "4-bit error {e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn attend_window_sinks_and_scale_change_the_result() {
    let dir = scratch("attend", "window");
    let x = make_input(&dir, "attend_window", Dtype::F32, None, 64, 4, 4, 16);
    let out = dir.join("out.safetensors");
    let n = 8;
    let base = ["--path", "cpu", "--queries", "8", "--method", "f16"];
    let (_, _, plain) = attend(&x.path, &out, &base);
    let cases: [(&[&str], AttendOptions); 3] = [
        (
            &["--window", "10"],
            AttendOptions::default().window(Some(10)),
        ),
        (
            &["--window", "10", "--sinks", "4"],
            AttendOptions::default().window(Some(10)).sinks(4),
        ),
        (
            &["--scale", "0.5"],
            AttendOptions::default().scale(Some(0.5)),
        ),
    ];
    let mut outs = vec![plain.clone()];
    for (flags, opts) in cases {
        let (s, shape, o) = attend(&x.path, &out, &[&base[..], flags].concat());
        assert_eq!(shape, x.out_shape(n));
        // The error is measured against exact attention with the same options.
        let e = check_summary(&s, &x, n, &o, &x.exact(n, &opts));
        assert!(e <= 1e-3, "{flags:?}: {e}");
        for prev in &outs {
            assert!(rel(&o, prev) > 1e-3, "{flags:?} did not change the output");
        }
        outs.push(o);
    }
    let (s, _, _) = attend(
        &x.path,
        &out,
        &[&base[..], &["--window", "10", "--sinks", "4"]].concat(),
    );
    assert_eq!(s["options"]["window"], 10);
    assert_eq!(s["options"]["sinks"], 4);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn attend_bad_inputs_fail_with_a_message() {
    let dir = scratch("attend", "bad");
    let good = make_input(&dir, "good", Dtype::F32, None, 20, 4, 2, 8);
    let g = good.path.to_str().expect("utf-8");
    let o = dir.join("o.safetensors");
    let o = o.to_str().expect("utf-8");
    let run = |input: &str, extra: &[&str]| {
        let mut a = vec!["attend", "--path", "cpu", "--input", input, "--output", o];
        a.extend_from_slice(extra);
        failing(&a)
    };
    let e = run(g, &["--queries", "0"]);
    assert!(e.contains("queries"), "{e}");
    let e = run(g, &["--queries", "21"]);
    assert!(e.contains("--queries 21") && e.contains("T = 20"), "{e}");
    let e = run(g, &[]);
    assert!(e.contains("--queries"), "{e}");
    // An unknown method lists the valid ones; an unknown option the valid keys; a short form
    // out of range is refused; an alias flag with a full spec is refused.
    let e = run(g, &["--queries", "1", "--method", "kivi7"]);
    assert!(e.contains("unknown method") && e.contains("kivi"), "{e}");
    let e = run(g, &["--queries", "1", "--method", "kivi:bitz=4"]);
    assert!(
        e.contains("unknown option `bitz`") && e.contains("kbits"),
        "{e}"
    );
    let e = run(g, &["--queries", "1", "--method", "kivi-9"]);
    assert!(e.contains("bit width 9"), "{e}");
    let e = run(
        g,
        &["--queries", "1", "--method", "kivi:bits=4", "--k-bits", "2"],
    );
    assert!(e.contains("aliases"), "{e}");
    let e = run(
        g,
        &[
            "--queries",
            "1",
            "--method",
            "kivi:residual=32/f16:residual=64",
        ],
    );
    assert!(e.contains("one number per layer"), "{e}");
    let e = run(g, &["--queries", "1", "--k-bits", "9"]);
    assert!(e.contains("k-bits"), "{e}");
    let e = run(g, &["--queries", "1", "--group", "32", "--residual", "40"]);
    assert!(e.contains("kvpack: error"), "{e}");
    let e = run(g, &["--queries", "1", "--window", "0"]);
    assert!(e.contains("window"), "{e}");
    let e = run(g, &["--queries", "1", "--scale", "NaN"]);
    assert!(e.contains("scale"), "{e}");
    let e = run(g, &["--queries", "1", "--path", "gpu"]);
    assert!(e.contains("path"), "{e}");
    let e = run("/nonexistent/qkv.safetensors", &["--queries", "1"]);
    assert!(e.contains("cannot read"), "{e}");

    let mut rng = common::rng("attend_bad_inputs");
    let bad = |name: &str, tensors: &[Named]| -> String {
        let p = dir.join(format!("{name}.safetensors"));
        write(&p, tensors);
        p.to_str().expect("utf-8").to_string()
    };
    let t = |shape: &[usize], rng: &mut rand::rngs::StdRng| -> Vec<u8> {
        f32_bytes(&random(rng, shape.iter().product()))
    };
    let f = Dtype::F32;
    let kv = |rng: &mut rand::rngs::StdRng| -> Vec<Named> {
        vec![
            ("k", f, vec![20, 2, 8], t(&[20, 2, 8], rng)),
            ("v", f, vec![20, 2, 8], t(&[20, 2, 8], rng)),
        ]
    };
    // No q.
    let p = bad("no_q", &kv(&mut rng));
    let e = run(&p, &["--queries", "1"]);
    assert!(e.contains("no tensor `q`"), "{e}");
    // No v.
    let p = bad(
        "no_v",
        &[
            ("q", f, vec![20, 4, 8], t(&[20, 4, 8], &mut rng)),
            ("k", f, vec![20, 2, 8], t(&[20, 2, 8], &mut rng)),
        ],
    );
    let e = run(&p, &["--queries", "1"]);
    assert!(e.contains("no tensor `v`"), "{e}");
    // Hq = 3 is not a multiple of Hkv = 2.
    let mut ts = kv(&mut rng);
    ts.push(("q", f, vec![20, 3, 8], t(&[20, 3, 8], &mut rng)));
    let e = run(&bad("hq", &ts), &["--queries", "1"]);
    assert!(e.contains("multiple"), "{e}");
    // T of q differs from T of k.
    let mut ts = kv(&mut rng);
    ts.push(("q", f, vec![19, 4, 8], t(&[19, 4, 8], &mut rng)));
    let e = run(&bad("t", &ts), &["--queries", "1"]);
    assert!(e.contains("T must match"), "{e}");
    // D of q differs.
    let mut ts = kv(&mut rng);
    ts.push(("q", f, vec![20, 4, 16], t(&[20, 4, 16], &mut rng)));
    let e = run(&bad("d", &ts), &["--queries", "1"]);
    assert!(e.contains("width"), "{e}");
    // q with layers, k without.
    let mut ts = kv(&mut rng);
    ts.push(("q", f, vec![1, 20, 4, 8], t(&[1, 20, 4, 8], &mut rng)));
    let e = run(&bad("rank", &ts), &["--queries", "1"]);
    assert!(e.contains("[L, T, H, D]"), "{e}");
    // A NaN in the queries that attend: kvpack rejects it.
    let mut ts = kv(&mut rng);
    let mut qv = random(&mut rng, 20 * 4 * 8);
    qv[19 * 32 + 5] = f32::NAN;
    ts.push(("q", f, vec![20, 4, 8], f32_bytes(&qv)));
    let e = run(&bad("nan", &ts), &["--queries", "1", "--method", "f16"]);
    assert!(e.contains("kvpack: error"), "{e}");
    // Not a safetensors file.
    let p = dir.join("junk.safetensors");
    std::fs::write(&p, b"junk").expect("write");
    let e = run(p.to_str().expect("utf-8"), &["--queries", "1"]);
    assert!(e.contains("not a valid safetensors"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn attend_paris_fixture() {
    let Some(input) = common::shared_fixture("paris.safetensors", "attend_paris_fixture") else {
        return;
    };
    let dir = scratch("attend", "paris");
    let out = dir.join("paris_out.safetensors");
    let (s, shape, o) = attend(
        &input,
        &out,
        &[
            "--path",
            "cpu",
            "--queries",
            "4",
            "--method",
            "kivi",
            "--k-bits",
            "4",
            "--v-bits",
            "4",
            "--residual",
            "32",
        ],
    );
    assert_eq!(shape, vec![30, 4, 9, 64]);
    assert!(o.iter().all(|x| x.is_finite()));
    assert_eq!(s["tokens"], 122);
    assert_eq!(s["q_heads"], 9);
    assert_eq!(s["kv_heads"], 3);
    assert_eq!(s["layers"], 30);
    let e = num(&s["rel_l2_error"]["overall"]);
    let ratio = num(&s["ratio"]);
    eprintln!(
        "paris kivi-4 R=32 N=4: ratio {ratio:.3}, rel L2 {e:.4}, worst row {:.4}",
        num(&s["rel_l2_error"]["row_max"])
    );
    assert!(ratio > 1.0 && e > 0.0 && e < 0.2, "{ratio} {e}");
    let (s16, _, _) = attend(
        &input,
        &out,
        &["--path", "cpu", "--queries", "4", "--method", "f16"],
    );
    let e16 = num(&s16["rel_l2_error"]["overall"]);
    assert!(e16 <= 1e-3 && e16 < e, "f16 {e16} kivi-4 {e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn attend_wgsl_matches_cpu() {
    let dir = scratch("attend", "wgsl");
    let x = make_input(&dir, "attend_wgsl", Dtype::F16, Some(2), 100, 6, 2, 32);
    let out = dir.join("out.safetensors");
    let (i, o) = (
        x.path.to_str().expect("utf-8"),
        out.to_str().expect("utf-8"),
    );
    let probe = kvpack(&[
        "attend",
        "--path",
        "wgsl",
        "--queries",
        "4",
        "--method",
        "f16",
        "--input",
        i,
        "--output",
        o,
    ]);
    if !probe.status.success() {
        let e = String::from_utf8_lossy(&probe.stderr);
        assert!(
            e.contains("not available"),
            "wgsl failed for another reason than a missing GPU: {e}"
        );
        common::skip("attend_wgsl_matches_cpu", e.trim());
        return;
    }
    for method in [
        &["--method", "f16"][..],
        &[
            "--method",
            "kivi",
            "--k-bits",
            "4",
            "--v-bits",
            "4",
            "--residual",
            "32",
            "--window",
            "40",
            "--sinks",
            "3",
        ][..],
    ] {
        let base = [&["--queries", "4"][..], method].concat();
        let (g, gshape, gout) = attend(&x.path, &out, &[&["--path", "wgsl"][..], &base].concat());
        let (c, cshape, cout) = attend(&x.path, &out, &[&["--path", "cpu"][..], &base].concat());
        assert_eq!(gshape, cshape);
        assert!(
            g["path"].as_str().is_some_and(|p| p.starts_with("wgsl-")),
            "{}",
            g["path"]
        );
        assert_ne!(g["adapter"], "cpu");
        assert_eq!(c["path"], "cpu");
        let worst = worst_row(&gout, &cout, x.d);
        let (eg, ec) = (
            num(&g["rel_l2_error"]["overall"]),
            num(&c["rel_l2_error"]["overall"]),
        );
        eprintln!(
            "{method:?}: wgsl vs cpu worst row {worst:.2e}; error wgsl {eg:.3e} cpu {ec:.3e}"
        );
        assert!(
            worst <= 1e-4,
            "{method:?}: wgsl and cpu differ by {worst} in a row"
        );
        // The GPU store may hold more (capacity allocated ahead); the payload is the same.
        assert_eq!(g["bytes_payload"]["total"], c["bytes_payload"]["total"]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
