// Attention hooks of QJL keys (msl/attend/attend_core.metal). Twin of wgsl/qjl/attend_k.wgsl
// (read it: the sketched query with √(π/2)/m folded in, a masked sum per sign word, the norm
// once per token); CPU twin src/cpu/qjl/attend_k.rs. Specialized on ATT_KQJL_M, ATT_KQJL_C.

// Keep in sync with the default `Codec::attend_uniform` (the streams' first words).
struct KQjlParams {
    uint signs;
    uint norms;
    uint p0;
    uint p1;
};
typedef KQjlParams KParams;
#define K_PREP true
#define K_PREP_W KQ_PREP_W

// The pieces: qjl_attend_k_common.metal (concatenated before this file).

template <typename Sh>
static inline void k_prepare(constant AttendParams& A, constant KParams& KP, device const uint* kseg,
                             device const uint* ktab, threadgroup Sh& S, uint lid, uint h) {
    kqjl_prepare(ktab, S, lid, 0u, 0u);
}

template <typename Sh>
static inline void k_score(constant AttendParams& A, constant KParams& KP, device const uint* kseg,
                           threadgroup const Sh& S, uint row, uint last, uint cg, uint h, thread float4* acc) {
    kqjl_signed(A, kseg, S, KP.signs, 0u, row, last, cg, h, acc);
    const uint nwn = (A.hkv + 1u) / 2u;
    for (uint j = 0u; j < 8u; ++j) {
        const uint r = min(row + j, last);
        const uint nw = kseg[KP.norms + r * nwn + (h >> 1u)];
        acc[j] *= float(as_type<half>(ushort((h & 1u) != 0u ? (nw >> 16u) : (nw & 0xffffu))));
    }
}
