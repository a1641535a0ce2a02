// Attention over a compressed cache, shared MSL core (../shared/spec/attention.md). Twin of
// wgsl/attend/attend_params.wgsl + wgsl/attend/attend_core.wgsl; CPU reference src/cpu/attend.rs.
// Concatenated before msl/attend/attend_kivi.metal and msl/attend/attend_f16.metal by src/gpu/registry.rs
// (after msl/kivi/kivi_common.metal for attend_kivi).
//
// A codec file defines `struct AttendCodec` (its device pointers; `static constexpr bool
// kStages`), `struct AttendStage` (its threadgroup staging memory, if any) and
//   float codec_key(thread const AttendCodec&, constant AttendParams&,
//                   threadgroup const AttendStage&, uint pos, uint h, uint d)
//   float codec_value(... likewise)
//   void codec_stage(thread const AttendCodec&, constant AttendParams&, threadgroup AttendStage&,
//                    uint t0, uint n, uint h, uint lid)   // called when kStages, see the WGSL
// (k̂ / v̂ of absolute token pos, KV head h, channel d, reconstructed in registers), then its
// kernel, which declares the threadgroup memory (`threadgroup AttendShared sh;` and
// `threadgroup AttendStage st;`) and calls attend_main.
//
// [[buffer(0)]] A:        AttendParams (constant)            keep in sync with src/attention/gpu.rs
// [[buffer(1)]] q:        float [Tq][Hq][D]
// [[buffer(2)]] partials: float [Tq][Hq][nc_total][D + 2]   (m, l, acc[D]) per chunk
// [[buffer(3..)]]         the codec's buffers
//
// Dispatch: one threadgroup of 128 threads (4 SIMD groups of 32 = the WGSL core's 4 slices)
// per (block of ATT_ROWS query rows b, KV head h, chunk c), linear index (b * Hkv + h) *
// n_chunks + c; the block's query vectors (its rows × the Hq/Hkv query heads of h, vector
// v = row v / qg, head v % qg; at most ATTEND_QV_MAX) share every loaded key and value. A
// chunk is `chunk_tokens` consecutive positions of this dispatch's region [region_start,
// region_end); tiles of 32 tokens: scores (4 SIMD groups split D), online softmax per query
// vector (SIMD group = vector, four at a time; reductions by simd_shuffle_xor butterflies),
// value accumulation (one thread per channel). ATT_ROWS is a specialization (#define
// prepended by src/gpu/registry.rs), chosen per call by src/attention/gpu.rs.
#include <metal_stdlib>
using namespace metal;

// Keep in sync with AttendParams in src/attention/gpu.rs and wgsl/attend/attend_params.wgsl.
struct AttendParams {
    uint tq;
    uint hq;
    uint hkv;
    uint dim;
    uint qgroup;       // Hq / Hkv (<= 8)
    uint q_pos0;       // position of query row 0 = T - Tq
    uint window;       // 0: no sliding window
    uint sinks;
    float scale;
    uint chunk_tokens;
    uint n_chunks;     // chunks in this dispatch
    uint chunk_base;   // global index of this dispatch's first chunk
    uint nc_total;     // chunks over all dispatches of this call
    uint region_start; // absolute position of the region's first token
    uint region_end;
    uint seg_offset;   // row (token) index of region_start inside the codec's buffers
    uint ring_tokens;  // f16 codec: ring capacity (0: rows are linear)
    uint kbits;
    uint kgroup;
    uint kgroup_words;
    uint vbits;
    uint vgroup;
    uint vgroup_words;
    uint vrow_words;
    uint vn_groups;
    uint row_words;    // f16 codec: words per token row (H*D halves)
    uint pad0;
    uint pad1;
};

#define ATTEND_TILE 32u
#define ATTEND_QV_MAX 16u
#define ATTEND_D_MAX 256u
// Specialization (src/attention/gpu.rs): ATT_DIM = D, ATT_QG = Hq / Hkv, ATT_ROWS = query rows
// per threadgroup; they size the threadgroup memory. attend_merge includes this file for
// AttendParams only and defines none of them.
#ifdef ATT_ROWS
#define ATTEND_QV (ATT_QG * ATT_ROWS)
#define ATTEND_DIM ATT_DIM
#else
#define ATTEND_QV 1u
#define ATTEND_DIM 1u
#define ATT_ROWS 1u
#endif
#define ATTEND_THREADS 128u
// Finite "minus infinity", as in the WGSL. Every exp whose argument may involve it is
// precise::exp: under fast math exp(x) may be computed as exp2(x * log2(e)), and
// -3e38 * log2(e) overflows to -inf, where fast exp2 is not guaranteed to give 0.
#define ATTEND_NEG (-3.0e38f)

