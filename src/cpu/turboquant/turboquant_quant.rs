//! CPU reference of the kernel `turboquant_quant` (wgsl/turboquant/, msl/turboquant/;
//! docs/contracts/turboquant.md, "TurboQuant-MSE", "TurboQuant-RVQ", "TurboQuant-Prod"). One
//! "invocation" owns one (token, head) vector ([`quantize_vector`]: what the codec's CPU path
//! and the kernels do per vector); shapes in [`super::layout`].
//!
//! Per vector x (D values, rounded to f16 on entry): n = ‖x‖₂ in f32 (sum of squares in index
//! order, correctly rounded square root), stored as f16; u = x / n (x itself when n = 0),
//! zero-padded to P; y = rotate(u) ([`super::rotation`]); code_i = the number of boundaries
//! strictly below y_i ([`super::codebook::code`]), packed as one row of P codes.

use half::f16;

use super::codebook::{Codebook, codebook, rvq_codebook};
use super::layout::TqLayout;
use super::rotation::rotate;
use crate::cpu::bitpack::{bitpack, packed_words};
use crate::cpu::common::vector::{batch_len, check_len, f16_input, norm, store_norm};
use crate::error::{Error, Result};

/// What the input is called in errors.
const INPUT: &str = "TurboQuant input";

/// MSE codes of a batch of n vectors.
#[derive(Clone, Debug, PartialEq)]
pub struct MseCodes {
    /// `[n][H][row_words]`.
    pub codes: Vec<u32>,
    /// `[n][H]`.
    pub norms: Vec<f16>,
}

/// RVQ codes of a batch of n vectors.
#[derive(Clone, Debug, PartialEq)]
pub struct RvqCodes {
    /// `[n][H][2][row_words]`: the stage-1 row, then the stage-2 row.
    pub codes: Vec<u32>,
    /// `[n][H]`.
    pub norms: Vec<f16>,
}

/// Prod codes of a batch of n keys.
#[derive(Clone, Debug, PartialEq)]
pub struct ProdCodes {
    /// Stage-1 MSE codes at b − 1 bits, `[n][H][row_words(b − 1)]`.
    pub codes: Vec<u32>,
    /// `[n][H]`.
    pub norms: Vec<f16>,
    /// ρ = ‖u − û₁‖₂ (P dimensions), `[n][H]`.
    pub residual_norms: Vec<f16>,
    /// σ_i = [(S r)_i ≥ 0] LSB-first, `[n][H][m/32]`.
    pub signs: Vec<u32>,
}

/// One vector normalized and rotated.
#[derive(Clone, Debug, PartialEq)]
pub struct Rotated {
    /// n = ‖x‖₂ in f32.
    pub norm: f32,
    /// n as stored.
    pub norm_st: f16,
    /// u = x / n (x when n = 0), zero-padded to P.
    pub unit: Vec<f32>,
    /// y = rotate(u).
    pub y: Vec<f32>,
}

/// Normalizes and rotates one vector `x` (D ≤ P f16-valued coordinates) with the P ±1
/// `signs` of its head; `token` and `head` name it in the error for a norm beyond f16.
pub fn normalize_rotate(x: &[f32], signs: &[f32], token: usize, head: usize) -> Result<Rotated> {
    if x.len() > signs.len() {
        return Err(Error::Shape {
            what: INPUT,
            message: format!("{} coordinates, more than P = {}", x.len(), signs.len()),
        });
    }
    let n = norm(x);
    let norm_st = store_norm(n, INPUT, token, head)?;
    let mut unit = vec![0.0f32; signs.len()];
    for (u, &xi) in unit.iter_mut().zip(x) {
        *u = if n == 0.0 { xi } else { xi / n };
    }
    let y = rotate(&unit, signs)?;
    Ok(Rotated {
        norm: n,
        norm_st,
        unit,
        y,
    })
}

/// The codes of a rotated vector under `cb`.
pub fn codes_of(y: &[f32], cb: &Codebook) -> Vec<u8> {
    y.iter().map(|&v| cb.code(v) as u8).collect()
}

/// One packed row of codes (whole words, unused bits zero).
pub fn pack_row(codes: &[u8], bits: u32) -> Result<Vec<u32>> {
    let mut words = vec![0u32; packed_words(codes.len(), bits)?];
    bitpack(codes, bits, &mut words)?;
    Ok(words)
}

