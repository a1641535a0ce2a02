// Attention hooks of KIVI, value side (msl/attend/attend_core.metal): packed codes per token
// along channels, streams `codes` (word VP.codes) and `params` (word VP.params) of the value
// segment. Twin of wgsl/kivi/attend_v.wgsl (read it: the folding of (scale, lo) into the
// weight, the fast and the per-element paths); CPU twin src/cpu/kivi/attend_v.rs. Specialized
// on ATT_VBITS, ATT_VGROUP, ATT_VPARAMS_F16.

// Keep in sync with `KiviUniform` in src/codecs/kivi/codec.rs.
struct VKiviParams {
    uint codes;
    uint params;
    uint p0;
    uint p1;
};
typedef VKiviParams VParams;
#define V_W ATTEND_DIM
#define V_CPL ATTEND_R_CPL
#define V_SPACE_OUT true
#define KIVI_VB ATT_VBITS
#define KIVI_VG ATT_VGROUP
#define KIVI_VGW ((KIVI_VG * KIVI_VB + 31u) / 32u)
#define KIVI_VNG ((ATTEND_DIM + KIVI_VG - 1u) / KIVI_VG)
#define KIVI_VRW ((ATTEND_DIM / KIVI_VG) * KIVI_VGW + ((ATTEND_DIM % KIVI_VG) * KIVI_VB + 31u) / 32u)
#define KIVI_V_MASK ((1u << KIVI_VB) - 1u)
#define KIVI_V_POW2 (KIVI_VB == 1u || KIVI_VB == 2u || KIVI_VB == 4u || KIVI_VB == 8u)
#define KIVI_V_LANE_BITS (V_CPL * KIVI_VB)
#define KIVI_V_WHOLE (KIVI_V_POW2 && KIVI_VG % V_CPL == 0u && KIVI_V_LANE_BITS % 32u == 0u)
#define KIVI_V_PART (KIVI_V_POW2 && KIVI_VG % V_CPL == 0u && 32u % KIVI_V_LANE_BITS == 0u)
#define KIVI_V_WORDS (KIVI_V_LANE_BITS / 32u > 1u ? KIVI_V_LANE_BITS / 32u : 1u)

struct VState {
    float4 o[V_CPL];
    float4 bias;
};

static inline float2 kivi_v_pair(constant VParams& VP, device const uint* vseg, uint gi) {
    if (ATT_VPARAMS_F16 == 1u) {
        const uint w = vseg[VP.params + gi];
        return float2(kivi_f16_to_float(w), kivi_f16_to_float(w >> 16u));
    }
    const uint w = VP.params + 2u * gi;
    return float2(as_type<float>(vseg[w]), as_type<float>(vseg[w + 1u]));
}

static inline float kivi_vx(uint w, uint at) {
    return bits_unit(w, at, KIVI_VB);
}

static inline void v_reset(thread VState& s) {
    for (uint i = 0u; i < V_CPL; ++i) {
        s.o[i] = float4(0.0f);
    }
    s.bias = float4(0.0f);
}

static inline void v_scale(thread VState& s, float4 c) {
    for (uint i = 0u; i < V_CPL; ++i) {
        s.o[i] *= c;
    }
    s.bias *= c;
}

static inline float4 v_out(thread const VState& s, uint i) {
    return s.o[i] + s.bias;
}

