// Shared by the GPU-input kernels (src/store/gpu_input.rs): the layer's input status word
// layout and the exact f32 → f16 rounding of the store's host input (half::f16::from_f32:
// round to nearest, ties to even, subnormals kept). WGSL's own f32 → f16 conversion may round
// either way, so it is not used.
//
// Input status (keep in sync with `status` in src/store/gpu_input.rs):
//   [0] 1 once an append was rejected (sticky until the layer syncs), else 0
//   [1] [2]  keys / values: 0xffffffff − the first non-finite element (atomicMax; 0: none)
//   [3] [4]  keys / values: 0xffffffff − the first vector whose norm f16 cannot hold
//   [5] the rejected append's first token   [6] what (0 k value, 1 v value, 2 k norm, 3 v norm)
//   [7] the flat element (0, 1) or vector (2, 3) index   [8] the element's raw bits
//   [9] its type (0 f16, 1 f32)   [16 ..] the f16 row of the token holding the vector (2, 3)

const ST_REJECTED: u32 = 0u;
const ST_VALUE_MARK: u32 = 1u;
const ST_NORM_MARK: u32 = 3u;
const ST_T_OLD: u32 = 5u;
const ST_KIND: u32 = 6u;
const ST_INDEX: u32 = 7u;
const ST_RAW: u32 = 8u;
const ST_DTYPE: u32 = 9u;
const ST_ROW: u32 = 16u;

// The f16 bits of the f32 with bits `b`, rounded to nearest even; NaN → quiet NaN, beyond
// f16's range (|x| ≥ 65520) → ±Inf.
fn f32_to_f16_bits(b: u32) -> u32 {
    let sign = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return sign | 0x7e00u;
    }
    if (a >= 0x477ff000u) {
        return sign | 0x7c00u;
    }
    if (a >= 0x38800000u) {
        // Normal: rebias the exponent (127 − 15), round the 13 dropped bits to even.
        let m = a - 0x38000000u;
        return sign | ((m + 0xfffu + ((m >> 13u) & 1u)) >> 13u);
    }
    if (a < 0x33000000u) {
        // Below 2^-25 (2^-25 itself ties to the even zero).
        return sign;
    }
    // Subnormal: round(mantissa · 2^(e − 126)) in units of 2^-24.
    let e = a >> 23u;
    let mant = (a & 0x7fffffu) | 0x800000u;
    let shift = 126u - e;
    let q = mant >> shift;
    let rem = mant & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    var r = q;
    if (rem > half || (rem == half && (q & 1u) == 1u)) {
        r = r + 1u;
    }
    return sign | r;
}
