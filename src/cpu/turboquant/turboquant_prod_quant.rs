//! CPU reference of the kernel `turboquant_prod_quant` (wgsl/turboquant/turboquant_prod_*.wgsl,
//! msl/turboquant/turboquant_prod_quant.metal; docs/contracts/turboquant.md "TurboQuant-Prod"):
//! per key, TurboQuant-MSE at b − 1 bits ([`super::turboquant_quant`]), û₁ = inverse-rotate(ŷ₁),
//! r = u − û₁ (P values), ρ = ‖r‖₂ and the m sign bits of S·r. Shapes in [`super::layout`].

use half::f16;

use super::codebook::{Codebook, codebook};
use super::layout::ProdLayout;
use super::rotation::inverse_rotate_in_place;
use super::turboquant_quant::{
    ProdCodes, checked_input, codes_of, for_each_vector, normalize_rotate, pack_row,
};
use crate::cpu::common::sketch::sign_row;
use crate::cpu::common::vector::{check_len, mat_vec, norm, store_norm};
use crate::error::Result;

/// TurboQuant-Prod (keys): stage 1 is MSE at b − 1 bits, û₁ = inverse-rotate(ŷ₁) (a P-vector,
/// no norm), r = u − û₁ in P dimensions, ρ = ‖r‖₂ (f32, stored f16), σ_i = [(S r)_i ≥ 0] with
/// `sketch` S `[m][P]` (stream 2 of the layer, head 0). Same input and errors as
/// [`quantize_mse`](super::turboquant_quant::quantize_mse), plus the sketch's length.
pub fn quantize_prod(
    l: &ProdLayout,
    signs: &[f32],
    sketch: &[f32],
    x: &[f32],
) -> Result<ProdCodes> {
    let s1 = &l.stage1;
    check_len(
        "TurboQuant-Prod sketch [m][P]",
        l.sketch_len(),
        sketch.len(),
    )?;
    let (x, n) = checked_input(s1, signs, x)?;
    let cb = codebook(s1.padded, s1.bits)?;
    let mut out = ProdCodes {
        codes: Vec::with_capacity(n * s1.heads * s1.row_words()),
        norms: Vec::with_capacity(n * s1.heads),
        residual_norms: Vec::with_capacity(n * s1.heads),
        signs: Vec::with_capacity(n * s1.heads * l.sign_words()),
    };
    for_each_vector(s1, &x, signs, |t, h, row, s| {
        let (n, rho) =
            quantize_prod_vector(l, row, s, sketch, &cb, t, h, &mut out.codes, &mut out.signs)?;
        out.norms.push(n);
        out.residual_norms.push(rho);
        Ok(())
    })?;
    Ok(out)
}

/// One key's Prod work, as the codec does it per vector: `x` (D ≤ P f16-valued
/// coordinates) normalized and rotated with its head's P ±1 `signs`, stage-1 codes under
/// `cb` (b − 1 bits) appended to `rows` (one packed row), û₁ = inverse-rotate(ŷ₁),
/// r = u − û₁ (P values), ρ = ‖r‖₂, and the m/32 sign words of `S r` (`sketch` `[m][P]`)
/// appended to `sign_rows`. Returns (n, ρ) as stored; a norm beyond f16 is
/// [`crate::Error::Config`] naming `token` and `head`.
#[allow(clippy::too_many_arguments)]
pub fn quantize_prod_vector(
    l: &ProdLayout,
    x: &[f32],
    signs: &[f32],
    sketch: &[f32],
    cb: &Codebook,
    token: usize,
    head: usize,
    rows: &mut Vec<u32>,
    sign_rows: &mut Vec<u32>,
) -> Result<(f16, f16)> {
    let r = normalize_rotate(x, signs, token, head)?;
    let codes = codes_of(&r.y, cb);
    let mut u1: Vec<f32> = codes.iter().map(|&c| cb.centroid(u32::from(c))).collect();
    inverse_rotate_in_place(&mut u1, signs);
    let res: Vec<f32> = r.unit.iter().zip(&u1).map(|(&u, &v)| u - v).collect();
    let rho = store_norm(norm(&res), "TurboQuant-Prod residual of", token, head)?;
    rows.extend(pack_row(&codes, cb.bits)?);
    sign_rows.extend(sign_row(&mat_vec(sketch, l.m, l.stage1.padded, &res)?));
    Ok((r.norm_st, rho))
}
