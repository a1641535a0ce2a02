// Attention hooks of the f16 codec, key side (msl/attend/attend_core.metal): rows of H·D f16,
// stream `rows` of the key segment at word KP.rows. Twin of wgsl/f16/attend_k.wgsl; CPU twin
// src/cpu/f16/attend_k.rs.

// Keep in sync with `F16Uniform` in src/codecs/f16/mod.rs.
struct KF16Params {
    uint rows;
    uint p0;
    uint p1;
    uint p2;
};
typedef KF16Params KParams;
#define K_PREP false
#define K_PREP_W 1u

template <typename Sh>
static inline void k_prepare(constant AttendParams& A, constant KParams& KP, device const uint* kseg,
                             device const uint* ktab, threadgroup Sh& S, uint lid, uint h) {}

template <typename Sh>
static inline void k_score(constant AttendParams& A, constant KParams& KP, device const uint* kseg,
                           threadgroup const Sh& S, uint row, uint last, uint cg, uint h, thread float4* acc) {
    uint w0[8];
    for (uint j = 0u; j < 8u; ++j) {
        w0[j] = KP.rows + min(row + j, last) * A.row_words;
    }
    f16_score(kseg, w0, S, cg, h, acc);
}

// Channel c of segment row `row` (clamped to `last`) of head h (the prefill kernel).
static inline float k_value(constant AttendParams& A, constant KParams& KP, device const uint* kseg,
                            uint row, uint last, uint c, uint h) {
    const uint e = h * ATTEND_DIM + c;
    return attend_half(kseg[KP.rows + min(row, last) * A.row_words + (e >> 1u)], e);
}
