// Attention hooks of QJL keys (msl/attend/attend_core.metal). Twin of wgsl/qjl/attend_k.wgsl
// (read it: the sketched query with √(π/2)/m folded in, a masked sum per sign word, the norm
// once per token); CPU twin src/cpu/qjl/attend_k.rs. Specialized on ATT_KQJL_M, ATT_KQJL_C.

#define KQ_M ATT_KQJL_M
#define KQ_SW (ATT_KQJL_M / 32u)
#define KQ_CPL (ATT_KQJL_M / 8u)
#define KQ_LW ((KQ_CPL + 31u) / 32u)
#define KQ_PW (KQ_CPL < 32u ? KQ_CPL : 32u)

// Keep in sync with the default `Codec::attend_uniform` (the streams' first words).
struct KQjlParams {
    uint signs;
    uint norms;
    uint p0;
    uint p1;
};
typedef KQjlParams KParams;
#define K_PREP true
#define K_PREP_W ATT_KQJL_M

template <typename Sh>
static inline void k_prepare(constant AttendParams& A, constant KParams& KP, device const uint* kseg,
                             device const uint* ktab, threadgroup Sh& S, uint lid, uint h) {
    const float c = as_type<float>(uint(ATT_KQJL_C));
    for (uint i = lid; i < KQ_M; i += WORKGROUP_SIZE) {
        const uint base = i * ATTEND_DIM;
        float4 a = float4(0.0f);
        for (uint d = 0u; d < ATTEND_DIM; ++d) {
            a += as_type<float>(ktab[base + d]) * S.qs[d];
        }
        S.qp[i] = a * c;
    }
}

template <typename Sh>
static inline void k_score(constant AttendParams& A, constant KParams& KP, device const uint* kseg,
                           threadgroup const Sh& S, uint row, uint last, uint cg, uint h, thread float4* acc) {
    const uint e0 = cg * KQ_CPL;
    float4 all = float4(0.0f);
    for (uint i = 0u; i < KQ_CPL; ++i) {
        all += S.qp[e0 + i];
    }
    const uint nwn = (A.hkv + 1u) / 2u;
    for (uint j = 0u; j < 8u; ++j) {
        const uint r = min(row + j, last);
        const uint nw = kseg[KP.norms + r * nwn + (h >> 1u)];
        const float n = float(as_type<half>(ushort((h & 1u) != 0u ? (nw >> 16u) : (nw & 0xffffu))));
        const uint wb = KP.signs + (r * A.hkv + h) * KQ_SW;
        float4 pos = float4(0.0f);
        for (uint k = 0u; k < KQ_LW; ++k) {
            // Pieces may straddle two words and the last may be short (see the WGSL twin).
            const uint e = e0 + 32u * k;
            const uint off = e & 31u;
            const uint w = wb + (e >> 5u);
            uint bits = kseg[w] >> off;
            if (off != 0u && off + min(KQ_CPL - 32u * k, 32u) > 32u) {
                bits |= kseg[w + 1u] << (32u - off);
            }
            for (uint i = 0u; i < KQ_PW; ++i) {
                const bool on = ((bits >> i) & 1u) != 0u && 32u * k + i < KQ_CPL;
                pos += on ? S.qp[e + i] : float4(0.0f);
            }
        }
        acc[j] = n * (2.0f * pos - all);
    }
}
