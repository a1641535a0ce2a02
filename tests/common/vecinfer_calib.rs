//! VecInfer calibration files for tests: the real SmolLM2 `paris` fixture's layers 0 and 10
//! (as a 2-layer model, 3 KV heads, head_dim 64), with the `story-512` fixture's tensors
//! (another text) to quantize and attend with; a synthetic one (1 layer, 2 KV heads, 6 query
//! heads, head_dim 32: the only shape whose f32 LUT fits a 32 KiB workgroup storage, as on
//! lavapipe and Metal) with its own synthetic data; and the LUT
//! attention kernels' cases (tests/vecinfer.rs, tests/mutants.rs) run through
//! [`super::attend_plans::check_case_within`].

use std::path::PathBuf;
use std::sync::OnceLock;

use half::f16;
use kvpack::calib::ModelIdentity;
use kvpack::calib::train::calibrate_capture;
use kvpack::model::QkvCapture;

/// The fixture layers the calibration is made of.
pub const LAYERS: [usize; 2] = [0, 10];

/// Layer `l` of a `[L, T, H, D]` fixture tensor, f32.
pub fn layer_of(x: &[f16], shape: &[usize], l: usize) -> Vec<f32> {
    let n = shape[1] * shape[2] * shape[3];
    x[l * n..][..n].iter().map(|v| v.to_f32()).collect()
}

/// The calibration file (`None` after a visible skip when the shared fixture is missing).
pub fn calib_file(test: &str) -> Option<PathBuf> {
    let paris = super::shared_fixture("paris.safetensors", test)?;
    let (sq, q) = super::load_f16(&paris, "q");
    let (sk, k) = super::load_f16(&paris, "k");
    let (_, v) = super::load_f16(&paris, "v");
    let cap = QkvCapture {
        tokens: sk[1],
        q: LAYERS.iter().map(|&l| layer_of(&q, &sq, l)).collect(),
        k: LAYERS.iter().map(|&l| layer_of(&k, &sk, l)).collect(),
        v: LAYERS.iter().map(|&l| layer_of(&v, &sk, l)).collect(),
    };
    let id = ModelIdentity {
        name: "smollm2-paris-layers-0-10".into(),
        arch: "llama".into(),
        layers: 2,
        q_heads: sq[2],
        kv_heads: sk[2],
        head_dim: sk[3],
    };
    let opts = kvpack::calib::train::CalibOptions {
        qfilters: false,
        ..Default::default()
    };
    let cal = calibrate_capture(&cap, id, "paris", "paris.safetensors", &opts, &|_| {}).unwrap();
    let p = std::env::temp_dir().join(format!(
        "kvpack-vecinfer-{}-{test}.safetensors",
        std::process::id()
    ));
    cal.write(&p).unwrap();
    Some(p)
}

/// The story fixture's q `[Tq·Hq·D]` (its last `tq` of `t` positions), k and v `[t·H·D]` of
/// fixture layer `l`, and (Hq, H, D).
pub type Story = (Vec<f32>, Vec<f32>, Vec<f32>, (usize, usize, usize));

/// See [`Story`] (`None` after a visible skip).
pub fn story(test: &str, l: usize, t: usize, tq: usize) -> Option<Story> {
    let p = super::shared_fixture("story-512.safetensors", test)?;
    let (sq, q) = super::load_f16(&p, "q");
    let (sk, k) = super::load_f16(&p, "k");
    let (_, v) = super::load_f16(&p, "v");
    let (hq, h, d) = (sq[2], sk[2], sk[3]);
    Some((
        layer_of(&q, &sq, l)[(t - tq) * hq * d..t * hq * d].to_vec(),
        layer_of(&k, &sk, l)[..t * h * d].to_vec(),
        layer_of(&v, &sk, l)[..t * h * d].to_vec(),
        (hq, h, d),
    ))
}

/// One calibration file of the paris fixture per test process (k-means takes a while).
pub fn shared_calib() -> Option<&'static PathBuf> {
    static P: OnceLock<Option<PathBuf>> = OnceLock::new();
    P.get_or_init(|| calib_file("shared")).as_ref()
}

