// Bit extraction every codec's kernels share: the twin of wgsl/common/bits.wgsl (read it).
#include <metal_stdlib>
using namespace metal;

static inline uint bits_code(uint lo, uint hi, uint off, uint b) {
    uint v = lo >> off;
    if (off + b > 32u) {
        v |= hi << (32u - off);
    }
    return v & ((1u << b) - 1u);
}

static inline float bits_unit(uint w, uint at, uint b) {
    const uint top = 23u - b;
    const uint v = at <= top ? (w << (top - at)) : (w >> (at - top));
    return as_type<float>((v & (((1u << b) - 1u) << top)) | 0x3f800000u);
}
