//! The QJL score (docs/contracts/qjl.md, "Estimator"): ⟨q, k⟩ ≈ √(π/2)/m · n · ⟨S q, 2σ − 1⟩,
//! with S q computed once per query. Exact f32 order:
//! `n_st · (√(π/2)/m · (2·Σ_{σ_i=1} (S q)_i − Σ_i (S q)_i))`, sums in index order, the
//! constant computed in f64 and rounded once.

use half::f16;

use super::QjlLayout;
use crate::cpu::common::sketch::{scale, signed_sum};
use crate::cpu::common::vector::{check_len, mat_vec};
use crate::error::{Error, Result};

/// `S q` (m entries, each summed in index order) for a query of D coordinates.
pub fn prepare_query(l: &QjlLayout, sketch: &[f32], q: &[f32]) -> Result<Vec<f32>> {
    check_len("QJL sketch [m][D]", l.sketch_len(), sketch.len())?;
    check_len("QJL query", l.dim, q.len())?;
    if let Some(index) = q.iter().position(|v| !v.is_finite()) {
        return Err(Error::NonFinite {
            what: "QJL query",
            index,
            value: q[index],
        });
    }
    mat_vec(sketch, l.m, l.dim, q)
}

/// The estimate of ⟨q, k⟩ from `sq` ([`prepare_query`]), one key's sign row (m/32 words) and
/// its stored norm.
pub fn qjl_score(sq: &[f32], row: &[u32], norm_st: f16) -> Result<f32> {
    check_len("QJL sign row words", sq.len().div_ceil(32), row.len())?;
    Ok(norm_st.to_f32() * (scale(sq.len()) * signed_sum(sq, row)?))
}