/// Synthetic (q, k, v) of the synthetic calibration's shape: `t` tokens (keys with per-channel
/// offsets fixed for the model, some channels 4× wider: outliers for λ), the last `tq` queries.
pub fn synthetic(seed: u64, t: usize, tq: usize) -> Story {
    use rand::{Rng, SeedableRng};
    let (hq, h, d) = (6, 2, 32);
    let mut model = rand::rngs::StdRng::seed_from_u64(15);
    let offs: Vec<f32> = (0..h * d).map(|_| model.random_range(-2.0..2.0)).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let k = (0..t * h * d)
        .map(|i| {
            let w = if i % 5 == 0 { 4.0 } else { 1.0 };
            offs[i % (h * d)] + w * rng.random_range(-1.0f32..1.0)
        })
        .collect();
    let v = (0..t * h * d)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    let q = (0..tq * hq * d)
        .map(|_| rng.random_range(-1.5f32..1.5))
        .collect();
    (q, k, v, (hq, h, d))
}

/// The synthetic calibration (1 layer, 2 KV heads, head_dim 32), made once per process from
/// 600 tokens of [`synthetic`] (seed 1; tests draw their data with other seeds).
pub fn synthetic_calib() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let (q, k, v, (hq, h, d)) = synthetic(1, 600, 600);
        let cap = QkvCapture {
            tokens: 600,
            q: vec![q],
            k: vec![k],
            v: vec![v],
        };
        let id = ModelIdentity {
            name: "synthetic-d32".into(),
            arch: "llama".into(),
            layers: 1,
            q_heads: hq,
            kv_heads: h,
            head_dim: d,
        };
        let opts = kvpack::calib::train::CalibOptions {
            qfilters: false,
            ..Default::default()
        };
        let cal = calibrate_capture(&cap, id, "synthetic", "synthetic", &opts, &|_| {}).unwrap();
        let p = std::env::temp_dir().join(format!(
            "kvpack-vecinfer-{}-synthetic-d32.safetensors",
            std::process::id()
        ));
        cal.write(&p).unwrap();
        p
    })
}

/// A LUT attention kernel case: the attention case (its `method` names the calibration
/// file), the workgroup-storage size the CPU-built layer plans its kernels for (which picks
/// the LUT's precision) and its data (the synthetic shape, or story layer 10 = calibration
/// layer 1).
pub struct LutCase {
    pub case: super::attend_plans::Case,
    pub limit: u32,
    pub synthetic: bool,
}

