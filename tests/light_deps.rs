//! The crates an app gets by adding `kvpack` with its default features (issue 20): asked of
//! `cargo tree` (offline, the lock file's versions), so a dependency added to the core, or an
//! optional one turned on by default, fails here.
//!
//! - with default features (and with none), kvpack's direct dependencies are exactly
//!   [`CORE`]: wgpu, bytemuck, half, pollster, thiserror, log, plus naga (the WGSL front end
//!   wgpu-core already builds), crc32fast (saved caches' checksums), safetensors and serde_json
//!   (calibration files, read by the `vecinfer` codec); a new one must be added here on purpose;
//! - nothing of [`HEAVY`] (the CLI's and the model code's crates) is anywhere in the default
//!   build's tree, build dependencies included;
//! - the check can fail: with `--features cli` every crate of [`HEAVY`] is found by the same
//!   query (so a change of `cargo tree`'s output cannot make the check pass vacuously), and
//!   without default features no wgpu backend crate (ash, glow) is built.

use std::collections::BTreeSet;
use std::process::Command;

/// kvpack's direct normal dependencies with default features.
const CORE: &[&str] = &[
    "bytemuck",
    "crc32fast",
    "half",
    "log",
    "naga",
    "pollster",
    "safetensors",
    "serde_json",
    "thiserror",
    "wgpu",
];

/// Crates that must stay behind the `model` / `cli` features.
const HEAVY: &[&str] = &[
    "clap",
    "clap_builder",
    "indicatif",
    "plotters",
    "dejavu",
    "rayon",
    "rayon-core",
    "regex",
    "fancy-regex",
];

/// The crate names `cargo tree -p kvpack` prints for these arguments (host target).
fn tree(args: &[&str]) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "tree",
            "--offline",
            "-p",
            "kvpack",
            "--prefix",
            "none",
            "-f",
            "{p}",
        ])
        .args(args)
        .output()
        .expect("running cargo tree");
    assert!(
        out.status.success(),
        "cargo tree {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: BTreeSet<String> = String::from_utf8(out.stdout)
        .expect("cargo tree prints UTF-8")
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    assert!(
        names.contains("kvpack"),
        "cargo tree {args:?} did not list kvpack: {names:?}"
    );
    names
}

fn direct(args: &[&str]) -> BTreeSet<String> {
    let mut a = vec!["-e", "normal", "--depth", "1"];
    a.extend_from_slice(args);
    let mut names = tree(&a);
    names.remove("kvpack");
    names
}

#[test]
fn default_features_have_only_the_core_dependencies() {
    let core: BTreeSet<String> = CORE.iter().map(|s| s.to_string()).collect();
    for args in [&[][..], &["--no-default-features"][..]] {
        let got = direct(args);
        assert_eq!(
            got, core,
            "kvpack's direct dependencies with {args:?}: a crate added to the core (or an optional one \
             enabled by default) must be justified and listed in tests/light_deps.rs's CORE"
        );
    }
}

#[test]
fn default_features_pull_no_cli_or_model_crates() {
    let all = tree(&["-e", "normal,build"]);
    let found: Vec<&str> = HEAVY.iter().copied().filter(|c| all.contains(*c)).collect();
    assert!(
        found.is_empty(),
        "an app depending on kvpack with default features would build {found:?} \
         (keep them behind the `model` / `cli` features); {} crates in all",
        all.len()
    );
    println!(
        "kvpack with default features: {} crates (normal + build, host target)",
        all.len()
    );
}

#[test]
fn the_check_sees_the_cli_crates_and_the_backends() {
    let cli = tree(&["-e", "normal,build", "--features", "cli"]);
    let missing: Vec<&str> = HEAVY
        .iter()
        .copied()
        .filter(|c| !cli.contains(*c))
        .collect();
    assert!(
        missing.is_empty(),
        "cargo tree --features cli does not list {missing:?}: update HEAVY"
    );
    let bare = tree(&["-e", "normal,build", "--no-default-features"]);
    for backend in ["ash", "glow"] {
        assert!(
            !bare.contains(backend),
            "{backend} built without any backend feature"
        );
    }
    if cfg!(target_os = "linux") {
        let default = tree(&["-e", "normal,build"]);
        for backend in ["ash", "glow"] {
            assert!(
                default.contains(backend),
                "the default features do not build {backend} on Linux"
            );
        }
    }
    println!(
        "kvpack crates: {} with --no-default-features, {} with --features cli",
        bare.len(),
        cli.len()
    );
}
