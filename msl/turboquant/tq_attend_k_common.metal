// TurboQuant's key-side attention pieces in MSL (twin of wgsl/turboquant/tq_attend_k_common.wgsl),
// shared by its key hook (attend_k.metal) and TurboQuant-Prod's (msl/turboquant_prod/attend_k.metal):
// concatenated before either. Specialized on ATT_KTQ_P, ATT_KTQ_LOG2P, ATT_KTQ_BITS,
// ATT_KTQ_STAGES, ATT_KTQ_C.

#define KTQ_P ATT_KTQ_P
#define KTQ_B ATT_KTQ_BITS
#define KTQ_S ATT_KTQ_STAGES
#define KTQ_N (1u << ATT_KTQ_BITS)
#define KTQ_CPL (ATT_KTQ_P / 8u > 1u ? ATT_KTQ_P / 8u : 1u)
#define KTQ_RW ((KTQ_P * KTQ_B + 31u) / 32u)
#define KTQ_SW ((KTQ_P + 31u) / 32u)
#define KTQ_LB (KTQ_CPL * KTQ_B)
#define KTQ_ALIGNED (KTQ_LB % 32u == 0u)
#define KTQ_NW ((KTQ_LB + 31u) / 32u)
#define KTQ_WIN (8u * KTQ_S * KTQ_NW)

// q′ = c·H_P·(s ⊙ q) into S.qp[0 .. 8·CPL) (k_prepare).
template <typename Sh>
static inline void ktq_prepare(device const uint* ktab, threadgroup Sh& S, uint lid, uint h) {
    for (uint i = lid; i < 8u * KTQ_CPL; i += WORKGROUP_SIZE) {
        float4 x = float4(0.0f);
        if (i < ATTEND_DIM) {
            const bool flip = ((ktab[h * KTQ_SW + (i >> 5u)] >> (i & 31u)) & 1u) != 0u;
            x = flip ? -S.qs[i] : S.qs[i];
        }
        S.qp[i] = x;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint p = 0u; p < ATT_KTQ_LOG2P; ++p) {
        const uint hh = 1u << p;
        for (uint q = lid; q < KTQ_P / 2u; q += WORKGROUP_SIZE) {
            const uint i = ((q >> p) << (p + 1u)) | (q & (hh - 1u));
            const float4 a = S.qp[i];
            const float4 b = S.qp[i + hh];
            S.qp[i] = a + b;
            S.qp[i + hh] = a - b;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    const float c = as_type<float>(uint(ATT_KTQ_C));
    for (uint i = lid; i < KTQ_P; i += WORKGROUP_SIZE) {
        S.qp[i] *= c;
    }
}

// The lane's n_j·Σ_c q′_c·ŷ_jc of its 8 tokens into acc (k_score): codes at word `codes`,
// norms at word `norms` of the key segment, the centroids `cb` [stage][2^b] (the hook's
// constant buffer: a template parameter, so that the array member decays to its pointer type).
template <typename Sh, typename Cb>
static inline void ktq_score(constant AttendParams& A, device const uint* kseg, threadgroup const Sh& S,
                             Cb cb, uint codes, uint norms, uint row, uint last, uint cg,
                             uint h, thread float4* acc) {
    float nrm[8];
    uint win[KTQ_WIN];
    const uint bit0 = cg * KTQ_LB;
    const uint w0 = bit0 >> 5u;
    const uint sh = bit0 & 31u;
    const uint nwn = (A.hkv + 1u) / 2u;
    for (uint j = 0u; j < 8u; ++j) {
        acc[j] = float4(0.0f);
        const uint r = min(row + j, last);
        nrm[j] = tq_norm_of(kseg[norms + r * nwn + (h >> 1u)], h);
        const uint rb = codes + (r * A.hkv + h) * KTQ_S * KTQ_RW;
        for (uint st = 0u; st < KTQ_S; ++st) {
            const uint base = rb + st * KTQ_RW;
            for (uint m = 0u; m < KTQ_NW; ++m) {
                uint word;
                if (KTQ_ALIGNED) {
                    word = kseg[base + w0 + m];
                } else {
                    const uint lo = kseg[base + min(w0 + m, KTQ_RW - 1u)];
                    const uint hi = kseg[base + min(w0 + m + 1u, KTQ_RW - 1u)];
                    word = tq_funnel(lo, hi, sh);
                }
                win[(j * KTQ_S + st) * KTQ_NW + m] = word;
            }
        }
    }
    for (uint i = 0u; i < KTQ_CPL; ++i) {
        const float4 qv = S.qp[cg * KTQ_CPL + i];
        const uint at = i * KTQ_B;
        const uint m = at >> 5u;
        for (uint j = 0u; j < 8u; ++j) {
            float y = 0.0f;
            for (uint st = 0u; st < KTQ_S; ++st) {
                const uint wi = (j * KTQ_S + st) * KTQ_NW + m;
                const uint code = tq_window_code(win[wi], win[min(wi + 1u, KTQ_WIN - 1u)], at & 31u, KTQ_B);
                y += cb[st * KTQ_N + code];
            }
            acc[j] += qv * y;
        }
    }
    for (uint j = 0u; j < 8u; ++j) {
        acc[j] *= nrm[j];
    }
}
