// Attention hooks of VecInfer, key side (msl/attend/attend_core.metal). Twin of
// wgsl/vecinfer/attend_k.wgsl (read it: q̃ and the per-vector LUT in k_prepare, the f16 LUT's
// error, the score as a sum of n_sub entries); CPU twin src/cpu/vecinfer/attend_k.rs. The LUT
// lives in the partials kernel's threadgroup memory through K_SHARED (msl/attend/attend_shared.metal):
// float4 entries, or half4 where ATT_KVI_LUT16 = 1. Specialized on ATT_KVI_P, ATT_KVI_LOG2P,
// ATT_KVI_DS, ATT_KVI_BITS, ATT_KVI_LUT16, ATT_KVI_C.

#define KVI_P ATT_KVI_P
#define KVI_DS ATT_KVI_DS
#define KVI_B ATT_KVI_BITS
#define KVI_C (1u << ATT_KVI_BITS)
#define KVI_NSUB (ATT_KVI_P / ATT_KVI_DS)
#define KVI_RW ((KVI_NSUB * KVI_B + 31u) / 32u)
#define KVI_SPL ((KVI_NSUB + 7u) / 8u)
#define KVI_N (KVI_NSUB * KVI_C)

// Keep in sync with `VecInferCodec::attend_uniform` in src/codecs/vecinfer/codec.rs.
struct KViParams {
    uint codes;
    uint p0;
    uint p1;
    uint p2;
};
typedef KViParams KParams;
#define K_PREP true
#define K_PREP_W KVI_P
#if ATT_KVI_CB
#define K_SHARED float kvi_cb[KVI_C * KVI_DS];
#elif ATT_KVI_LUT16
#define K_SHARED half4 kvi_lut[KVI_N];
#else
#define K_SHARED float4 kvi_lut[KVI_N];
#endif

template <typename Sh>
static inline void k_prepare(constant AttendParams& A, constant KParams& KP, device const uint* kseg,
                             device const uint* ktab, threadgroup Sh& S, uint lid, uint h) {
    for (uint i = lid; i < KVI_P; i += WORKGROUP_SIZE) {
        float4 x = float4(0.0f);
        if (i < ATTEND_DIM) {
            x = S.qs[i] * as_type<float>(ktab[h * ATTEND_DIM + i]);
        }
        S.qp[i] = x;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint p = 0u; p < ATT_KVI_LOG2P; ++p) {
        const uint hh = 1u << p;
        for (uint q = lid; q < KVI_P / 2u; q += WORKGROUP_SIZE) {
            const uint i = ((q >> p) << (p + 1u)) | (q & (hh - 1u));
            const float4 a = S.qp[i];
            const float4 b = S.qp[i + hh];
            S.qp[i] = a + b;
            S.qp[i + hh] = a - b;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    const float c = as_type<float>(uint(ATT_KVI_C));
    for (uint i = lid; i < KVI_P; i += WORKGROUP_SIZE) {
        S.qp[i] *= c;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint cb0 = A.hkv * ATTEND_DIM + h * KVI_C * KVI_DS;
#if ATT_KVI_CB
    for (uint e = lid; e < KVI_C * KVI_DS; e += WORKGROUP_SIZE) {
        S.kvi_cb[e] = as_type<float>(ktab[cb0 + e]);
    }
#else
    for (uint e = lid; e < KVI_N; e += WORKGROUP_SIZE) {
        const uint s = e / KVI_C;
        const uint cw = cb0 + (e % KVI_C) * KVI_DS;
        float4 x = float4(0.0f);
        for (uint i = 0u; i < KVI_DS; ++i) {
            x += S.qp[s * KVI_DS + i] * as_type<float>(ktab[cw + i]);
        }
#if ATT_KVI_LUT16
        S.kvi_lut[e] = half4(x);
#else
        S.kvi_lut[e] = x;
#endif
    }
#endif
}

// The 4 vectors' score of index c at sub-vector s: the LUT's entry, or (ATT_KVI_CB) the same
// sum from the codebook.
template <typename Sh>
static inline float4 kvi_score(threadgroup const Sh& S, uint s, uint c) {
#if ATT_KVI_CB
    float4 x = float4(0.0f);
    for (uint i = 0u; i < KVI_DS; ++i) {
        x += S.qp[s * KVI_DS + i] * S.kvi_cb[c * KVI_DS + i];
    }
    return x;
#else
    return float4(S.kvi_lut[s * KVI_C + c]);
#endif
}

template <typename Sh>
static inline void k_score(constant AttendParams& A, constant KParams& KP, device const uint* kseg,
                           threadgroup const Sh& S, uint row, uint last, uint cg, uint h, thread float4* acc) {
    for (uint j = 0u; j < 8u; ++j) {
        const uint base = KP.codes + (min(row + j, last) * A.hkv + h) * KVI_RW;
        float4 a = float4(0.0f);
        for (uint m = 0u; m < KVI_SPL; ++m) {
            const uint s = cg + 8u * m;
            if (s < KVI_NSUB) {
                const uint at = s * KVI_B;
                const uint w = base + (at >> 5u);
                const uint hi = (at & 31u) + KVI_B > 32u ? kseg[w + 1u] : 0u;
                a += kvi_score(S, s, bits_code(kseg[w], hi, at & 31u, KVI_B));
            }
        }
        acc[j] = a;
    }
}
