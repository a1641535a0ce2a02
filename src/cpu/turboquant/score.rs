//! Attention on TurboQuant codes, CPU side (docs/contracts/turboquant.md, "Attention on
//! TurboQuant codes"; hooks in docs/contracts/attention.md). Keys are never rotated back:
//! the query is rotated once with its KV head's key signs and dotted with the centroids.
//! Values are accumulated in the rotated space and inverse-rotated once.
//!
//! Exact f32 orders (the GPU kernels follow them):
//! - MSE score: `n_st · Σ_i q′_i·ŷ_i` (sum in index order).
//! - Prod score: `n_st · (Σ_i q′_i·ŷ₁_i + ρ_st · (√(π/2)/m · t))` with
//!   `t = 2·Σ_{σ_i=1} (S q)_i − Σ_i (S q)_i` ([`crate::cpu::common::sketch::signed_sum`]).
//! - Value: `n_st · ŷ_i` per coordinate; the caller accumulates `Σ_j p_j·(n_j ŷ_j)`.

use half::f16;

use super::codebook::Codebook;
use super::rotation::{inverse_rotate, rotate};
use super::turboquant_dequant::{decode_row, decode_rvq_rows};
use crate::cpu::common::sketch::{scale, signed_sum};
use crate::cpu::common::vector::{check_len, dot, mat_vec};
use crate::error::{Error, Result};

fn finite(x: &[f32], what: &'static str) -> Result<()> {
    match x.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(Error::NonFinite {
            what,
            index,
            value: x[index],
        }),
        None => Ok(()),
    }
}

fn padded(q: &[f32], p: usize) -> Result<Vec<f32>> {
    finite(q, "TurboQuant query")?;
    if q.len() > p {
        return Err(Error::Shape {
            what: "TurboQuant query",
            message: format!("{} coordinates, more than P = {p}", q.len()),
        });
    }
    let mut v = vec![0.0f32; p];
    v[..q.len()].copy_from_slice(q);
    Ok(v)
}

/// `q′ = rotate(q)` for a query `q` of D ≤ P coordinates (not normalized: the rotation is
/// linear), zero-padded to P = `signs.len()`, with its KV head's key signs.
pub fn prepare_query(q: &[f32], signs: &[f32]) -> Result<Vec<f32>> {
    rotate(&padded(q, signs.len())?, signs)
}

/// `S·q` for Prod: q zero-padded to P and the layer's sketch S `[m][P]` (row sums in index
/// order).
pub fn prepare_sketch_query(q: &[f32], sketch: &[f32], m: usize) -> Result<Vec<f32>> {
    if m == 0 || !sketch.len().is_multiple_of(m) {
        return Err(Error::Shape {
            what: "TurboQuant-Prod sketch",
            message: format!("{} entries do not make {m} rows", sketch.len()),
        });
    }
    let v = padded(q, sketch.len() / m)?;
    mat_vec(sketch, m, v.len(), &v)
}

/// `n_st · ⟨q′, ŷ⟩` for one key's MSE code row (`q_rot` from [`prepare_query`]).
pub fn score_mse(q_rot: &[f32], row: &[u32], norm_st: f16, cb: &Codebook) -> Result<f32> {
    check_len("rotated query", cb.p, q_rot.len())?;
    Ok(norm_st.to_f32() * dot(q_rot, &decode_row(row, cb)?))
}

/// `n_st · ⟨q′, ŷ₁ + ê₂⟩` for one key's RVQ rows (stage 1, then stage 2).
pub fn score_rvq(
    q_rot: &[f32],
    rows: &[u32],
    norm_st: f16,
    cb1: &Codebook,
    cb2: &Codebook,
) -> Result<f32> {
    check_len("rotated query", cb1.p, q_rot.len())?;
    Ok(norm_st.to_f32() * dot(q_rot, &decode_rvq_rows(rows, cb1, cb2)?))
}

/// One key's stored Prod codes, as the score reads them.
#[derive(Clone, Copy, Debug)]
pub struct ProdKey<'a> {
    /// The stage-1 code row (b − 1 bits).
    pub row: &'a [u32],
    /// The sign row (m bits).
    pub signs: &'a [u32],
    /// n as stored.
    pub norm_st: f16,
    /// ρ as stored.
    pub residual_norm_st: f16,
}

/// The Prod estimate of ⟨q, x⟩: `n_st · (⟨q′, ŷ₁⟩ + ρ_st · (√(π/2)/m · ⟨S q, 2σ − 1⟩))`, with
/// `q_rot` from [`prepare_query`], `sq` (m entries) from [`prepare_sketch_query`] and `cb` the
/// stage-1 codebook (b − 1 bits).
pub fn prod_score(q_rot: &[f32], sq: &[f32], key: ProdKey<'_>, cb: &Codebook) -> Result<f32> {
    check_len("rotated query", cb.p, q_rot.len())?;
    check_len(
        "Prod sign row words",
        sq.len().div_ceil(32),
        key.signs.len(),
    )?;
    let mse = dot(q_rot, &decode_row(key.row, cb)?);
    let t = scale(sq.len()) * signed_sum(sq, key.signs)?;
    Ok(key.norm_st.to_f32() * (mse + key.residual_norm_st.to_f32() * t))
}

/// `n_st · ŷ` of one value's code row, in the rotated space (P coordinates).
pub fn value_rotated(row: &[u32], norm_st: f16, cb: &Codebook) -> Result<Vec<f32>> {
    let n = norm_st.to_f32();
    Ok(decode_row(row, cb)?.into_iter().map(|y| n * y).collect())
}

/// The attention output of a rotated accumulator `acc` (P coordinates, already normalized by
/// the softmax sum): inverse-rotate with the value signs (butterflies, × c, × s), keep `dim`.
pub fn finish(acc: &[f32], signs: &[f32], dim: usize) -> Result<Vec<f32>> {
    let mut v = inverse_rotate(acc, signs)?;
    if dim > v.len() {
        return Err(Error::Shape {
            what: "TurboQuant output",
            message: format!("D = {dim} > P = {}", v.len()),
        });
    }
    v.truncate(dim);
    Ok(v)
}