/// The cases: VecInfer on both sides at D = 32 with an f32 LUT (two segments, wrapped ring)
/// and an f16 one (a lower limit; a window with sinks), then on the story fixture (D = 64):
/// VecInfer keys (f16 LUT) with KIVI values, KIVI and f16 keys with VecInfer values (the
/// prefill kernel's element reader); GQA 3, so a workgroup's 4 query vectors are of different
/// query heads. The story cases only with `story_calib` (the shared fixtures' calibration);
/// `full: false`: the first two (synthetic) only.
pub fn lut_cases(story_calib: Option<&std::path::Path>, full: bool) -> Vec<LutCase> {
    use super::attend_plans::Case;
    use kvpack::AttendOptions;
    let sc = synthetic_calib().display();
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let base = Case {
        what: "",
        method: "",
        t: 300,
        tq: 2,
        hq: 9,
        hkv: 3,
        d: 64,
        opts: AttendOptions::default(),
        seg_tokens: 1 << 20,
        ring_extra: 0,
        target: 64,
    };
    let synth = Case {
        hq: 6,
        hkv: 2,
        d: 32,
        ..base
    };
    let w = |window, sinks| AttendOptions::default().window(Some(window)).sinks(sinks);
    let mut out = vec![
        LutCase {
            case: Case {
                what: "D=32 vecinfer-1 both sides, f32 LUT, two segments, wrapped ring",
                method: leak(format!("vecinfer:bits=1,residual=24,calib={sc}")),
                seg_tokens: 128,
                ring_extra: 5,
                ..synth
            },
            limit: 32 << 10,
            synthetic: true,
        },
        LutCase {
            case: Case {
                what: "D=32 vecinfer-1 both sides, f16 LUT (24 KiB), Tq=4 window 100 sinks 2",
                method: leak(format!("vecinfer:bits=1,residual=16,calib={sc}")),
                tq: 4,
                opts: w(100, 2),
                ..synth
            },
            limit: 24 << 10,
            synthetic: true,
        },
        LutCase {
            case: Case {
                what: "D=32 vecinfer-2 keys from the codebook (its f16 LUT is 16 KiB) / vecinfer-1 values, splits merged",
                method: leak(format!("vecinfer:kbits=2,vbits=1,residual=8,calib={sc}")),
                seg_tokens: 128,
                ring_extra: 3,
                ..synth
            },
            limit: 16 << 10,
            synthetic: true,
        },
    ];
    if !full {
        return out;
    }
    out.push(LutCase {
        case: Case {
            what: "D=32 vecinfer-2 keys (f16 LUT: its f32 one is 32 KiB) / vecinfer-1 values, one long split",
                method: leak(format!("vecinfer:kbits=2,vbits=1,calib={sc}")),
                t: 500,
                target: 1,
                ..synth
            },
            limit: 32 << 10,
            synthetic: true,
    });
    let Some(story_calib) = story_calib else {
        return out;
    };
    let c = story_calib.display();
    out.extend([
        LutCase {
            case: Case {
                what: "D=64 story: vecinfer-1 keys (f16 LUT) / kivi-4 values, splits merged",
                method: leak(format!(
                    "vecinfer:bits=1,calib={c}/kivi:bits=4,group=32,residual=32"
                )),
                t: 400,
                target: 24,
                ..base
            },
            limit: 32 << 10,
            synthetic: false,
        },
        LutCase {
            case: Case {
                what: "D=64 story: kivi-4 keys / vecinfer-2 values, Tq=5 window 90",
                method: leak(format!(
                    "kivi:bits=4,group=32/vecinfer:bits=2,residual=32,calib={c}"
                )),
                tq: 5,
                opts: w(90, 0),
                target: 16,
                ..base
            },
            limit: 32 << 10,
            synthetic: false,
        },
        LutCase {
            case: Case {
                what: "D=64 story: f16 keys / vecinfer-1 values, all values quantized, splits merged",
                method: leak(format!("f16/vecinfer:bits=1,calib={c}")),
                t: 257,
                tq: 3,
                target: 40,
                ..base
            },
            limit: 32 << 10,
            synthetic: false,
        },
    ]);
    out
}

/// Runs one case on `t` (`cpu`: the reference against exact f64 attention on the layer's
/// reconstruction; elsewhere the kernels against the reference on the same words, within
/// 1e-4, or 1e-3 where the layer's LUT is f16). WGSL targets plan for no more than their
/// device's limit. Returns the form of the key scores: 0 the f32 LUT, 1 the f16 LUT, 2 the
/// codebook (VecInfer keys; 0 otherwise).
pub fn check_lut_case(t: &super::Target, lc: &LutCase) -> usize {
    use kvpack::cpu::attend::attend_exact;
    use kvpack::{Context, Input, KvLayer, Layer, Method, PathChoice};
    let c = &lc.case;
    let (q, k, v, (hq, h, d)) = if lc.synthetic {
        synthetic(2, c.t, c.tq)
    } else {
        story("lut_cases", 10, c.t, c.tq).expect("the story fixture")
    };
    assert_eq!((hq, h, d), (c.hq, c.hkv, c.d), "case shape vs data");
    let limit = match t {
        super::Target::Wgsl(ctx, _) => lc.limit.min(ctx.max_workgroup_storage_size()),
        _ => lc.limit,
    };
    let cpu = Context::cpu()
        .with_max_workgroup_storage_size(limit)
        .expect("limit");
    let method = Method::parse(c.method).expect("method");
    let index = usize::from(!lc.synthetic);
    let mut layer = Layer::new_at(&cpu, index, h, d, &method, PathChoice::Cpu).expect("layer");
    let cut = (c.t / 3) * h * d;
    layer
        .append(Input::F32(&k[..cut]), Input::F32(&v[..cut]))
        .expect("append");
    layer
        .append(Input::F32(&k[cut..]), Input::F32(&v[cut..]))
        .expect("append");
    let lut16 = layer.describe().contains("GPU LUT f16");
    let form = if layer.describe().contains("GPU scores from the codebook") {
        2
    } else {
        usize::from(lut16)
    };
    let reference = layer.attend(&q, hq, &c.opts).expect("reference");
    if let super::Target::Cpu(_) = t {
        let (kh, vh) = layer.reconstruct().expect("reconstruct");
        let exact = attend_exact(&kh, &vh, h, &q, hq, d, &c.opts);
        let err = super::rel_l2_rows(&reference, &exact, d);
        eprintln!(
            "lut_cases[cpu] {}: worst row rel L2 {err:e} against f64 on the reconstruction",
            c.what
        );
        assert!(err <= 1e-4, "cpu {}: worst row rel L2 {err:e}", c.what);
        return form;
    }
    let tol = if lut16 { 1e-3 } else { 1e-4 };
    eprintln!(
        "lut_cases[{}] {}: planned for {limit} bytes of workgroup storage: {}",
        t.name(),
        c.what,
        layer.describe()
    );
    super::attend_plans::check_case_within(t, c, &layer, &q, &reference, tol);
    form
}