// Threadgroup memory of one threadgroup (the host keeps it within the device's limit when it
// picks ATT_ROWS), declared once in the kernel.
struct AttendShared {
    float qsh[ATTEND_QV * ATTEND_DIM];          // [QV][D] scaled queries
    float red[ATTEND_QV * 4u * ATTEND_TILE];    // [QV][4][TILE] partial dots
    float psh[ATTEND_QV * ATTEND_TILE];         // [QV][TILE] softmax weights
    float m_run[ATTEND_QV];
    float l_run[ATTEND_QV];
    float corr_sh[ATTEND_QV];
};

// f16 bits (low half of h) -> f32.
static inline float attend_half_to_float(uint h) {
    return float(as_type<half>(ushort(h & 0xffffu)));
}

// Reductions over one SIMD group (32 lanes = one slice): xor butterflies leave the same
// bits in every lane (each step adds the same two operands, in either order).
static inline float attend_slice_max(float v) {
    for (ushort off = 16; off > 0; off >>= 1) {
        v = max(v, simd_shuffle_xor(v, off));
    }
    return v;
}

static inline float attend_slice_sum(float v) {
    for (ushort off = 16; off > 0; off >>= 1) {
        v += simd_shuffle_xor(v, off);
    }
    return v;
}

static inline bool attend_is_visible(constant AttendParams& A, uint pos, uint p, uint c_end) {
    // pos < c_end: never count a token of the next chunk (chunk_tokens is a multiple of the
    // tile on the host, so this only guards the kernel against other hosts).
    if (pos > p || pos >= A.region_end || pos >= c_end) {
        return false;
    }
    if (A.window == 0u) {
        return true;
    }
    return pos + A.window > p || pos < A.sinks;
}

