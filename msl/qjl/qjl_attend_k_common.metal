// QJL's key-side attention pieces in MSL (twin of wgsl/qjl/qjl_attend_k_common.wgsl), shared by
// its key hook (attend_k.metal) and TurboQuant-Prod's (msl/turboquant_prod/attend_k.metal):
// concatenated before either. Specialized on ATT_KQJL_M, ATT_KQJL_C.

#define KQ_M ATT_KQJL_M
#define KQ_SW (ATT_KQJL_M / 32u)
#define KQ_CPL (ATT_KQJL_M / 8u)
#define KQ_LW ((KQ_CPL + 31u) / 32u)
#define KQ_PW (KQ_CPL < 32u ? KQ_CPL : 32u)

// S.qp[off + i] = c·(S q)_i for the sketch S [m][stride] at word `tab` of ktab (q zero past D).
template <typename Sh>
static inline void kqjl_prepare(device const uint* ktab, threadgroup Sh& S, uint lid, uint tab,
                                uint stride, uint off) {
    const float c = as_type<float>(uint(ATT_KQJL_C));
    for (uint i = lid; i < KQ_M; i += WORKGROUP_SIZE) {
        const uint base = tab + i * stride;
        float4 a = float4(0.0f);
        for (uint d = 0u; d < ATTEND_DIM; ++d) {
            a += as_type<float>(ktab[base + d]) * S.qs[d];
        }
        S.qp[off + i] = a * c;
    }
}

// The lane's ⟨c·S q, 2σ_j − 1⟩ of its 8 tokens into acc (not × n_j): the prepared sketch at
// S.qp[off ..), the sign rows at word `signs` of the key segment.
template <typename Sh>
static inline void kqjl_signed(constant AttendParams& A, device const uint* kseg, threadgroup const Sh& S,
                               uint signs, uint off, uint row, uint last, uint cg, uint h, thread float4* acc) {
    const uint e0 = off + cg * KQ_CPL;
    float4 all = float4(0.0f);
    for (uint i = 0u; i < KQ_CPL; ++i) {
        all += S.qp[e0 + i];
    }
    for (uint j = 0u; j < 8u; ++j) {
        const uint r = min(row + j, last);
        const uint wb = signs + (r * A.hkv + h) * KQ_SW;
        float4 pos = float4(0.0f);
        for (uint k = 0u; k < KQ_LW; ++k) {
            // Pieces may straddle two words and the last may be short (see the WGSL twin).
            const uint e = e0 + 32u * k;
            const uint b0 = cg * KQ_CPL + 32u * k; // the piece's first sketch row
            const uint sh = b0 & 31u;
            const uint w = wb + (b0 >> 5u);
            uint bits = kseg[w] >> sh;
            if (sh != 0u && sh + min(KQ_CPL - 32u * k, 32u) > 32u) {
                bits |= kseg[w + 1u] << (32u - sh);
            }
            for (uint i = 0u; i < KQ_PW; ++i) {
                const bool on = ((bits >> i) & 1u) != 0u && 32u * k + i < KQ_CPL;
                pos += on ? S.qp[e + i] : float4(0.0f);
            }
        }
        acc[j] = 2.0f * pos - all;
    }
}
