//! ggml's k-quants that Q4_K_M checkpoints ship in, dequantized to f32: **Q4_K** and **Q6_K**.
//!
//! Both work on super-blocks of [`QK_K`] = 256 values (a row's length must be a multiple of
//! 256), split into sub-blocks that each have a quantized scale under one f16 super-scale. The
//! layouts (little-endian, no padding) are ggml's `block_q4_K` and `block_q6_K`:
//!
//! **Q4_K**, 144 bytes per 256 values, 4.5 bits per value:
//!
//! | bytes    | field        | meaning                                                     |
//! |----------|--------------|-------------------------------------------------------------|
//! | 0..2     | `d`          | f16 super-scale of the sub-block scales                     |
//! | 2..4     | `dmin`       | f16 super-scale of the sub-block minimums                   |
//! | 4..16    | `scales[12]` | eight 6-bit scales `sc[j]` and eight 6-bit minimums `m[j]`  |
//! | 16..144  | `qs[128]`    | 256 4-bit codes, two per byte                               |
//!
//! Sub-block `j` (0..8) holds values `32j .. 32j + 32`; value `x = d·sc[j]·q − dmin·m[j]` with
//! `q` in 0..=15. The 6-bit pairs are packed into `scales` as
//! - `j < 4`: `sc[j] = scales[j] & 63`, `m[j] = scales[j + 4] & 63`;
//! - `j ≥ 4`: `sc[j] = (scales[j + 4] & 15) | (scales[j − 4] >> 6) << 4`,
//!   `m[j] = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4`
//!
//! (the low four bits of the upper four pairs sit in `scales[8..12]`, their top two bits in the
//! spare top bits of `scales[0..8]`). The codes come in four 32-byte chunks: chunk `c` (bytes
//! `qs[32c .. 32c + 32]`) holds sub-block `2c` in its low nibbles and sub-block `2c + 1` in its
//! high nibbles, so value `64c + l` is `qs[32c + l] & 15` and value `64c + 32 + l` is
//! `qs[32c + l] >> 4`, for `l` in 0..32.
//!
//! **Q6_K**, 210 bytes per 256 values, 6.5625 bits per value:
//!
//! | bytes    | field        | meaning                                              |
//! |----------|--------------|------------------------------------------------------|
//! | 0..128   | `ql[128]`    | the low four bits of the 256 codes                   |
//! | 128..192 | `qh[64]`     | the high two bits of the 256 codes                   |
//! | 192..208 | `scales[16]` | sixteen signed 8-bit scales, one per 16 values       |
//! | 208..210 | `d`          | f16 super-scale                                      |
//!
//! Value `i` is `x = d·scales[i / 16]·(q − 32)` with the 6-bit code `q` in 0..=63. The codes
//! come in two halves of 128 values; half `h` uses `ql[64h .. 64h + 64]` and
//! `qh[32h .. 32h + 32]`. Within a half, for `l` in 0..32, with `a = ql[64h + l]`,
//! `b = ql[64h + 32 + l]` and `c = qh[32h + l]`, the four values
//! `128h + l`, `128h + 32 + l`, `128h + 64 + l`, `128h + 96 + l` have codes
//! `(a & 15) | (c & 3) << 4`, `(b & 15) | (c >> 2 & 3) << 4`, `(a >> 4) | (c >> 4 & 3) << 4`
//! and `(b >> 4) | (c >> 6 & 3) << 4`.
//!
//! These are facts of the format (ggml's `ggml-common.h` and `ggml-quants.c` define the structs
//! and the reference dequantization); the code here is kvpack's own, and
//! `tests/model_qwen.rs` checks it on blocks whose values were derived independently.

use half::f16;

/// Values per k-quant super-block.
pub const QK_K: usize = 256;
/// Bytes per Q4_K block.
pub const Q4_K_BYTES: usize = 144;
/// Bytes per Q6_K block.
pub const Q6_K_BYTES: usize = 210;

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// Sub-block `j`'s 6-bit (scale, minimum) from Q4_K's 12 packed bytes.
fn q4k_scale_min(scales: &[u8; 12], j: usize) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        (
            (scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4),
            (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4),
        )
    }
}

/// Appends the 256 values of one Q4_K block (exactly [`Q4_K_BYTES`] bytes) to `out`.
pub fn dequantize_q4_k_block(block: &[u8; Q4_K_BYTES], out: &mut Vec<f32>) {
    let d = f16_at(block, 0);
    let dmin = f16_at(block, 2);
    let mut scales = [0u8; 12];
    scales.copy_from_slice(&block[4..16]);
    let qs = &block[16..144];
    for (c, chunk) in qs.chunks_exact(32).enumerate() {
        let (sc_lo, m_lo) = q4k_scale_min(&scales, 2 * c);
        let (sc_hi, m_hi) = q4k_scale_min(&scales, 2 * c + 1);
        let (d_lo, min_lo) = (d * f32::from(sc_lo), dmin * f32::from(m_lo));
        let (d_hi, min_hi) = (d * f32::from(sc_hi), dmin * f32::from(m_hi));
        out.extend(chunk.iter().map(|&q| d_lo * f32::from(q & 15) - min_lo));
        out.extend(chunk.iter().map(|&q| d_hi * f32::from(q >> 4) - min_hi));
    }
}

/// Appends the 256 values of one Q6_K block (exactly [`Q6_K_BYTES`] bytes) to `out`.
pub fn dequantize_q6_k_block(block: &[u8; Q6_K_BYTES], out: &mut Vec<f32>) {
    let (ql, rest) = block.split_at(128);
    let (qh, rest) = rest.split_at(64);
    let (scales, d) = rest.split_at(16);
    let d = f16_at(d, 0);
    let start = out.len();
    out.resize(start + QK_K, 0.0);
    let y = &mut out[start..];
    for h in 0..2 {
        let (ql, qh) = (&ql[64 * h..64 * h + 64], &qh[32 * h..32 * h + 32]);
        let sc = &scales[8 * h..8 * h + 8];
        let y = &mut y[128 * h..128 * h + 128];
        for l in 0..32 {
            let (a, b, c) = (ql[l], ql[32 + l], qh[l]);
            let codes = [
                (a & 15) | ((c & 3) << 4),
                (b & 15) | (((c >> 2) & 3) << 4),
                (a >> 4) | (((c >> 4) & 3) << 4),
                (b >> 4) | (((c >> 6) & 3) << 4),
            ];
            for (k, &q) in codes.iter().enumerate() {
                let i = 32 * k + l;
                // Scale of value 128h + i is scales[(128h + i) / 16] = sc[i / 16].
                let s = f32::from(sc[i / 16] as i8);
                y[i] = d * s * (f32::from(q) - 32.0);
            }
        }
    }
}

/// Dequantizes whole Q4_K blocks (`bytes.len()` a multiple of [`Q4_K_BYTES`]; checked by the
/// caller) into `out`.
pub fn dequantize_q4_k(bytes: &[u8], out: &mut Vec<f32>) {
    for b in bytes.chunks_exact(Q4_K_BYTES) {
        if let Ok(b) = b.try_into() {
            dequantize_q4_k_block(b, out);
        }
    }
}

/// Dequantizes whole Q6_K blocks (`bytes.len()` a multiple of [`Q6_K_BYTES`]; checked by the
/// caller) into `out`.
pub fn dequantize_q6_k(bytes: &[u8], out: &mut Vec<f32>) {
    for b in bytes.chunks_exact(Q6_K_BYTES) {
        if let Ok(b) = b.try_into() {
            dequantize_q6_k_block(b, out);
        }
    }
}
