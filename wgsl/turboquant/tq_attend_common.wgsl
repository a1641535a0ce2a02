// TurboQuant's attention helpers shared by its key and value hooks (attend_k.wgsl,
// attend_v.wgsl; included once per composed kernel).

// Bits sh .. sh + 31 of the 64-bit word (hi, lo): a lane's codes that start inside `lo`.
fn tq_funnel(lo: u32, hi: u32, sh: u32) -> u32 {
    return select((lo >> sh) | (hi << (32u - sh)), lo, sh == 0u);
}

// Code at bit `at` (a constant once unrolled) of a lane's window words `w0` (bits 0..31) and
// `w1` (bits 32..63): codes never straddle past w1.
// (wgsl/common/bits.wgsl's bits_code).
fn tq_window_code(w0: u32, w1: u32, at: u32, bits: u32) -> u32 {
    if (at >= 32u) {
        return bits_code(w1, 0u, at - 32u, bits);
    }
    return bits_code(w0, w1, at, bits);
}
