//! CPU reference of the kernel `turboquant_dequant` (docs/contracts/turboquant.md,
//! "TurboQuant-MSE" reconstruction): `x̂ = n_st · inverse-rotate(ŷ)`, in this order with every
//! product rounded to f32: butterflies on ŷ, × c, × s_i (exact), × n_st; the first D
//! coordinates. Shapes in [`super::layout`]; outputs are `[n, H, D]` f32.

use half::f16;

use super::codebook::{Codebook, codebook, rvq_codebook};
use super::layout::{ProdLayout, TqLayout};
use super::rotation::{inverse_rotate, inverse_rotate_in_place};
use super::turboquant_quant::{MseCodes, ProdCodes, RvqCodes};
use crate::cpu::bitunpack::bitunpack;
use crate::cpu::common::sketch::{scale, transpose_signed};
use crate::cpu::common::vector::check_len;
use crate::error::{Error, Result};

/// ŷ of one row: the f32 centroids of its P codes. The row must be exactly
/// `packed_words(P, b)` words with zero padding bits.
pub fn decode_row(row: &[u32], cb: &Codebook) -> Result<Vec<f32>> {
    let mut codes = vec![0u8; cb.p];
    bitunpack(row, cb.bits, &mut codes)?;
    Ok(codes.iter().map(|&c| cb.centroid(u32::from(c))).collect())
}

/// ŷ = ŷ₁ + ê₂ (f32) of an RVQ pair of rows (stage 1 then stage 2, each `row_words` long).
pub fn decode_rvq_rows(rows: &[u32], cb1: &Codebook, cb2: &Codebook) -> Result<Vec<f32>> {
    if !rows.len().is_multiple_of(2) {
        return Err(Error::Shape {
            what: "TurboQuant-RVQ code rows",
            message: format!("{} words do not split into two rows", rows.len()),
        });
    }
    let (r1, r2) = rows.split_at(rows.len() / 2);
    let (y1, e2) = (decode_row(r1, cb1)?, decode_row(r2, cb2)?);
    Ok(y1.iter().zip(&e2).map(|(&a, &b)| a + b).collect())
}

/// `n_st · inverse-rotate(ŷ)` in the spec's order, truncated to the first `dim` ≤ P
/// coordinates (`y_hat` and `signs` P long).
pub fn reconstruct(y_hat: &[f32], signs: &[f32], norm_st: f16, dim: usize) -> Result<Vec<f32>> {
    let mut v = inverse_rotate(y_hat, signs)?;
    if dim > v.len() {
        return Err(Error::Shape {
            what: "TurboQuant reconstruction",
            message: format!("D = {dim} > P = {}", v.len()),
        });
    }
    let n = norm_st.to_f32();
    v.truncate(dim);
    v.iter_mut().for_each(|x| *x *= n);
    Ok(v)
}

/// Checks stored norms `[n][H]` (finite) and returns n.
fn count(l: &TqLayout, norms: &[f16], what: &'static str) -> Result<usize> {
    if !norms.len().is_multiple_of(l.heads) {
        return Err(Error::Shape {
            what,
            message: format!("{} norms for {} heads", norms.len(), l.heads),
        });
    }
    if let Some(i) = norms.iter().position(|v| !v.is_finite()) {
        return Err(Error::NonFinite {
            what,
            index: i,
            value: norms[i].to_f32(),
        });
    }
    Ok(norms.len() / l.heads)
}

/// Reconstructs every vector i (flat index over `[n][H]`) from its `y_hat(i)`, collecting
/// the `[n, H, D]` output.
fn collect(
    l: &TqLayout,
    signs: &[f32],
    n: usize,
    mut y_hat: impl FnMut(usize) -> Result<Vec<f32>>,
    norms: &[f16],
) -> Result<Vec<f32>> {
    check_len("TurboQuant signs [H][P]", l.signs_len(), signs.len())?;
    let mut out = Vec::with_capacity(n * l.heads * l.dim);
    for (i, &norm_st) in norms.iter().enumerate().take(n * l.heads) {
        let h = i % l.heads;
        let s = &signs[h * l.padded..(h + 1) * l.padded];
        out.extend(reconstruct(&y_hat(i)?, s, norm_st, l.dim)?);
    }
    Ok(out)
}

