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
    let top = 23u - b;
    var v: u32;
    if (at <= top) {
        v = w << (top - at);
    } else {
        v = w >> (at - top);
    }
    return bitcast<f32>((v & (((1u << b) - 1u) << top)) | 0x3f800000u);
}
