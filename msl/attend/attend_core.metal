// Attention over a compressed cache, the shared core in MSL (../shared/spec/attention.md): the
// twin of wgsl/attend/attend_core.wgsl, same mapping (read it first: lanes, tiles, splits,
// bindings, dispatch); CPU reference src/cpu/attend.rs. Composed by src/attention/kernel.rs:
// this file, the key codec's hooks (msl/<codec>/attend_k.metal), the value codec's
// (attend_v.metal), attend_shared.metal, then attend_main.metal (the partials kernel) or
// attend_merge.metal. A SIMD group (32 lanes on Apple GPUs) is a slice: every cross-lane step
// is a simd_shuffle, no barrier inside the tile loop.
//
// What a key hook file defines:  typedef ... KParams; K_PREP, K_PREP_W (#define);
//   template <typename Sh> void k_prepare(constant AttendParams&, constant KParams&,
//       device const uint* kseg, device const uint* ktab, threadgroup Sh& S, uint lid, uint h);
//   template <typename Sh> void k_score(constant AttendParams&, constant KParams&,
//       device const uint* kseg, threadgroup const Sh& S, uint row, uint last, uint cg, uint h,
//       thread float4* acc /* [8] */);   (rows past `last` read row `last`)
//   optionally K_SHARED (#define): member declarations of its own threadgroup memory, added to
//   the partials kernel's (AttendKShared in attend_shared.metal; e.g. VecInfer's LUT)
// a value hook file:  typedef ... VParams; V_W, V_CPL, V_SPACE_OUT (#define); struct VState
//   with `float4 o[V_CPL]` (its accumulator; with V_SPACE_OUT the ring's rows join it);
//   void v_reset(thread VState&); void v_scale(thread VState&, float4);
//   float4 v_out(thread const VState&, uint i);
//   void v_accum(constant AttendParams&, constant VParams&, device const uint* vseg,
//       device const uint* vtab, thread VState&, uint row, uint last, uint cg, uint h,
//       thread const float4* p /* [8] */);
//   float v_value(..., device const uint* vseg, device const uint* vtab, uint row, uint last,
//       uint c, uint h)   (the prefill kernel's element reader)
//   template <typename Sh> void v_finish(constant AttendParams&, constant VParams&,
//       device const uint* vtab, threadgroup Sh& S, uint lid, uint h);
#include <metal_stdlib>
using namespace metal;

// Keep in sync with AttendParams in src/attention/plan.rs and wgsl/attend/attend_params.wgsl.
struct AttendParams {
    uint tq;
    uint hq;
    uint hkv;
    uint qg;
    uint q_pos0;
    uint window;
    uint sinks;
    float scale_log2;
    uint vec_total;
    uint vblocks;
    uint tok0;
    uint tok_end;
    uint qk;
    uint qv;
    uint c_end;
    uint r0;
    uint n_split_c;
    uint split_c;
    uint n_split_r;
    uint split_r;
    uint part_c;
    uint part_r;
    uint n_parts;
    uint n_parts_c;
    uint ring_cap_k;
    uint ring_cap_v;
    uint row_words;
    uint direct;
    uint t_total;
    uint pos_off;   // ATT_POS: the key segment's positions stream (attend_key_pos)
    uint pos_rows;
    uint evicted;
};

#define ATTEND_DIM ATT_DIM
#define ATTEND_SLICES (WORKGROUP_SIZE / 32u)
#define ATTEND_TILE 32u
#define ATTEND_R_CPL ((ATTEND_DIM + 7u) / 8u)
// Finite "minus infinity": 2^(NEG - m) is 0. Every exp2 whose argument may be that large is
// precise::exp2 (fast math may not get huge arguments right).
#define ATTEND_NEG (-1.0e30f)

// f16 bits (low half of h) -> f32.
static inline float attend_half(uint w, uint e) {
    return float(as_type<half>(ushort((e & 1u) != 0u ? (w >> 16u) : (w & 0xffffu))));
}

// The f16 rows' accumulator (ring splits; the f16 codec's values): channels cg·R_CPL.. .
struct RState {
    float4 o[ATTEND_R_CPL];
};

static inline void r_reset(thread RState& r) {
    for (uint i = 0u; i < ATTEND_R_CPL; ++i) {
        r.o[i] = float4(0.0f);
    }
}

static inline void r_scale(thread RState& r, float4 c) {
    for (uint i = 0u; i < ATTEND_R_CPL; ++i) {
        r.o[i] *= c;
    }
}

// A lane's partial scores of 8 f16 rows (first words w0[j] of `rows`): channels cg·R_CPL..
// of head h; qs is zero past D.
template <typename Sh>
static inline void f16_score(device const uint* rows, thread const uint* w0, threadgroup const Sh& S,
                             uint cg, uint h, thread float4* acc) {
    const uint c0 = cg * ATTEND_R_CPL;
    for (uint j = 0u; j < 8u; ++j) {
        float4 a = float4(0.0f);
        for (uint i = 0u; i < ATTEND_R_CPL; ++i) {
            const uint e = h * ATTEND_DIM + min(c0 + i, ATTEND_DIM - 1u);
            a += S.qs[c0 + i] * attend_half(rows[w0[j] + (e >> 1u)], e);
        }
        acc[j] = a;
    }
}

// Adds p·v of 8 f16 rows to the lane's channels of `o` (R_CPL of them): the value codec's
// accumulator where its space is the output space (V_SPACE_OUT), else an RState's.
static inline void f16_accum(device const uint* rows, thread const uint* w0, thread float4* o,
                             uint cg, uint h, thread const float4* p) {
    const uint c0 = cg * ATTEND_R_CPL;
    for (uint j = 0u; j < 8u; ++j) {
        for (uint i = 0u; i < ATTEND_R_CPL; ++i) {
            const uint e = h * ATTEND_DIM + min(c0 + i, ATTEND_DIM - 1u);
            o[i] += p[j] * attend_half(rows[w0[j] + (e >> 1u)], e);
        }
    }
}

// The first words of the rows of tokens pos0 .. pos0 + 7 in a ring of `cap` rows, clamped to
// [first, last] (the ring's tokens in the split): a token outside has weight 0 and its slot may
// hold anything (an older token, or nothing ever written: 0 × NaN would poison the sum).
static inline void attend_ring_rows(constant AttendParams& A, uint pos0, uint first, uint last, uint cap, thread uint* w0) {
    for (uint j = 0u; j < 8u; ++j) {
        w0[j] = (clamp(pos0 + j, first, last) % cap) * A.row_words;
    }
}

// The absolute position of the token in cache slot `slot` of KV head h (the twin of
// key_pos in wgsl/attend/attend_core.wgsl): the slot itself unless the cache evicted tokens
// (ATT_POS = 1, fixed for a layer's life): then the key segment's positions stream for slots
// below A.pos_rows, slot + A.evicted above.
static inline uint attend_key_pos(constant AttendParams& A, device const uint* kseg, uint slot,
                                  uint h) {
    if (ATT_POS == 1u) {
        if (slot < A.pos_rows) {
            return kseg[A.pos_off + slot * A.hkv + h];
        }
        return slot + A.evicted;
    }
    return slot;
}

static inline bool attend_visible(constant AttendParams& A, uint pos, uint p) {
    if (pos > p) {
        return false;
    }
    return A.window == 0u || pos + A.window > p || pos < A.sinks;
}
