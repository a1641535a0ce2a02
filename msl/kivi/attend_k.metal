// Attention hooks of KIVI, key side (msl/attend/attend_core.metal): packed codes per channel
// along tokens, streams `codes` (word KP.codes) and `params` (word KP.params) of the key
// segment. Twin of wgsl/kivi/attend_k.wgsl (read it: the a·x + β folding, the fast and the
// token-by-token paths); CPU twin src/cpu/kivi/attend_k.rs. Specialized on ATT_KBITS,
// ATT_KGROUP, ATT_KPARAMS_F16.

// Keep in sync with `KiviUniform` in src/codecs/kivi/codec.rs.
struct KKiviParams {
    uint codes;
    uint params;
    uint p0;
    uint p1;
};
typedef KKiviParams KParams;
#define K_PREP false
#define K_PREP_W 1u
#define KIVI_KB ATT_KBITS
#define KIVI_KG ATT_KGROUP
#define KIVI_KGW ((KIVI_KG * KIVI_KB + 31u) / 32u)
#define KIVI_K_MASK ((1u << KIVI_KB) - 1u)
#define KIVI_K_POW2 (KIVI_KB == 1u || KIVI_KB == 2u || KIVI_KB == 4u || KIVI_KB == 8u)
#define KIVI_K_FAST (KIVI_KG % 8u == 0u && KIVI_K_POW2)

template <typename Sh>
static inline void k_prepare(constant AttendParams& A, constant KParams& KP, device const uint* kseg,
                             device const uint* ktab, threadgroup Sh& S, uint lid, uint h) {}

static inline float2 kivi_k_pair(constant KParams& KP, device const uint* kseg, uint gi) {
    if (ATT_KPARAMS_F16 == 1u) {
        const uint w = kseg[KP.params + gi];
        return float2(kivi_f16_to_float(w), kivi_f16_to_float(w >> 16u));
    }
    const uint w = KP.params + 2u * gi;
    return float2(as_type<float>(kseg[w]), as_type<float>(kseg[w + 1u]));
}

// 1 + c / 2^b for code j of `w` (bits j·b ..): the code moved into the mantissa's top bits.
static inline float kivi_kx(uint w, uint j) {
    return bits_unit(w, j * KIVI_KB, KIVI_KB);
}

template <typename Sh>
static inline void k_score(constant AttendParams& A, constant KParams& KP, device const uint* kseg,
                           threadgroup const Sh& S, uint row, uint last, uint cg, uint h, thread float4* acc) {
    for (uint j = 0u; j < 8u; ++j) {
        acc[j] = float4(0.0f);
    }
    if (KIVI_K_FAST) {
        const uint blk = row / KIVI_KG;
        const uint bit0 = (row % KIVI_KG) * KIVI_KB;
        float4 bias = float4(0.0f);
        for (uint i = 0u; i < ATTEND_R_CPL; ++i) {
            const uint c = cg * ATTEND_R_CPL + i;
            const uint gi = (blk * A.hkv + h) * ATTEND_DIM + min(c, ATTEND_DIM - 1u);
            const float2 pr = kivi_k_pair(KP, kseg, gi);
            const float a = pr.x * float(1u << KIVI_KB);
            const float4 qa = S.qs[c] * a; // qs is 0 past D
            bias += S.qs[c] * (pr.y - a);
            const uint w = KP.codes + gi * KIVI_KGW + (bit0 >> 5u);
            if (KIVI_KB == 8u) {
                const uint w0 = kseg[w];
                const uint w1 = kseg[w + 1u];
                for (uint j = 0u; j < 4u; ++j) {
                    acc[j] += qa * kivi_kx(w0, j);
                    acc[j + 4u] += qa * kivi_kx(w1, j);
                }
            } else {
                const uint bits = kseg[w] >> (bit0 & 31u);
                for (uint j = 0u; j < 8u; ++j) {
                    acc[j] += qa * kivi_kx(bits, j);
                }
            }
        }
        for (uint j = 0u; j < 8u; ++j) {
            acc[j] += bias;
        }
        return;
    }
    for (uint j = 0u; j < 8u; ++j) {
        const uint r = min(row + j, last);
        const uint blk = r / KIVI_KG;
        for (uint i = 0u; i < ATTEND_R_CPL; ++i) {
            const uint c = cg * ATTEND_R_CPL + i;
            const uint gi = (blk * A.hkv + h) * ATTEND_DIM + min(c, ATTEND_DIM - 1u);
            const float2 pr = kivi_k_pair(KP, kseg, gi);
            const uint code = kivi_get_code(kseg, KP.codes + gi * KIVI_KGW, r % KIVI_KG, KIVI_KB);
            acc[j] += S.qs[c] * kivi_reconstruct(code, pr.x, pr.y);
        }
    }
}

// k̂ of channel c of segment row `row` (clamped to `last`) of head h, as the CPU reference
// reconstructs it (the prefill kernel). Twin of wgsl/kivi/attend_k.wgsl's k_value.
static inline float k_value(constant AttendParams& A, constant KParams& KP, device const uint* kseg,
                            uint row, uint last, uint c, uint h) {
    const uint r = min(row, last);
    const uint gi = ((r / KIVI_KG) * A.hkv + h) * ATTEND_DIM + c;
    const float2 pr = kivi_k_pair(KP, kseg, gi);
    const uint code = kivi_get_code(kseg, KP.codes + gi * KIVI_KGW, r % KIVI_KG, KIVI_KB);
    return kivi_reconstruct(code, pr.x, pr.y);
}

// k̂ of rows row .. row + 3 of channel c of head h (the prefill kernel's key tiles, where
// ATT_K_QUAD: row a multiple of 4, row + 3 at most the last row): one load of the codes and
// one of the params for the four, the same values as k_value's. Twin of the WGSL's k_quad.
#define ATT_K_QUAD (KIVI_KG % 4u == 0u && KIVI_K_POW2)
static inline float4 k_quad(constant AttendParams& A, constant KParams& KP, device const uint* kseg,
                            uint row, uint c, uint h) {
    const uint gi = ((row / KIVI_KG) * A.hkv + h) * ATTEND_DIM + c;
    const float2 pr = kivi_k_pair(KP, kseg, gi);
    const uint bit0 = (row % KIVI_KG) * KIVI_KB;
    const uint w = kseg[KP.codes + gi * KIVI_KGW + (bit0 >> 5u)] >> (bit0 & 31u);
    float4 x;
    for (uint j = 0u; j < 4u; ++j) {
        x[j] = kivi_reconstruct((w >> (j * KIVI_KB)) & KIVI_K_MASK, pr.x, pr.y);
    }
    return x;
}