// lid: thread index in the threadgroup; slice/lane: SIMD group and lane (lid = slice * 32 +
// lane on Apple GPUs); wid: linear threadgroup index. A template on the codec type so that
// codec_key / codec_value, defined after this file by the kernel, are found at instantiation
// (argument-dependent lookup) and attend_merge, which includes this file for AttendParams,
// instantiates nothing.
template <typename Codec, typename Stage>
static void attend_main(constant AttendParams& A,
                        device const float* q,
                        device float* partials,
                        thread const Codec& codec,
                        threadgroup AttendShared& S,
                        threadgroup Stage& st,
                        uint lid,
                        uint slice,
                        uint lane,
                        uint wid) {
    static_assert(ATTEND_QV >= 1u && ATTEND_QV <= ATTEND_QV_MAX, "ATT_QG * ATT_ROWS out of range");
    const uint per_block = A.hkv * A.n_chunks;
    if (wid >= ((A.tq + ATT_ROWS - 1u) / ATT_ROWS) * per_block) {
        return; // uniform: depends on the threadgroup only
    }
    const uint c = wid % A.n_chunks;
    const uint h = (wid / A.n_chunks) % A.hkv;
    const uint i0 = (wid / per_block) * ATT_ROWS;
    const uint rows = min(ATT_ROWS, A.tq - i0);
    const uint p_first = A.q_pos0 + i0; // position of the block's first query row
    const uint p_last = p_first + rows - 1u;
    const uint d_n = A.dim;
    const uint qg = A.qgroup;
    const uint qv = ATTEND_QV; // == qg * ATT_ROWS (A.qgroup == ATT_QG)

    // Query vectors of the block, scaled once (rows past Tq: zeros, never output).
    for (uint x = lid; x < qv * d_n; x += ATTEND_THREADS) {
        const uint v = x / d_n;
        const uint dd = x % d_n;
        const uint r = v / qg;
        S.qsh[v * ATTEND_DIM + dd] =
            r < rows ? q[((i0 + r) * A.hq + h * qg + v % qg) * d_n + dd] * A.scale : 0.0f;
    }
    if (lid < ATTEND_QV) {
        S.m_run[lid] = ATTEND_NEG;
        S.l_run[lid] = 0.0f;
        S.corr_sh[lid] = 1.0f;
    }
    float acc[2u * ATTEND_QV]; // [QV][D_MAX / 128]
    for (uint x = 0u; x < 2u * ATTEND_QV; ++x) {
        acc[x] = 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    const uint c_start = A.region_start + c * A.chunk_tokens;
    const uint c_end = min(c_start + A.chunk_tokens, A.region_end);
    const uint part_len = (d_n + 3u) / 4u;
    for (uint t0 = c_start; t0 < c_end; t0 += ATTEND_TILE) {
        // Skip tiles no query row of the block can see (uniform per threadgroup).
        const uint t_last = min(t0 + ATTEND_TILE, c_end) - 1u;
        bool seen = t0 <= p_last;
        if (A.window != 0u) {
            seen = seen && (t_last + A.window > p_first || t0 < A.sinks);
        }
        if (!seen) {
            continue;
        }
        // 0. A staging codec copies the tile's packed words into threadgroup memory (the
        // previous seen tile ended with a barrier, so every thread is done reading it).
        if (Codec::kStages) {
            codec_stage(codec, A, st, t0, t_last + 1u - t0, h, lid);
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        // 1. Scores: thread (slice, lane) = (part of D, token t0 + lane).
        const uint pos = t0 + lane;
        // A token of the chunk some row may see (each vector's own visibility, window
        // included, is applied in the softmax below).
        const bool readable = pos < c_end && pos < A.region_end && pos <= p_last;
        const uint d0 = slice * part_len;
        const uint d1 = min(d0 + part_len, d_n);
        float dots[ATTEND_QV];
        for (uint g = 0u; g < ATTEND_QV; ++g) {
            dots[g] = 0.0f;
        }
        if (readable) {
            for (uint dd = d0; dd < d1; ++dd) {
                const float k = codec_key(codec, A, st, pos, h, dd);
                for (uint g = 0u; g < qv; ++g) {
                    dots[g] += S.qsh[g * ATTEND_DIM + dd] * k;
                }
            }
        }
        for (uint g = 0u; g < qv; ++g) {
            S.red[(g * 4u + slice) * ATTEND_TILE + lane] = dots[g];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        // 2. Online softmax: SIMD group = query vector (four at a time), lane = token.
        for (uint g0 = 0u; g0 < qv; g0 += 4u) {
            const uint g = g0 + slice;
            const bool live = g < qv && g / qg < rows;
            const bool vis = live && attend_is_visible(A, pos, p_first + g / qg, c_end);
            float s = ATTEND_NEG;
            if (live && vis) {
                const uint b = g * 4u * ATTEND_TILE + lane;
                s = S.red[b] + S.red[b + ATTEND_TILE] + S.red[b + 2u * ATTEND_TILE] +
                    S.red[b + 3u * ATTEND_TILE];
            }
            float m_old = ATTEND_NEG;
            if (live) {
                m_old = S.m_run[g];
            }
            const float m_tile = attend_slice_max(s);
            const float m_new = max(m_old, m_tile);
            float w = 0.0f;
            if (live && vis) {
                w = exp(s - m_new); // s is a real score and m_new >= s
            }
            const float l_tile = attend_slice_sum(w);
            // every lane has read m_run before lane 0 updates it
            threadgroup_barrier(mem_flags::mem_threadgroup);
            if (live) {
                S.psh[g * ATTEND_TILE + lane] = w;
                if (lane == 0u) {
                    const float corr = precise::exp(m_old - m_new);
                    S.corr_sh[g] = corr;
                    S.l_run[g] = S.l_run[g] * corr + l_tile;
                    S.m_run[g] = m_new;
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        // 3. Values: thread = channel(s); every token of the tile, every query vector.
        const uint n_tile = min(ATTEND_TILE, c_end - t0);
        for (uint k = 0u; k * ATTEND_THREADS < d_n; ++k) {
            const uint dd = lid + ATTEND_THREADS * k;
            if (dd < d_n) {
                for (uint g = 0u; g < qv; ++g) {
                    acc[g * 2u + k] *= S.corr_sh[g];
                }
                for (uint j = 0u; j < n_tile; ++j) {
                    if (S.psh[j] != 0.0f || qv > 1u) {
                        const float v = codec_value(codec, A, st, t0 + j, h, dd);
                        for (uint g = 0u; g < qv; ++g) {
                            acc[g * 2u + k] += S.psh[g * ATTEND_TILE + j] * v;
                        }
                    }
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    // 4. This chunk's (m, l, acc) per query vector of the block's rows.
    const uint stride = d_n + 2u;
    for (uint g = 0u; g < rows * qg; ++g) {
        const uint pi =
            (((i0 + g / qg) * A.hq + h * qg + g % qg) * A.nc_total + A.chunk_base + c) * stride;
        if (lid == 0u) {
            partials[pi] = S.m_run[g];
            partials[pi + 1u] = S.l_run[g];
        }
        for (uint k = 0u; k * ATTEND_THREADS < d_n; ++k) {
            const uint dd = lid + ATTEND_THREADS * k;
            if (dd < d_n) {
                partials[pi + 2u + dd] = acc[g * 2u + k];
            }
        }
    }
}
