// KIVI shared MSL (concatenated before each kivi_* kernel by src/gpu/registry.rs, since
// passthrough MSL has no include path): the uniform block, f16 rounding, group arithmetic.
// Twin of wgsl/kivi/kivi_common.wgsl; CPU reference src/cpu/kivi/kivi_group.rs.
// Specialization: PARAMS_F16 (1u: one uint per (scale, lo); 0u: two uints of f32 bits).
#include <metal_stdlib>
using namespace metal;

// Keep in sync with KiviParams in src/codecs/kivi/plans.rs and wgsl/kivi/kivi_common.wgsl.
struct KiviParams {
    uint heads;
    uint dim;
    uint bits;
    uint group;
    uint count;
    uint src_start;
    uint t_old;
    uint ring_tokens;
    uint dst_offset;
    float inv_levels;
    uint group_words;
    uint row_words;
    uint n_groups;
    uint resid_row_words;
    uint inc_start;
    uint pad1;
};

// f32 -> f16 bits, round to nearest even, in integers (identical to the WGSL twin and the
// `half` crate), so stored parameters match the reference bit for bit.
static inline uint kivi_f16_bits(float x) {
    const uint b = as_type<uint>(x);
    const uint sign = (b >> 16u) & 0x8000u;
    const uint a = b & 0x7fffffffu;
    if (a >= 0x477ff000u) {
        return sign | 0x7c00u;
    }
    if (a >= 0x38800000u) {
        const uint r = a + 0xfffu + ((a >> 13u) & 1u);
        return sign | ((r - 0x38000000u) >> 13u);
    }
    if (a < 0x33000000u) {
        return sign;
    }
    const uint e = a >> 23u;
    const uint m = (a & 0x7fffffu) | 0x800000u;
    const uint shift = 126u - e;
    const uint q = m >> shift;
    const uint rem = m & ((1u << shift) - 1u);
    const uint half_ = 1u << (shift - 1u);
    const uint up = (rem > half_ || (rem == half_ && (q & 1u) == 1u)) ? 1u : 0u;
    return sign | (q + up);
}

static inline float kivi_f16_to_float(uint h) {
    return float(as_type<half>(ushort(h & 0xffffu)));
}

static inline bool kivi_params_overflow(float scale, float lo) {
    return PARAMS_F16 == 1u && (fabs(scale) >= 65520.0f || fabs(lo) >= 65520.0f);
}

static inline uint kivi_code(float x, float scale, float lo, uint levels) {
    if (!(scale > 0.0f && scale < 3.0e38f)) {
        return 0u;
    }
    // As the WGSL twin: clamped, then rounded half to even by adding 2^23 (f32 steps by 1
    // in [2^23, 2^24)); the integer is the low mantissa bits. No float-to-integer conversion.
    const float r = clamp((x - lo) / scale, 0.0f, float(levels));
    return as_type<uint>(r + 8388608.0f) - 0x4b000000u;
}

// f32(q * scale_st) + lo_st with two roundings: the product goes through an integer
// bitcast so that fast math cannot contract it into a fused multiply-add.
static inline float kivi_reconstruct(uint q, float scale_st, float lo_st) {
    if (q == 0u) {
        return lo_st;
    }
    const float p = as_type<float>(as_type<uint>(float(q) * scale_st));
    return p + lo_st;
}

// (scale, lo) of group gi from a parameter buffer.
static inline float2 kivi_load_pair(device const uint* params, uint gi) {
    if (PARAMS_F16 == 1u) {
        const uint w = params[gi];
        return float2(kivi_f16_to_float(w), kivi_f16_to_float(w >> 16u));
    }
    return float2(as_type<float>(params[2u * gi]), as_type<float>(params[2u * gi + 1u]));
}

// Stores (scale, lo) of group gi, or raises the status flag (every writer writes the same
// value 1, so plain stores suffice).
static inline void kivi_store_pair(device uint* params, device uint* status, uint gi, float scale, float lo) {
    if (kivi_params_overflow(scale, lo)) {
        status[0] = 1u;
        return;
    }
    // A zero lo is stored as +0 (min over +-0 depends on the reduction order); done on the
    // integer bits so that fast math cannot fold it away.
    if (PARAMS_F16 == 1u) {
        uint lo_bits = kivi_f16_bits(lo);
        if ((lo_bits & 0x7fffu) == 0u) {
            lo_bits = 0u;
        }
        params[gi] = kivi_f16_bits(scale) | (lo_bits << 16u);
    } else {
        uint lo_bits = as_type<uint>(lo);
        if ((lo_bits & 0x7fffffffu) == 0u) {
            lo_bits = 0u;
        }
        params[2u * gi] = as_type<uint>(scale);
        params[2u * gi + 1u] = lo_bits;
    }
}

// Input element e of absolute token s: from the ring (s < t_old) or this append's rows
// (row s - inc_start of `incoming`).
static inline float kivi_load_x(constant KiviParams& P, device const uint* ring, device const uint* incoming, uint s, uint e) {
    uint w;
    if (s < P.t_old) {
        w = ring[(s % P.ring_tokens) * P.resid_row_words + (e >> 1u)];
    } else {
        w = incoming[(s - P.inc_start) * P.resid_row_words + (e >> 1u)];
    }
    return kivi_f16_to_float((e & 1u) == 1u ? (w >> 16u) : w);
}

// Code i of the b-bit stream starting at word `base`.
static inline uint kivi_get_code(device const uint* codes, uint base, uint i, uint b) {
    const uint start = i * b;
    const uint w = base + (start >> 5u);
    const uint off = start & 31u;
    const uint hi = off + b > 32u ? codes[w + 1u] : 0u;
    return bits_code(codes[w], hi, off, b);
}
