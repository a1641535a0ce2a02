//! VecInfer's transform (docs/contracts/vecinfer.md, "Transform"), in f32 with every product
//! and sum rounded, in this order:
//! - keys:    u_i = k_i / λ_i (i < D), zero-padded to P, butterflies, × c;
//! - queries: u_i = q_i · λ_i, zero-padded, butterflies, × c (so ⟨q̃, k̃⟩ = ⟨q, k⟩ in reals);
//! - values:  v zero-padded, butterflies, × c; back: butterflies, × c, the first D.
//!
//! Butterflies: the unnormalized Sylvester–Hadamard transform in natural order, log2(P) passes
//! `(a, b) → (a + b, a − b)` over strides 1, 2, … P/2, exactly turboquant.md's "Rotation" with
//! every sign +1; c = the f32 nearest to 1/√P (f64, rounded once). λ is `[H, D]` per layer.

use crate::error::{Error, Result};

/// The floor of λ (spec: λ_c = max(√(max_t |k_tc|), 1e-4)).
pub const LAMBDA_FLOOR: f32 = 1e-4;

/// P = the smallest power of two ≥ `dim` (`dim` ≥ 1).
pub fn padded_dim(dim: usize) -> Result<usize> {
    if dim == 0 {
        return Err(Error::Config("vecinfer needs a head dimension ≥ 1".into()));
    }
    dim.checked_next_power_of_two()
        .ok_or_else(|| Error::Config(format!("head dimension {dim} is too large")))
}

/// c = the f32 nearest to 1/√P.
pub fn inv_sqrt(p: usize) -> f32 {
    (1.0 / (p as f64).sqrt()) as f32
}

/// The unnormalized Walsh–Hadamard transform in place (`v.len()` a power of two).
pub fn butterflies(v: &mut [f32]) {
    debug_assert!(v.len().is_power_of_two());
    let p = v.len();
    let mut h = 1;
    while h < p {
        for i in (0..p).filter(|i| i & h == 0) {
            let (a, b) = (v[i], v[i + h]);
            v[i] = a + b;
            v[i + h] = a - b;
        }
        h *= 2;
    }
}

fn finish(out: &mut [f32]) {
    butterflies(out);
    let c = inv_sqrt(out.len());
    for x in out.iter_mut() {
        *x *= c;
    }
}

/// λ of one layer from its calibration keys `[T, heads, dim]` (f16-representable values):
/// `λ[h][c] = max(√(max_t |k[t][h][c]|), 1e-4)` (the square root correctly rounded in f32).
pub fn lambda_from_keys(keys: &[f32], heads: usize, dim: usize) -> Result<Vec<f32>> {
    let row = heads * dim;
    if row == 0 || !keys.len().is_multiple_of(row) || keys.is_empty() {
        return Err(Error::Shape {
            what: "calibration keys",
            message: format!(
                "length {} is not a positive multiple of heads·dim = {row}",
                keys.len()
            ),
        });
    }
    let mut m = vec![0.0f32; row];
    for tok in keys.chunks_exact(row) {
        for (mi, &x) in m.iter_mut().zip(tok) {
            if !x.is_finite() {
                return Err(Error::NonFinite {
                    what: "calibration keys",
                    index: 0,
                    value: x,
                });
            }
            *mi = mi.max(x.abs());
        }
    }
    Ok(m.into_iter().map(|x| x.sqrt().max(LAMBDA_FLOOR)).collect())
}

/// k̃ (P values into `out`) of one key `k` (D values) with its head's λ (D values).
pub fn transform_key(k: &[f32], lambda: &[f32], p: usize, out: &mut Vec<f32>) {
    out.clear();
    out.extend(k.iter().zip(lambda).map(|(x, l)| x / l));
    out.resize(p, 0.0);
    finish(out);
}

/// q̃ (P values into `out`) of one query `q` (D values) with its KV head's λ.
pub fn transform_query(q: &[f32], lambda: &[f32], p: usize, out: &mut Vec<f32>) {
    out.clear();
    out.extend(q.iter().zip(lambda).map(|(x, l)| x * l));
    out.resize(p, 0.0);
    finish(out);
}

/// ṽ (P values into `out`) of one value `v` (D values).
pub fn transform_value(v: &[f32], p: usize, out: &mut Vec<f32>) {
    out.clear();
    out.extend_from_slice(v);
    out.resize(p, 0.0);
    finish(out);
}

/// The inverse of [`transform_value`] in place on P values (H_P/√P is its own inverse up to
/// rounding); callers keep the first D.
pub fn inverse_value(x: &mut [f32]) {
    finish(x);
}

/// The inverse of [`transform_key`]: butterflies, × c, then × λ_i on the first D (`out`).
pub fn inverse_key(x: &[f32], lambda: &[f32], out: &mut [f32]) {
    let mut y = x.to_vec();
    finish(&mut y);
    for ((o, y), l) in out.iter_mut().zip(y).zip(lambda) {
        *o = y * l;
    }
}
