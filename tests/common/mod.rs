//! Parity harness: one test body per kernel, instantiated for every path and variant.
//!
//! Targets: `cpu` (the reference), `wgsl_subgroup` (a device with `SUBGROUP`),
//! `wgsl_workgroup` (a device created with `SUBGROUP` withheld, so the workgroup-memory WGSL
//! runs as it would on an adapter without subgroups), and `msl_emulated` (the MSL sources on
//! the CPU emulator of `msl-emu/`). A GPU target that cannot run prints a visible
//! `SKIP ... because ...` line; with `KVPACK_REQUIRE_GPU=1` the skip is a failure.
#![allow(dead_code)]

use std::sync::OnceLock;

use kvpack::{Context, HeadlessOptions, PathChoice};
use rand::{Rng, SeedableRng};

/// Where a test body runs.
#[derive(Clone, Debug)]
pub enum Target {
    /// The CPU reference.
    Cpu(Context),
    /// WGSL on a GPU context with this path choice.
    Wgsl(Context, PathChoice),
}

impl Target {
    pub fn name(&self) -> String {
        match self {
            Target::Cpu(_) => "cpu".into(),
            Target::Wgsl(_, p) => p.to_string(),
        }
    }

    pub fn ctx(&self) -> &Context {
        match self {
            Target::Cpu(c) | Target::Wgsl(c, _) => c,
        }
    }

    pub fn path(&self) -> PathChoice {
        match self {
            Target::Cpu(_) => PathChoice::Cpu,
            Target::Wgsl(_, p) => *p,
        }
    }

    pub fn is_gpu(&self) -> bool {
        !matches!(self, Target::Cpu(_))
    }
}

/// Reports a skip visibly; fails when `KVPACK_REQUIRE_GPU=1`.
pub fn skip(test: &str, reason: &str) {
    let msg = format!("SKIP {test} because {reason}");
    if std::env::var("KVPACK_REQUIRE_GPU").is_ok_and(|v| v == "1") {
        panic!("{msg} (KVPACK_REQUIRE_GPU=1 forbids skips)");
    }
    eprintln!("{msg}");
}

fn headless(withhold: wgpu::Features) -> Result<Context, String> {
    let opts = HeadlessOptions {
        withhold_features: withhold,
        require_gpu: true,
        ..Default::default()
    };
    Context::headless_with(&opts).map_err(|e| e.to_string())
}

/// The shared device with every feature kvpack wants.
pub fn gpu_context() -> Result<Context, String> {
    static CTX: OnceLock<Result<Context, String>> = OnceLock::new();
    CTX.get_or_init(|| headless(wgpu::Features::empty()))
        .clone()
}

/// A device created without `SUBGROUP`, as on adapters that lack it.
pub fn gpu_context_without_subgroups() -> Result<Context, String> {
    static CTX: OnceLock<Result<Context, String>> = OnceLock::new();
    CTX.get_or_init(|| headless(wgpu::Features::SUBGROUP))
        .clone()
}

/// The target for `kind` (`cpu`, `wgsl_subgroup`, `wgsl_workgroup`), or `None` after a
/// visible skip.
pub fn target(kind: &str, test: &str) -> Option<Target> {
    let made = match kind {
        "cpu" => Ok(Target::Cpu(Context::cpu())),
        "wgsl_subgroup" => gpu_context().and_then(|c| {
            if c.features().contains(wgpu::Features::SUBGROUP) {
                Ok(Target::Wgsl(c, PathChoice::WgslSubgroup))
            } else {
                Err(format!(
                    "adapter {:?} does not offer SUBGROUP",
                    c.adapter_info().map(|i| &i.name)
                ))
            }
        }),
        "wgsl_workgroup" => {
            gpu_context_without_subgroups().map(|c| Target::Wgsl(c, PathChoice::WgslWorkgroup))
        }
        other => Err(format!("unknown target {other}")),
    };
    match made {
        Ok(t) => Some(t),
        Err(reason) => {
            skip(&format!("{test}[{kind}]"), &reason);
            None
        }
    }
}

/// Instantiates `body(&Target)` as one `#[test]` per target.
#[macro_export]
macro_rules! parity_tests {
    ($body:ident) => {
        mod $body {
            fn run(kind: &str) {
                if let Some(t) = $crate::common::target(kind, stringify!($body)) {
                    super::$body(&t);
                }
            }
            #[test]
            fn cpu() {
                run("cpu");
            }
            #[test]
            fn wgsl_subgroup() {
                run("wgsl_subgroup");
            }
            #[test]
            fn wgsl_workgroup() {
                run("wgsl_workgroup");
            }
        }
    };
}

/// A fresh seeded RNG; the seed is printed so that a failure can be replayed with
/// `KVPACK_SEED=<seed>`.
pub fn rng(test: &str) -> rand::rngs::StdRng {
    let seed = std::env::var("KVPACK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random::<u64>());
    eprintln!("{test}: seed {seed} (replay with KVPACK_SEED={seed})");
    rand::rngs::StdRng::seed_from_u64(seed)
}

/// The poison every output buffer is filled with before a kernel runs.
pub const POISON: u32 = 0xDEAD_BEEF;

/// `../shared/fixtures/smollm2-135m/<name>` relative to the repo root, or `None` after a
/// visible skip (a failure when `KVPACK_REQUIRE_SHARED=1`).
pub fn shared_fixture(name: &str, test: &str) -> Option<std::path::PathBuf> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/smollm2-135m")
        .join(name);
    if p.exists() {
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

/// A real tensor from a fixture: (shape, f16 values).
pub fn load_f16(path: &std::path::Path, name: &str) -> (Vec<usize>, Vec<half::f16>) {
    let bytes = std::fs::read(path).expect("read fixture");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("parse fixture");
    let t = st.tensor(name).expect("tensor in fixture");
    assert_eq!(
        t.dtype(),
        safetensors::Dtype::F16,
        "{name} is f16 in the fixtures"
    );
    (t.shape().to_vec(), bytemuck::pod_collect_to_vec(t.data()))
}
