//! Running the `kvpack` binary from the command-line tests (only those tests include this
//! module: the binary exists with the `cli` feature).
#![allow(dead_code)]

use std::process::{Command, Output};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_kvpack");

/// Runs `kvpack args...`.
pub fn kvpack(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run kvpack")
}

/// Runs a `kvpack` command that must fail with a message on stderr and no panic; returns stderr.
pub fn failing(args: &[&str]) -> String {
    let out = kvpack(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "kvpack {args:?} should fail; stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        !stderr.trim().is_empty(),
        "kvpack {args:?} failed without a message on stderr"
    );
    assert!(
        !stderr.contains("panicked"),
        "kvpack {args:?} panicked: {stderr}"
    );
    stderr
}
