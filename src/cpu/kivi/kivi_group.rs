//! The arithmetic of one KIVI group (docs/contracts/kivi.md, "One group"), shared by the
//! key and value references. WGSL twin: `wgsl/kivi/kivi_common.wgsl`; MSL: `msl/kivi/kivi_common.metal`
//! inlined in each kernel.

use half::f16;

use crate::codecs::kivi::layout::ParamStorage;

/// `f32(1 / (2^b − 1))`: the spec's `INV_LEVELS`, computed once on the host and handed to
/// GPU kernels as bits so every backend multiplies by the same constant.
pub fn inv_levels(bits: u32) -> f32 {
    (1.0f64 / f64::from((1u32 << bits) - 1)) as f32
}

/// (scale, lo) in f32 from the group's min and max.
pub fn group_params(lo: f32, hi: f32, bits: u32) -> (f32, f32) {
    ((hi - lo) * inv_levels(bits), lo)
}

/// The code of `x`: `clamp(round_half_even((x − lo) / scale), 0, 2^b − 1)`, or 0 when the
/// scale is not finite-and-positive.
pub fn code(x: f32, scale: f32, lo: f32, bits: u32) -> u32 {
    if !(scale.is_finite() && scale > 0.0) {
        return 0;
    }
    let levels = ((1u32 << bits) - 1) as f32;
    ((x - lo) / scale).round_ties_even().clamp(0.0, levels) as u32
}

/// Reconstruction from the stored pair: `f32(q · scale_st) + lo_st`, two roundings (Rust
/// never contracts a multiply and an add into an FMA). A group whose f32 scale was not
/// finite-and-positive has q = 0 and reconstructs to `lo_st`.
pub fn reconstruct(q: u32, scale_st: f32, lo_st: f32) -> f32 {
    if q == 0 {
        return lo_st;
    }
    q as f32 * scale_st + lo_st
}

/// The stored form of a pair: `Some(words)` or `None` when f16 storage cannot hold it.
/// A zero `lo` is stored as +0 whatever its sign: min over ±0 depends on the reduction order,
/// which differs between backends, so the sign of a zero is canonicalized (in the integer
/// bits, where no fast-math compiler can drop it).
pub fn store_params(scale: f32, lo: f32, storage: ParamStorage) -> Option<[u32; 2]> {
    match storage {
        ParamStorage::F16 => {
            let (s, l) = (f16::from_f32(scale), f16::from_f32(lo));
            let lo_bits = if l.to_bits() & 0x7fff == 0 {
                0
            } else {
                l.to_bits()
            };
            (s.is_finite() && l.is_finite())
                .then(|| [u32::from(s.to_bits()) | (u32::from(lo_bits) << 16), 0])
        }
        ParamStorage::F32 => {
            let lo_bits = if lo.to_bits() & 0x7fff_ffff == 0 {
                0
            } else {
                lo.to_bits()
            };
            Some([scale.to_bits(), lo_bits])
        }
    }
}

/// The stored pair back as f32: `(scale_st, lo_st)` from `words` (one or two of them).
pub fn load_params(words: &[u32], storage: ParamStorage) -> (f32, f32) {
    match storage {
        ParamStorage::F16 => {
            let w = words[0];
            (
                f16::from_bits(w as u16).to_f32(),
                f16::from_bits((w >> 16) as u16).to_f32(),
            )
        }
        ParamStorage::F32 => (f32::from_bits(words[0]), f32::from_bits(words[1])),
    }
}

/// Min and max of a group.
pub fn min_max(xs: impl Iterator<Item = f32>) -> (f32, f32) {
    xs.fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    })
}

/// Writes `code` at stream position `i` (b bits, LSB-first) of `words`.
pub fn put_code(words: &mut [u32], i: usize, code: u32, bits: u32) {
    let start = i * bits as usize;
    let (w, off) = (start / 32, start % 32);
    words[w] |= code << off;
    if off + bits as usize > 32 {
        words[w + 1] |= code >> (32 - off);
    }
}

/// Reads the code at stream position `i` of `words`.
pub fn get_code(words: &[u32], i: usize, bits: u32) -> u32 {
    let start = i * bits as usize;
    let (w, off) = (start / 32, start % 32);
    let mut v = words[w] >> off;
    if off + bits as usize > 32 {
        v |= words[w + 1] << (32 - off);
    }
    v & ((1u32 << bits) - 1)
}