/// The checked input: f16-rounded values and n.
pub(crate) fn checked_input(l: &TqLayout, signs: &[f32], x: &[f32]) -> Result<(Vec<f32>, usize)> {
    check_len("TurboQuant signs [H][P]", l.signs_len(), signs.len())?;
    let n = batch_len(x.len(), l.heads, l.dim, INPUT)?;
    Ok((f16_input(x, INPUT)?, n))
}

/// Calls `each(t, h, x_row, signs_row)` for every (token, head) in order.
pub(crate) fn for_each_vector(
    l: &TqLayout,
    x: &[f32],
    signs: &[f32],
    mut each: impl FnMut(usize, usize, &[f32], &[f32]) -> Result<()>,
) -> Result<()> {
    for (i, row) in x.chunks_exact(l.dim).enumerate() {
        let (t, h) = (i / l.heads, i % l.heads);
        each(t, h, row, &signs[h * l.padded..(h + 1) * l.padded])?;
    }
    Ok(())
}

/// One vector's work, as the kernel does it: `x` (D ≤ P f16-valued coordinates) normalized
/// and rotated with its head's P ±1 `signs`, then coded by `stages` (one codebook: MSE; two:
/// RVQ, the second coding `e_i = y_i − ŷ₁_i` in f32); the S packed rows (each
/// `packed_words(P, b)` words) are appended to `rows`. Returns the stored norm; a norm beyond
/// f16 is [`crate::Error::Config`] naming `token` and `head`.
pub fn quantize_vector(
    x: &[f32],
    signs: &[f32],
    stages: &[&Codebook],
    token: usize,
    head: usize,
    rows: &mut Vec<u32>,
) -> Result<f16> {
    let r = normalize_rotate(x, signs, token, head)?;
    let mut y = r.y;
    for (s, cb) in stages.iter().enumerate() {
        let codes = codes_of(&y, cb);
        rows.extend(pack_row(&codes, cb.bits)?);
        if s + 1 < stages.len() {
            for (v, &c) in y.iter_mut().zip(&codes) {
                *v -= cb.centroid(u32::from(c));
            }
        }
    }
    Ok(r.norm_st)
}

/// TurboQuant-MSE: `x` is `[n, H, D]` (rounded to f16 on entry), `signs` `[H][P]`.
/// Errors: NaN, ±Inf or beyond-f16 input ([`crate::Error::NonFinite`]), a norm beyond f16
/// ([`crate::Error::Config`] naming token and head), bad lengths.
pub fn quantize_mse(l: &TqLayout, signs: &[f32], x: &[f32]) -> Result<MseCodes> {
    let (x, n) = checked_input(l, signs, x)?;
    let cb = codebook(l.padded, l.bits)?;
    let mut out = MseCodes {
        codes: Vec::with_capacity(n * l.heads * l.row_words()),
        norms: Vec::with_capacity(n * l.heads),
    };
    for_each_vector(l, &x, signs, |t, h, row, s| {
        out.norms
            .push(quantize_vector(row, s, &[&cb], t, h, &mut out.codes)?);
        Ok(())
    })?;
    Ok(out)
}

/// TurboQuant-RVQ with b bits per stage: stage-1 codes of y, then the codes of
/// e_i = y_i − ŷ₁_i (f32) under [`rvq_codebook`]. Same input and errors as [`quantize_mse`].
pub fn quantize_rvq(l: &TqLayout, signs: &[f32], x: &[f32]) -> Result<RvqCodes> {
    let (x, n) = checked_input(l, signs, x)?;
    let (cb1, cb2) = (codebook(l.padded, l.bits)?, rvq_codebook(l.padded, l.bits)?);
    let mut out = RvqCodes {
        codes: Vec::with_capacity(n * l.heads * 2 * l.row_words()),
        norms: Vec::with_capacity(n * l.heads),
    };
    for_each_vector(l, &x, signs, |t, h, row, s| {
        out.norms.push(quantize_vector(
            row,
            s,
            &[&cb1, &cb2],
            t,
            h,
            &mut out.codes,
        )?);
        Ok(())
    })?;
    Ok(out)
}

pub use super::turboquant_prod_quant::{quantize_prod, quantize_prod_vector};