/// Reconstructs `[n, H, D]` from MSE codes (shapes in [`super::layout`]).
pub fn dequantize_mse(l: &TqLayout, signs: &[f32], c: &MseCodes) -> Result<Vec<f32>> {
    let n = count(l, &c.norms, "TurboQuant norms")?;
    let w = l.row_words();
    check_len("TurboQuant codes", n * l.heads * w, c.codes.len())?;
    let cb = codebook(l.padded, l.bits)?;
    collect(
        l,
        signs,
        n,
        |i| decode_row(&c.codes[i * w..(i + 1) * w], &cb),
        &c.norms,
    )
}

/// Reconstructs `[n, H, D]` from RVQ codes: ŷ = ŷ₁ + ê₂, then as MSE.
pub fn dequantize_rvq(l: &TqLayout, signs: &[f32], c: &RvqCodes) -> Result<Vec<f32>> {
    let n = count(l, &c.norms, "TurboQuant-RVQ norms")?;
    let w = 2 * l.row_words();
    check_len("TurboQuant-RVQ codes", n * l.heads * w, c.codes.len())?;
    let (cb1, cb2) = (codebook(l.padded, l.bits)?, rvq_codebook(l.padded, l.bits)?);
    collect(
        l,
        signs,
        n,
        |i| decode_rvq_rows(&c.codes[i * w..(i + 1) * w], &cb1, &cb2),
        &c.norms,
    )
}

/// What [`dequantize_prod`] reconstructs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProdReconstruction {
    /// The MSE stage only: `n_st · û₁`, exactly as [`dequantize_mse`] at b − 1 bits. The
    /// lowest squared error; inner products with it are biased (shrunk).
    MseStage,
    /// `n_st · (û₁ + ρ_st · (√(π/2)/m · Sᵀ(2σ − 1)))`, per coordinate in this order, with
    /// `Sᵀ(2σ − 1)` summed in index order over the m sketch rows. Its inner product with any
    /// q is the Prod estimator (up to rounding), so it is unbiased over draws of S, but its
    /// squared error is large (the sketch's noise is spread over all P coordinates).
    Unbiased,
}

/// Reconstructs `[n, H, D]` from Prod codes, with `sketch` S `[m][P]` for
/// [`ProdReconstruction::Unbiased`] (its length is checked in both modes).
pub fn dequantize_prod(
    l: &ProdLayout,
    signs: &[f32],
    sketch: &[f32],
    c: &ProdCodes,
    how: ProdReconstruction,
) -> Result<Vec<f32>> {
    let s1 = &l.stage1;
    check_len(
        "TurboQuant-Prod sketch [m][P]",
        l.sketch_len(),
        sketch.len(),
    )?;
    let n = count(s1, &c.norms, "TurboQuant-Prod norms")?;
    count(s1, &c.residual_norms, "TurboQuant-Prod residual norms")?;
    let (w, sw) = (s1.row_words(), l.sign_words());
    check_len("TurboQuant-Prod codes", n * s1.heads * w, c.codes.len())?;
    check_len(
        "TurboQuant-Prod residual norms",
        n * s1.heads,
        c.residual_norms.len(),
    )?;
    check_len(
        "TurboQuant-Prod sign rows",
        n * s1.heads * sw,
        c.signs.len(),
    )?;
    let cb = codebook(s1.padded, s1.bits)?;
    if how == ProdReconstruction::MseStage {
        return collect(
            s1,
            signs,
            n,
            |i| decode_row(&c.codes[i * w..(i + 1) * w], &cb),
            &c.norms,
        );
    }
    check_len("TurboQuant signs [H][P]", s1.signs_len(), signs.len())?;
    let k = scale(l.m);
    let mut out = Vec::with_capacity(n * s1.heads * s1.dim);
    for i in 0..n * s1.heads {
        let h = i % s1.heads;
        let s = &signs[h * s1.padded..(h + 1) * s1.padded];
        let mut u = decode_row(&c.codes[i * w..(i + 1) * w], &cb)?;
        inverse_rotate_in_place(&mut u, s);
        let t = transpose_signed(sketch, s1.padded, &c.signs[i * sw..(i + 1) * sw])?;
        let (rho, nrm) = (c.residual_norms[i].to_f32(), c.norms[i].to_f32());
        out.extend(
            u.iter()
                .zip(&t)
                .take(s1.dim)
                .map(|(&u, &t)| (u + rho * (k * t)) * nrm),
        );
    }
    Ok(out)
}
