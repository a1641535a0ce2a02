//! The `targets` block of BENCHMARKS.md (included by `bench_report.rs`): the attention issue's
//! goals against what the committed JSON measured. Each row is one case of the table;
//! the goal is the (a specification, not a result), every measured number comes from
//! `gpu_attend.json`, `gpu_kivi.json` or `torch_baseline.json`.

use std::fmt::Write as _;

use serde_json::Value;

/// What a case's goal compares.
enum Goal {
    /// The tier-1 median at most this many µs (and the tensor-core arm at most `.1`, if set).
    Micros(f64, Option<f64>),
    /// The tier-1 median at most PyTorch's.
    PyTorch,
    /// At least this % of the copy whose bytes moved are nearest (gpu_kivi's `pct_roofline`).
    CopyPct(f64),
}

/// One case: which arms it reads and its goal.
struct Case {
    label: &'static str,
    kind: &'static str,
    methods: &'static [&'static str],
    t: u64,
    tq: u64,
    goal: Goal,
}

const CASES: [Case; 8] = [
    Case {
        label: "KIVI-4 decode 32k",
        kind: "attend",
        methods: &["kivi-4"],
        t: 32768,
        tq: 1,
        goal: Goal::Micros(30.0, None),
    },
    Case {
        label: "KIVI-4 decode 128k",
        kind: "attend",
        methods: &["kivi-4"],
        t: 131072,
        tq: 1,
        goal: Goal::Micros(70.0, None),
    },
    Case {
        label: "KIVI-2 decode 128k",
        kind: "attend",
        methods: &["kivi-2"],
        t: 131072,
        tq: 1,
        goal: Goal::Micros(50.0, None),
    },
    Case {
        label: "f16 decode 32k",
        kind: "attend",
        methods: &["f16"],
        t: 32768,
        tq: 1,
        goal: Goal::PyTorch,
    },
    Case {
        label: "f16 decode 128k",
        kind: "attend",
        methods: &["f16"],
        t: 131072,
        tq: 1,
        goal: Goal::PyTorch,
    },
    Case {
        label: "any method decode 1k (the fastest)",
        kind: "attend",
        methods: &["f16", "kivi-4", "kivi-2"],
        t: 1024,
        tq: 1,
        goal: Goal::Micros(20.0, None),
    },
    Case {
        label: "prefill Tq = 64 at 32k, KIVI-4",
        kind: "attend",
        methods: &["kivi-4"],
        t: 32768,
        tq: 64,
        goal: Goal::Micros(1500.0, Some(250.0)),
    },
    Case {
        label: "KIVI quantize keys, 8 heads × 32k, 2-bit",
        kind: "keys",
        methods: &["2-bit"],
        t: 32768,
        tq: 0,
        goal: Goal::CopyPct(70.0),
    },
];

fn arms(v: &Value) -> impl Iterator<Item = &Value> {
    v["arms"].as_array().into_iter().flatten()
}

fn med(a: &Value) -> f64 {
    a["median_us"].as_f64().unwrap_or(f64::NAN)
}

/// The case's fastest arm with `variant` (None: the default arm) among its methods.
fn pick<'a>(v: &'a Value, c: &Case, variant: Option<&str>) -> Option<&'a Value> {
    arms(v)
        .filter(|a| {
            a["kind"] == c.kind
                && a["T"].as_u64() == Some(c.t)
                && (c.tq == 0 || a["Tq"].as_u64() == Some(c.tq))
                && !a["twin"].as_bool().unwrap_or(false)
                && c.methods.iter().any(|m| a["method"] == *m)
                && a["variant"].as_str() == variant
        })
        .min_by(|a, b| med(a).total_cmp(&med(b)))
}

/// The copy arm of `v` whose bytes are nearest to `bytes`.
fn copy_near(v: &Value, bytes: u64) -> Option<&Value> {
    arms(v)
        .filter(|a| a["kind"] == "copy")
        .min_by_key(|a| a["bytes"].as_u64().unwrap_or(0).abs_diff(bytes))
}

