// Bit extraction every codec's kernels share (../shared/spec/bitpack.md: code i of a b-bit
// stream at bits i·b .. i·b + b − 1, little-endian within and across u32 words). MSL twin:
// msl/common/bits.metal.

// The b-bit code at bit `off` (< 32) of a stream whose word there is `lo` and the next `hi`
// (read by the caller only when off + b > 32; otherwise pass anything).
fn bits_code(lo: u32, hi: u32, off: u32, b: u32) -> u32 {
    var v = lo >> off;
    if (off + b > 32u) {
        v |= hi << (32u - off);
    }
    return v & ((1u << b) - 1u);
}

// 1 + c / 2^b for the b-bit code c at bit `at` of w (at + b ≤ 32): the code moved into the top
// of an f32 mantissa by integer operations (no int → float conversion).
fn bits_unit(w: u32, at: u32, b: u32) -> f32 {
    return bits_unit_or(w, at, b, 0x3f800000u);
}

// bits_unit with the bits of 1.0 passed in (`one` = 0x3f800000): where `one` is a value the
// compiler cannot fold (read from workgroup memory once), the mask and the exponent's OR can
// be one three-input logic instruction instead of two.
fn bits_unit_or(w: u32, at: u32, b: u32, one: u32) -> f32 {
    let top = 23u - b;
    var v: u32;
    if (at <= top) {
        v = w << (top - at);
    } else {
        v = w >> (at - top);
    }
    return bitcast<f32>((v & (((1u << b) - 1u) << top)) | one);
}

// Codes i and i + 16/b of the word w (b ∈ {2, 4, 8}, i < 16/b) as c·2^-24 each, exactly: the
// two codes masked into the low bits of the word's two f16 halves (f16 subnormals, c·2^-24)
// and widened to f32 (normal there): one shift and one mask per two codes. Exact only where
// the device keeps f16 subnormals in that conversion.
fn bits_pair_tiny(w: u32, i: u32, b: u32) -> vec2<f32> {
    let m = (1u << b) - 1u;
    return unpack2x16float((w >> (i * b)) & (m | (m << 16u)));
}