/// The placeholder `codec_tests!` writes for a VecInfer calibration file (`calib=@synthetic`):
/// a calibration depends on the layer's geometry, which only the body knows, so a body parses
/// its spec with [`super::parse_method`] (or [`expand`]), which replaces it with
/// [`synthetic_calib_for`] of the body's (H, D). A body that parses the spec as it is fails
/// loudly (`cannot read it`), never skips.
pub const PLACEHOLDER: &str = "calib=@synthetic";

/// `spec` with [`PLACEHOLDER`] replaced by the synthetic calibration of `heads` KV heads of
/// width `dim` (other specs unchanged).
pub fn expand(spec: &str, heads: usize, dim: usize) -> String {
    if !spec.contains(PLACEHOLDER) {
        return spec.to_string();
    }
    let p = synthetic_calib_for(heads, dim);
    spec.replace(PLACEHOLDER, &format!("calib={}", p.display()))
}

/// A synthetic calibration (1 layer, `heads` KV heads of width `dim`, both presets), made
/// once per process and shape from 600 tokens of keys with per-channel offsets (every fifth
/// channel 4× wider: outliers for λ) and uniform values; seed 15 (bodies draw their own data).
pub fn synthetic_calib_for(heads: usize, dim: usize) -> PathBuf {
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;
    use std::sync::Mutex;
    static MADE: OnceLock<Mutex<HashMap<(usize, usize), PathBuf>>> = OnceLock::new();
    // Held while a file is made: concurrent bodies of one shape wait for the one file.
    let mut made = MADE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(p) = made.get(&(heads, dim)) {
        return p.clone();
    }
    let (t, row) = (600, heads * dim);
    let mut rng = rand::rngs::StdRng::seed_from_u64(15);
    let offs: Vec<f32> = (0..row).map(|_| rng.random_range(-2.0..2.0)).collect();
    let k: Vec<f32> = (0..t * row)
        .map(|i| {
            let w = if i % 5 == 0 { 4.0 } else { 1.0 };
            offs[i % row] + w * rng.random_range(-1.0f32..1.0)
        })
        .collect();
    let v: Vec<f32> = (0..t * row)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    let q: Vec<f32> = (0..t * row)
        .map(|_| rng.random_range(-1.5f32..1.5))
        .collect();
    let cap = QkvCapture {
        tokens: t,
        q: vec![q],
        k: vec![k],
        v: vec![v],
    };
    let id = ModelIdentity {
        name: format!("synthetic-h{heads}-d{dim}"),
        arch: "llama".into(),
        layers: 1,
        q_heads: heads,
        kv_heads: heads,
        head_dim: dim,
    };
    let opts = kvpack::calib::train::CalibOptions {
        qfilters: false,
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let cal = calibrate_capture(&cap, id, "synthetic", "synthetic", &opts, &|_| {})
        .unwrap_or_else(|e| panic!("synthetic calibration H={heads} D={dim}: {e}"));
    let p = std::env::temp_dir().join(format!(
        "kvpack-vecinfer-{}-synthetic-h{heads}-d{dim}.safetensors",
        std::process::id()
    ));
    cal.write(&p).expect("write the synthetic calibration");
    eprintln!(
        "synthetic VecInfer calibration H={heads} D={dim}: {} ({:.1} s)",
        p.display(),
        started.elapsed().as_secs_f64()
    );
    made.insert((heads, dim), p.clone());
    p
}
