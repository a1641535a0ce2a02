// qjl_encode: QJL keys, the norm and the sign bits of S·k (../shared/spec/qjl.md). Twin of
// wgsl/qjl/qjl_encode_io.wgsl (read it: the dispatch, one threadgroup of 64 threads per
// (token, head pair) item, and the steps) with the subgroup variant's ballot: a pass's sign
// bits by simd_ballot, the SIMD group's first lane writing its 32 rows' word (Apple SIMD
// groups are 32 wide: one word each, no atomics). The norm is thread 0's sum of squares in
// index order (the reference's order: the emulated MSL must be bit-identical to the CPU).
// CPU twin: src/cpu/qjl/qjl_encode.rs.
//
// [[buffer(0)]] P:        QjlParams (constant)
// [[buffer(1)]] ring:     uint [ring_tokens][in_row_words]
// [[buffer(2)]] incoming: uint [n][in_row_words]
// [[buffer(3)]] signs:    uint [tokens][H][m/32]      (segment)
// [[buffer(4)]] norms:    uint [tokens][ceil(H / 2)]  (segment)
// [[buffer(5)]] tables:   uint: S [m][D] f32 bits
#include <metal_stdlib>
using namespace metal;

// Keep in sync with QjlParams in src/codecs/qjl/plans.rs.
struct QjlParams {
    uint heads;
    uint dim;
    uint count;
    uint src_start;
    uint t_old;
    uint inc_start;
    uint ring_tokens;
    uint seg_token;
    uint in_row_words;
    uint sign_words;
    uint norm_words;
    uint items;
    uint p0;
    uint p1;
    uint p2;
    uint p3;
};

#define QD QJL_DIM
#define QM QJL_M
#define QSW (QJL_M / 32u)
#define QIT ((QJL_M + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE)

static inline float qjl_input(constant QjlParams& P, device const uint* ring, device const uint* incoming,
                              uint s, uint e) {
    const uint w = s < P.t_old ? ring[(s % P.ring_tokens) * P.in_row_words + (e >> 1u)]
                               : incoming[(s - P.inc_start) * P.in_row_words + (e >> 1u)];
    return float(as_type<half>(ushort((e & 1u) != 0u ? (w >> 16u) : (w & 0xffffu))));
}

static inline float qjl_row_dot(device const uint* tables, threadgroup const float* qx, uint r) {
    const uint base = min(r, QM - 1u) * QD; // @qjl-row
    float a = 0.0f;
    for (uint d = 0u; d < QD; ++d) {
        a += as_type<float>(tables[base + d]) * qx[d];
    }
    return a;
}

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void qjl_encode(constant QjlParams& P [[buffer(0)]],
                       device const uint* ring [[buffer(1)]],
                       device const uint* incoming [[buffer(2)]],
                       device uint* signs [[buffer(3)]],
                       device uint* norms [[buffer(4)]],
                       device const uint* tables [[buffer(5)]],
                       uint3 wg [[threadgroup_position_in_grid]],
                       uint3 nwg [[threadgroups_per_grid]],
                       uint lid [[thread_index_in_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float qx[QD];
    threadgroup uint qw[QSW];
    threadgroup float nsh[1];
    const uint item = wg.y * nwg.x + wg.x;
    if (item >= P.items) {
        return; // uniform: depends on the threadgroup only
    }
    const uint tok = item / P.norm_words;
    const uint pair = item % P.norm_words;
    uint nb[2] = {0u, 0u};
    for (uint v = 0u; v < 2u; ++v) {
        const uint h = 2u * pair + v;
        const bool live = h < P.heads;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint d = lid; d < QD; d += WORKGROUP_SIZE) {
            qx[d] = live ? qjl_input(P, ring, incoming, P.src_start + tok, h * QD + d) : 0.0f;
        }
        for (uint w = lid; w < QSW; w += WORKGROUP_SIZE) {
            qw[w] = 0u;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (lid == 0u) {
            float ss = 0.0f;
            for (uint d = 0u; d < QD; ++d) {
                ss += qx[d] * qx[d];
            }
            nsh[0] = sqrt(ss);
        }
        for (uint it = 0u; it < QIT; ++it) {
            const uint r = it * WORKGROUP_SIZE + lid;
            const float dot = qjl_row_dot(tables, qx, r);
            const bool bit = r < QM && dot >= 0.0f; // @qjl-tail
            const uint bits = uint(ulong(simd_ballot(bit)) & 0xffffffffu); // @qjl-ballot
            if (lane == 0u && bits != 0u) {
                qw[min(r >> 5u, QSW - 1u)] |= bits;
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint w = lid; w < QSW; w += WORKGROUP_SIZE) {
            if (live) {
                signs[((P.seg_token + tok) * P.heads + h) * QSW + w] = qw[w];
            }
        }
        nb[v] = uint(as_type<ushort>(half(nsh[0])));
    }
    if (lid == 0u) {
        norms[(P.seg_token + tok) * P.norm_words + pair] = nb[0] | (nb[1] << 16u);
    }
}
