//! KIVI's contract written out in the test (../shared/spec/kivi.md), independent of
//! `src/cpu/kivi`: group parameters, their stored words, code extraction, reconstruction and
//! the per-element bounds [`super::recon::check_recon`] checks.

use super::recon::{Elem, ulp};
use half::f16;
use kvpack::ParamStorage;
use kvpack::codecs::kivi::{Layout, RawKivi};

/// spec "One group": (scale, lo) in f32 of the values `xs`.
pub fn group(xs: impl Iterator<Item = f32> + Clone, bits: u32) -> (f32, f32) {
    let lo = xs.clone().fold(f32::INFINITY, f32::min);
    let hi = xs.fold(f32::NEG_INFINITY, f32::max);
    let inv_levels = (1.0f64 / f64::from((1u32 << bits) - 1)) as f32;
    ((hi - lo) * inv_levels, lo)
}

/// spec "Storage": the stored words of a pair (f16: scale in the low half, lo in the high
/// half; f32: scale then lo), a zero lo stored as +0.
pub fn stored_words(scale: f32, lo: f32, p: ParamStorage) -> Vec<u32> {
    match p {
        ParamStorage::F16 => {
            let s = u32::from(f16::from_f32(scale).to_bits());
            let mut l = u32::from(f16::from_f32(lo).to_bits());
            if l & 0x7fff == 0 {
                l = 0;
            }
            vec![s | (l << 16)]
        }
        ParamStorage::F32 => {
            let l = if lo == 0.0 { 0 } else { lo.to_bits() };
            vec![scale.to_bits(), l]
        }
        other => panic!("the spec reference has no storage {other:?}"),
    }
}

/// The stored pair as f32.
pub fn load(words: &[u32], p: ParamStorage) -> (f32, f32) {
    match p {
        ParamStorage::F16 => (
            f16::from_bits(words[0] as u16).to_f32(),
            f16::from_bits((words[0] >> 16) as u16).to_f32(),
        ),
        ParamStorage::F32 => (f32::from_bits(words[0]), f32::from_bits(words[1])),
        other => panic!("the spec reference has no storage {other:?}"),
    }
}

/// ../shared/spec/bitpack.md read bit by bit: code i of a b-bit stream.
pub fn code(words: &[u32], i: usize, b: u32) -> u32 {
    (0..b as usize)
        .map(|k| {
            let bit = i * b as usize + k;
            ((words[bit / 32] >> (bit % 32)) & 1) << k
        })
        .sum()
}

/// One element: input `x`, its own code `q`, stored pair, and the f32 pair the spec computes.
fn elem(x: f32, q: u32, st: (f32, f32), spec: (f32, f32)) -> Elem {
    let (scale_st, lo_st) = st;
    let (scale, lo) = spec;
    let want = if q == 0 {
        lo_st
    } else {
        q as f32 * scale_st + lo_st
    };
    let prod = q as f32 * scale_st;
    // The code is the nearest level to x at the f32 (scale, lo): |q·scale + lo − x| ≤ scale/2
    // (the f32 division and subtraction add a few ulps of |x − lo|); storing the pair moves
    // that by q·|scale_st − scale| + |lo_st − lo|; the two roundings of the reconstruction add
    // ulp(q·scale_st)/2 + ulp(x̂)/2.
    let bound = scale * 0.5
        + q as f32 * (scale_st - scale).abs()
        + (lo_st - lo).abs()
        + 4.0 * ulp((x - lo).abs())
        + ulp(prod) / 2.0
        + ulp(want);
    Elem {
        x,
        want,
        fma: ulp(prod) / 2.0 + ulp(want),
        bound: bound * (1.0 + 1e-6),
    }
}

/// Every quantized element of K and V (`[Q][H][D]` each) from the stored words of `raw`,
/// with `k`, `v` the inputs `[T][H][D]` (f16-rounded, as f32).
pub fn elems(l: &Layout, raw: &RawKivi, k: &[f32], v: &[f32]) -> (Vec<Elem>, Vec<Elem>) {
    let row = l.heads * l.dim;
    let pw = l.params.words();
    let (gk, kgw) = (l.key_group, l.key_group_words());
    let qk = raw.key_codes.len() / kgw.max(1) / row * gk;
    let mut ke = Vec::with_capacity(qk * row);
    for t in 0..qk {
        let b = t / gk;
        for e in 0..row {
            let gi = b * row + e;
            let spec = group((b * gk..(b + 1) * gk).map(|s| k[s * row + e]), l.key_bits);
            let st = load(&raw.key_params[gi * pw..], l.params);
            let q = code(&raw.key_codes[gi * kgw..], t % gk, l.key_bits);
            ke.push(elem(k[t * row + e], q, st, spec));
        }
    }
    let (gv, vgw, ng, rw) = (
        l.value_group,
        l.value_group_words(),
        l.value_groups(),
        l.value_row_words(),
    );
    let qv = raw.value_codes.len() / rw.max(1) / l.heads;
    let mut ve = Vec::with_capacity(qv * row);
    for t in 0..qv {
        for h in 0..l.heads {
            for d in 0..l.dim {
                let j = d / gv;
                let (c0, c1) = (j * gv, ((j + 1) * gv).min(l.dim));
                let spec = group((c0..c1).map(|c| v[t * row + h * l.dim + c]), l.value_bits);
                let st = load(
                    &raw.value_params[((t * l.heads + h) * ng + j) * pw..],
                    l.params,
                );
                let base = (t * l.heads + h) * rw + j * vgw;
                let q = code(&raw.value_codes[base..], d - c0, l.value_bits);
                ve.push(elem(v[t * row + h * l.dim + d], q, st, spec));
            }
        }
    }
    (ke, ve)
}

/// spec "Storage": every stored (scale, lo) word equals the pair recomputed here from the
/// input (bit for bit: the spec makes lo and scale exact on every backend).
pub fn check_param_words(what: &str, l: &Layout, raw: &RawKivi, k: &[f32], v: &[f32]) {
    let row = l.heads * l.dim;
    let pw = l.params.words();
    let gk = l.key_group;
    let blocks = raw.key_params.len() / pw / row.max(1);
    for b in 0..blocks {
        for e in 0..row {
            let (s, lo) = group((b * gk..(b + 1) * gk).map(|t| k[t * row + e]), l.key_bits);
            let i = (b * row + e) * pw;
            assert_eq!(
                raw.key_params[i..i + pw],
                stored_words(s, lo, l.params)[..],
                "{what}: key params of block {b} element {e} are not the spec's (scale {s}, lo {lo})"
            );
        }
    }
    let ng = l.value_groups();
    let qv = raw.value_params.len() / pw / (l.heads * ng).max(1);
    for t in 0..qv {
        for h in 0..l.heads {
            for j in 0..ng {
                let (c0, c1) = (j * l.value_group, ((j + 1) * l.value_group).min(l.dim));
                let (s, lo) = group((c0..c1).map(|c| v[t * row + h * l.dim + c]), l.value_bits);
                let i = ((t * l.heads + h) * ng + j) * pw;
                assert_eq!(
                    raw.value_params[i..i + pw],
                    stored_words(s, lo, l.params)[..],
                    "{what}: value params of token {t} head {h} group {j} are not the spec's (scale {s}, lo {lo})"
                );
            }
        }
    }
}
