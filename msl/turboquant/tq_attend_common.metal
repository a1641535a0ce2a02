// TurboQuant's attention helpers shared by its MSL key and value hooks (attend_k.metal,
// attend_v.metal). Twin of wgsl/turboquant/tq_attend_common.wgsl.
#include <metal_stdlib>
using namespace metal;

// Bits sh .. sh + 31 of the 64-bit word (hi, lo).
static inline uint tq_funnel(uint lo, uint hi, uint sh) {
    return sh == 0u ? lo : ((lo >> sh) | (hi << (32u - sh)));
}

// Code at bit `at` (< 32) of a window whose words are w0 (bits 0..31) and w1 (32..63).
// (msl/common/bits.metal's bits_code).
static inline uint tq_window_code(uint w0, uint w1, uint at, uint bits) {
    return bits_code(w0, w1, at, bits);
}

static inline float tq_norm_of(uint w, uint h) {
    return float(as_type<half>(ushort((h & 1u) != 0u ? (w >> 16u) : (w & 0xffffu))));
}
