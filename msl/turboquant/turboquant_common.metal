// TurboQuant shared MSL (concatenated before turboquant_quant and turboquant_dequant: no
// include path in passthrough MSL): the uniform block, the tables' layout
// (src/codecs/turboquant/layout.rs), the boundary search, the signs and f16 rounding. Twin of
// wgsl/turboquant/turboquant_common.wgsl; CPU twins in src/cpu/turboquant/.
// Specialization: TQ_P, TQ_LOG2P, TQ_BITS, TQ_STAGES.
#include <metal_stdlib>
using namespace metal;

// Keep in sync with TqParams in src/codecs/turboquant/plans.rs and
// wgsl/turboquant/turboquant_common.wgsl.
struct TqParams {
    uint heads;
    uint dim;
    uint count;
    uint src_start;
    uint t_old;
    uint inc_start;
    uint ring_tokens;
    uint seg_token;
    uint in_row_words;
    uint row_words;
    uint norm_words;
    uint items;
    float inv_sqrt_p;
    uint cb_offset;
    uint p0;
    uint p1;
};

#define TQ_TP TQ_P
#define TQ_TB TQ_BITS
#define TQ_TS TQ_STAGES
#define TQ_TN (1u << TQ_BITS)
#define TQ_MASK (TQ_TN - 1u)
#define TQ_SW ((TQ_TP + 31u) / 32u)
#define TQ_RW ((TQ_TP * TQ_TB + 31u) / 32u)
#define TQ_WPL ((TQ_TP + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE)

// The codebooks (2·S·2^b floats: per stage the centroids, then the boundaries) from the tables.
static inline void tq_load_codebook(constant TqParams& P, device const uint* tables,
                                    threadgroup float* cb, uint lid) {
    for (uint i = lid; i < 2u * TQ_TS * TQ_TN; i += WORKGROUP_SIZE) {
        cb[i] = as_type<float>(tables[P.cb_offset + i]);
    }
}

// The number of boundaries of stage s strictly below y (binary search).
static inline uint tq_code(threadgroup const float* cb, float y, uint s) {
    const uint bnd = s * 2u * TQ_TN + TQ_TN;
    uint c = 0u;
    for (uint k = 0u; k < TQ_TB; ++k) {
        const uint step = 1u << (TQ_TB - 1u - k);
        c = cb[bnd + c + step - 1u] < y ? c + step : c;
    }
    return c;
}

static inline float tq_centroid(threadgroup const float* cb, uint code, uint s) {
    return cb[s * 2u * TQ_TN + code];
}

// x · s_i for coordinate i of head h's sign row (an exact sign flip).
static inline float tq_flip(device const uint* tables, float x, uint h, uint i) {
    const uint bit = ((tables[h * TQ_SW + (i >> 5u)] >> (i & 31u)) & 1u) << 31u;
    return as_type<float>(as_type<uint>(x) ^ bit);
}

static inline float tq_half(uint w, uint hi) {
    return float(as_type<half>(ushort(hi != 0u ? (w >> 16u) : (w & 0xffffu))));
}

// f16 bits of a non-negative finite norm, round to nearest even (a last-bit overflow stores
// 65504: a norm beyond f16 is refused on the host).
static inline uint tq_f16_bits(float x) {
    const uint a = as_type<uint>(x) & 0x7fffffffu;
    if (a >= 0x477ff000u) {
        return 0x7bffu;
    }
    if (a >= 0x38800000u) {
        const uint r = a + 0xfffu + ((a >> 13u) & 1u);
        return (r - 0x38000000u) >> 13u;
    }
    if (a < 0x33000000u) {
        return 0u;
    }
    const uint e = a >> 23u;
    const uint m = (a & 0x7fffffu) | 0x800000u;
    const uint shift = 126u - e;
    const uint q = m >> shift;
    const uint rem = m & ((1u << shift) - 1u);
    const uint half_ = 1u << (shift - 1u);
    return q + ((rem > half_ || (rem == half_ && (q & 1u) == 1u)) ? 1u : 0u);
}
