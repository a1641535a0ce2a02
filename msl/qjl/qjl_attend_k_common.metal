// QJL's key-side attention pieces in MSL (twin of wgsl/qjl/qjl_attend_k_common.wgsl: read it
// for the prepared query's two layouts, masked sums and the nibble table), shared by its key
// hook (attend_k.metal) and TurboQuant-Prod's (msl/turboquant_prod/attend_k.metal):
// concatenated before either. Specialized on ATT_KQJL_M, ATT_KQJL_C, ATT_KQJL_LUT.

#define KQ_M ATT_KQJL_M
#define KQ_LUT (ATT_KQJL_LUT == 1u)
#define KQ_PREP_W (KQ_LUT ? 5u * ATT_KQJL_M : ATT_KQJL_M)
#define KQ_SW (ATT_KQJL_M / 32u)
#define KQ_CPL (ATT_KQJL_M / 8u)
#define KQ_LW ((KQ_CPL + 31u) / 32u)
#define KQ_PW (KQ_CPL < 32u ? KQ_CPL : 32u)

// The prepared query of the sketch Sᵀ [≥ D][m] at word `tab` of ktab (gpu_sketch_table; q zero
// past D) at S.qp[off ..). Every thread calls it (it holds a barrier).
template <typename Sh>
static inline void kqjl_prepare(device const uint* ktab, threadgroup Sh& S, uint lid, uint tab,
                                uint off) {
    const float c = as_type<float>(uint(ATT_KQJL_C));
    const uint raw = off + (KQ_LUT ? 4u * KQ_M : 0u);
    for (uint i = lid; i < KQ_M; i += WORKGROUP_SIZE) {
        float4 a = float4(0.0f);
        for (uint d = 0u; d < ATTEND_DIM; ++d) {
            a += as_type<float>(ktab[tab + d * KQ_M + i]) * S.qs[d];
        }
        S.qp[raw + i] = a * c;
    }
    if (KQ_LUT) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint e = lid; e < 4u * KQ_M; e += WORKGROUP_SIZE) {
            const uint g = raw + 4u * (e >> 4u);
            float4 t = float4(0.0f);
            for (uint b = 0u; b < 4u; ++b) {
                const float4 x = S.qp[g + b];
                t += ((e >> b) & 1u) != 0u ? x : -x;
            }
            S.qp[off + e] = t;
        }
    }
}

// The lane's CPL sign bits of the sign row at word `wb`, piece k (see the WGSL twin).
static inline uint kqjl_piece(device const uint* kseg, uint wb, uint cg, uint k) {
    const uint b0 = cg * KQ_CPL + 32u * k; // the piece's first sketch row
    const uint sh = b0 & 31u;
    const uint w = wb + (b0 >> 5u);
    uint bits = kseg[w] >> sh;
    if (sh != 0u && sh + min(KQ_CPL - 32u * k, 32u) > 32u) {
        bits |= kseg[w + 1u] << (32u - sh);
    }
    return bits;
}

// The lane's ⟨c·S q, 2σ_j − 1⟩ of its 8 tokens into acc (not × n_j): the prepared query at
// S.qp[off ..), the sign rows at word `signs` of the key segment.
template <typename Sh>
static inline void kqjl_signed(constant AttendParams& A, device const uint* kseg, threadgroup const Sh& S,
                               uint signs, uint off, uint row, uint last, uint cg, uint h, thread float4* acc) {
    if (KQ_LUT) {
        const uint t0 = off + 4u * cg * KQ_CPL;
        for (uint j = 0u; j < 8u; ++j) {
            const uint r = min(row + j, last);
            const uint wb = signs + (r * A.hkv + h) * KQ_SW;
            float4 s = float4(0.0f);
            for (uint k = 0u; k < KQ_LW; ++k) {
                const uint bits = kqjl_piece(kseg, wb, cg, k);
                for (uint n = 0u; n < KQ_PW / 4u; ++n) {
                    const uint g = 8u * k + n; // the lane's group
                    if (4u * g < KQ_CPL) {
                        s += S.qp[t0 + 16u * g + ((bits >> (4u * n)) & 15u)];
                    }
                }
            }
            acc[j] = s;
        }
        return;
    }
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
            const uint e = e0 + 32u * k;
            const uint bits = kqjl_piece(kseg, wb, cg, k);
            for (uint i = 0u; i < KQ_PW; ++i) {
                const bool on = ((bits >> i) & 1u) != 0u && 32u * k + i < KQ_CPL;
                pos += on ? S.qp[e + i] : float4(0.0f);
            }
        }
        acc[j] = 2.0f * pos - all;
    }
}
