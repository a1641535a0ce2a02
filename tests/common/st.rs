//! Safetensors inputs for the command-line tests: scratch folders, tensors as bytes, files.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use half::f16;
use rand::Rng;
use safetensors::tensor::{Dtype, TensorView};

/// A fresh scratch directory for one test (`prefix` keeps test files apart).
pub fn scratch(prefix: &str, test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kvpack-{prefix}-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create scratch dir");
    d
}

/// Tensors to write: name, dtype, shape, little-endian bytes.
pub type Named = (&'static str, Dtype, Vec<usize>, Vec<u8>);

/// f32 values as little-endian bytes.
pub fn f32_bytes(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// f32 values rounded to f16, as little-endian bytes.
pub fn f16_bytes(x: &[f32]) -> Vec<u8> {
    x.iter()
        .flat_map(|&v| f16::from_f32(v).to_le_bytes())
        .collect()
}

/// Writes `tensors` to a safetensors file.
pub fn write(path: &Path, tensors: &[Named]) {
    let views: Vec<_> = tensors
        .iter()
        .map(|(n, d, s, b)| (*n, TensorView::new(*d, s.clone(), b).expect("view")))
        .collect();
    safetensors::serialize_to_file(views, None, path).expect("write safetensors");
}

/// `n` uniform values in [-2, 2).
pub fn random(rng: &mut impl Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-2.0f32..2.0)).collect()
}