static inline void v_accum(constant AttendParams& A, constant VParams& VP, device const uint* vseg,
                           device const uint* vtab, thread VState& s, uint row, uint last, uint cg, uint h,
                           thread const float4* p) {
    const uint c0 = cg * V_CPL;
    if (KIVI_V_WHOLE || KIVI_V_PART) {
        const uint g = c0 / KIVI_VG;
        const uint bit0 = (c0 - g * KIVI_VG) * KIVI_VB;
        for (uint j = 0u; j < 8u; ++j) {
            const uint rb = min(row + j, last) * A.hkv + h;
            const float2 pr = kivi_v_pair(VP, vseg, rb * KIVI_VNG + min(g, KIVI_VNG - 1u));
            const float a = pr.x * float(1u << KIVI_VB);
            const float4 wa = p[j] * a;
            s.bias += p[j] * (pr.y - a);
            const uint w = VP.codes + rb * KIVI_VRW + g * KIVI_VGW + (bit0 >> 5u);
            if (KIVI_V_WHOLE) {
                for (uint k = 0u; k < KIVI_V_WORDS; ++k) {
                    const uint word = vseg[w + k];
                    for (uint i = 0u; i < 32u / KIVI_VB; ++i) {
                        s.o[k * (32u / KIVI_VB) + i] += wa * kivi_vx(word, i * KIVI_VB);
                    }
                }
            } else {
                const uint word = vseg[w] >> (bit0 & 31u);
                for (uint i = 0u; i < V_CPL; ++i) {
                    s.o[i] += wa * kivi_vx(word, i * KIVI_VB);
                }
            }
        }
        return;
    }
    for (uint j = 0u; j < 8u; ++j) {
        const uint rb = min(row + j, last) * A.hkv + h;
        for (uint i = 0u; i < V_CPL; ++i) {
            const uint c = min(c0 + i, ATTEND_DIM - 1u);
            const uint g = c / KIVI_VG;
            const float2 pr = kivi_v_pair(VP, vseg, rb * KIVI_VNG + g);
            const uint code = kivi_get_code(vseg, VP.codes + rb * KIVI_VRW + g * KIVI_VGW, c - g * KIVI_VG, KIVI_VB);
            s.o[i] += p[j] * kivi_reconstruct(code, pr.x, pr.y);
        }
    }
}

// v̂ of channel c of segment row `row` (clamped to `last`) of head h (the prefill kernel).
// Twin of wgsl/kivi/attend_v.wgsl's v_value.
static inline float v_value(constant AttendParams& A, constant VParams& VP, device const uint* vseg,
                            device const uint* vtab, uint row, uint last, uint c, uint h) {
    const uint rb = min(row, last) * A.hkv + h;
    const uint g = c / KIVI_VG;
    const float2 pr = kivi_v_pair(VP, vseg, rb * KIVI_VNG + g);
    const uint code = kivi_get_code(vseg, VP.codes + rb * KIVI_VRW + g * KIVI_VGW, c - g * KIVI_VG, KIVI_VB);
    return kivi_reconstruct(code, pr.x, pr.y);
}

// v̂ of channels c .. c + 3 of row `row` of head h (the prefill kernel's value tiles, where
// ATT_V_QUAD: c a multiple of 4, c + 3 < D, row within the segment): one load of the codes and
// one of the params for the four, the same values as v_value's. Twin of the WGSL's v_quad.
#define ATT_V_QUAD (KIVI_VG % 4u == 0u && KIVI_V_POW2)
static inline float4 v_quad(constant AttendParams& A, constant VParams& VP, device const uint* vseg,
                            uint row, uint c, uint h) {
    const uint rb = row * A.hkv + h;
    const uint g = c / KIVI_VG;
    const float2 pr = kivi_v_pair(VP, vseg, rb * KIVI_VNG + g);
    const uint bit0 = (c - g * KIVI_VG) * KIVI_VB;
    const uint w = vseg[VP.codes + rb * KIVI_VRW + g * KIVI_VGW + (bit0 >> 5u)] >> (bit0 & 31u);
    float4 x;
    for (uint j = 0u; j < 4u; ++j) {
        x[j] = kivi_reconstruct((w >> (j * KIVI_VB)) & KIVI_V_MASK, pr.x, pr.y);
    }
    return x;
}

template <typename Sh>
static inline void v_finish(constant AttendParams& A, constant VParams& VP, device const uint* vtab,
                            threadgroup Sh& S, uint lid, uint h) {}