fn torch(t: Option<&Value>, c: &Case) -> Option<f64> {
    let name = |n: String| {
        t?["rows"]
            .as_array()?
            .iter()
            .find(|r| r["arm"] == n.as_str())?["median_us"]
            .as_f64()
    };
    match (c.kind, c.tq) {
        ("attend", 1) => name(format!("sdpa fp16 decode T={}", c.t)),
        ("attend", _) => {
            let a = name(format!("sdpa fp16 prefill64 T={}", c.t));
            let b = name(format!("sdpa fp16 prefill64 lower-right T={}", c.t));
            a.into_iter().chain(b).min_by(f64::total_cmp)
        }
        _ => None,
    }
}

/// The `targets` block: `us` formats µs as the other tables do; `floors` is the line saying
/// the runs' noise floors.
pub fn block(
    kivi: &Value,
    attend: &Value,
    torch_v: Option<&Value>,
    us: fn(f64) -> String,
    floors: &str,
) -> String {
    // The card, from the adapter's name as the run reported it ("NVIDIA H200 (Vulkan, …)").
    let adapter = attend["adapter"].as_str().unwrap_or("?");
    let card = adapter
        .split(" (")
        .next()
        .unwrap_or(adapter)
        .trim_start_matches("NVIDIA ");
    let mut s = String::from(
        "| case | goal | tier 1 µs | tier 3 (tensor cores) µs | PyTorch µs | same-size copy µs | met |\n|---|---|---|---|---|---|---|\n",
    );
    for c in &CASES {
        let v = if c.kind == "keys" { kivi } else { attend };
        let t1 = pick(
            v,
            c,
            if c.kind == "keys" {
                Some("fused")
            } else {
                None
            },
        );
        let t3 = pick(v, c, Some("tensor cores"));
        let pt = torch(torch_v, c);
        let copy = t1
            .and_then(|a| a["bytes"].as_u64())
            .and_then(|b| copy_near(v, b))
            .map(med);
        let t1m = t1.map_or(f64::NAN, med);
        let t1s = match t1 {
            Some(a) if c.methods.len() > 1 => {
                format!("{} ({})", us(t1m), a["method"].as_str().unwrap_or("?"))
            }
            Some(a) if c.kind == "keys" => format!(
                "{} ({:.1} % of the copy)",
                us(t1m),
                a["pct_roofline"].as_f64().unwrap_or(f64::NAN)
            ),
            _ => us(t1m),
        };
        let (goal, met) = match c.goal {
            Goal::Micros(g, None) => (format!("≤ {}", us(g)), t1m <= g),
            Goal::Micros(g, Some(g3)) => (
                format!("≤ {} tier 1, ≤ {} tier 3", us(g), us(g3)),
                t1m <= g || t3.is_some_and(|a| med(a) <= g3),
            ),
            Goal::PyTorch => ("≤ PyTorch".into(), pt.is_some_and(|p| t1m <= p)),
            Goal::CopyPct(p) => (
                format!("≥ {p:.0} % of the copy"),
                t1.and_then(|a| a["pct_roofline"].as_f64())
                    .is_some_and(|x| x >= p),
            ),
        };
        let _ = writeln!(
            s,
            "| {} | {goal} | {t1s} | {} | {} | {} | {} |",
            c.label,
            t3.map_or("–".into(), |a| us(med(a))),
            pt.map_or("–".into(), us),
            copy.map_or("–".into(), us),
            if met { "yes" } else { "**no**" },
        );
    }
    let _ = write!(
        s,
        "\nMedians from the runs in the header ({card}). Tier 1: the decode kernel on the f32 pipe (`AttendKernel::Decode`, wgsl-subgroup: what \
         `Auto` runs without tensor cores); tier 3: `AttendKernel::TensorDecode` / `TensorPrefill` on the same cache. \
         Same-size copy: the run's copy arm whose bytes are nearest to the arm's. {floors}\n"
    );
    s
}
