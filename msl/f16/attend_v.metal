// Attention hooks of the f16 codec, value side (msl/attend/attend_core.metal): rows of H·D
// f16, stream `rows` of the value segment at word VP.rows, accumulated as the ring's rows are
// (the output space: no finish). Twin of wgsl/f16/attend_v.wgsl; CPU twin
// src/cpu/f16/attend_v.rs.

// Keep in sync with `F16Uniform` in src/codecs/f16/mod.rs.
struct VF16Params {
    uint rows;
    uint p0;
    uint p1;
    uint p2;
};
typedef VF16Params VParams;
#define V_W ATTEND_DIM
#define V_CPL ATTEND_R_CPL
#define V_SPACE_OUT true

struct VState {
    float4 o[V_CPL];
};

static inline void v_reset(thread VState& s) {
    for (uint i = 0u; i < V_CPL; ++i) {
        s.o[i] = float4(0.0f);
    }
}

static inline void v_scale(thread VState& s, float4 c) {
    for (uint i = 0u; i < V_CPL; ++i) {
        s.o[i] *= c;
    }
}

static inline float4 v_out(thread const VState& s, uint i) {
    return s.o[i];
}

static inline void v_accum(constant AttendParams& A, constant VParams& VP, device const uint* vseg,
                           device const uint* vtab, thread VState& s, uint row, uint last, uint cg, uint h,
                           thread const float4* p) {
    uint w0[8];
    for (uint j = 0u; j < 8u; ++j) {
        w0[j] = VP.rows + min(row + j, last) * A.row_words;
    }
    f16_accum(vseg, w0, s.o, cg, h, p);
}

// Channel c of segment row `row` (clamped to `last`) of head h (the prefill kernel).
static inline float v_value(constant AttendParams& A, constant VParams& VP, device const uint* vseg,
                            device const uint* vtab, uint row, uint last, uint c, uint h) {
    const uint e = h * ATTEND_DIM + c;
    return attend_half(vseg[VP.rows + min(row, last) * A.row_words + (e >> 1u)], e);
}

// v of channels c .. c + 3 of row `row` of head h: two words (the prefill kernel's value tiles,
// where ATT_V_QUAD: c a multiple of 4, c + 3 < D, row within the segment; D even, so the first
// channel starts a word). Twin of the WGSL's v_quad.
#define ATT_V_QUAD (ATTEND_DIM % 2u == 0u)
static inline float4 v_quad(constant AttendParams& A, constant VParams& VP, device const uint* vseg,
                            uint row, uint c, uint h) {
    const uint w = VP.rows + row * A.row_words + ((h * ATTEND_DIM + c) >> 1u);
    return float4(attend_half(vseg[w], 0u), attend_half(vseg[w], 1u), attend_half(vseg[w + 1u], 0u),
                  attend_half(vseg[w + 1u], 1u));
}

template <typename Sh>
static inline void v_finish(constant AttendParams& A, constant VParams& VP, device const uint* vtab,
                            threadgroup Sh& S, uint lid, uint h) {}
