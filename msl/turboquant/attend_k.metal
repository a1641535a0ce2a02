// Attention hooks of TurboQuant, key side (msl/attend/attend_core.metal). Twin of
// wgsl/turboquant/attend_k.wgsl (read it: the rotated query, the lane's window of codes, the
// norm once per token); CPU twin src/cpu/turboquant/attend_k.rs. The centroids are read from
// this side's constant buffer (KP.cb; the WGSL twin copies them to workgroup memory, which an
// MSL hook has no place to declare). Specialized on ATT_KTQ_P, ATT_KTQ_LOG2P, ATT_KTQ_BITS,
// ATT_KTQ_STAGES, ATT_KTQ_C.

// Keep in sync with `TurboQuantCodec::attend_uniform` in src/codecs/turboquant/codec.rs.
struct KTqParams {
    uint codes;
    uint norms;
    uint p0;
    uint p1;
    float cb[KTQ_S * KTQ_N]; // centroids [stage][2^b]
};
typedef KTqParams KParams;
#define K_PREP true
#define K_PREP_W (8u * KTQ_CPL)

// The pieces: tq_attend_k_common.metal (concatenated before this file).

template <typename Sh>
static inline void k_prepare(constant AttendParams& A, constant KParams& KP, device const uint* kseg,
                             device const uint* ktab, threadgroup Sh& S, uint lid, uint h) {
    ktq_prepare(ktab, S, lid, h);
}

template <typename Sh>
static inline void k_score(constant AttendParams& A, constant KParams& KP, device const uint* kseg,
                           threadgroup const Sh& S, uint row, uint last, uint cg, uint h, thread float4* acc) {
    ktq_score(A, kseg, S, KP.cb, KP.codes, KP.norms, row, last, cg, h, acc);
}
