// qjl_encode: QJL keys, the norm and the sign bits of S·k (../shared/spec/qjl.md). Twin of
// wgsl/qjl/qjl_encode_io.wgsl (read it: the tiling, one threadgroup of 128 threads per
// (32-token tile, head pair) item, and the steps) with the subgroup variant's ballot: the sign
// bits of (row i, token j) by simd_ballot; Apple SIMD groups are 32 wide, so SIMD group tg
// holds rows rg = 0..31 of token group tg: its first lane writes the whole word, no atomics.
// Every product and norm is summed in index order (the reference's order: the emulated MSL
// must be bit-identical to the CPU). CPU twin: src/cpu/qjl/qjl_encode.rs.
//
// [[buffer(0)]] P:        QjlParams (constant)
// [[buffer(1)]] ring:     uint [ring_tokens][in_row_words]
// [[buffer(2)]] incoming: uint [n][in_row_words]
// [[buffer(3)]] signs:    uint [tokens][H][m/32]      (segment)
// [[buffer(4)]] norms:    uint [tokens][ceil(H / 2)]  (segment)
// [[buffer(5)]] tables:   uint: Sᵀ [D][m] f32 bits (gpu_sketch_table)
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
#define QT 32u
#define QTL 8u
#define QRI (QSW < 4u ? QSW : 4u)
#define QRB (32u * QRI)
#define QNB ((QM + QRB - 1u) / QRB)
#define QDC 16u
#define QNC ((QD + QDC - 1u) / QDC)
#define QSP (QRB + 1u)
#define QACC (QRI * QTL)

static inline float qjl_input(constant QjlParams& P, device const uint* ring, device const uint* incoming,
                              uint s, uint e) {
    const uint w = s < P.t_old ? ring[(s % P.ring_tokens) * P.in_row_words + (e >> 1u)]
                               : incoming[(s - P.inc_start) * P.in_row_words + (e >> 1u)];
    return float(as_type<half>(ushort((e & 1u) != 0u ? (w >> 16u) : (w & 0xffffu))));
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
    threadgroup float qs[QDC * QSP];
    threadgroup float4 qx4[QDC * QT / 4u]; // [dc][token of the tile], 4 tokens a vector
    threadgroup uint qw[QT * QRI];
    const uint item = wg.y * nwg.x + wg.x;
    if (item >= P.items) {
        return; // uniform: depends on the threadgroup only
    }
    const uint t0 = (item / P.norm_words) * QT;
    const uint pair = item % P.norm_words;
    const uint rg = lid % 32u;
    const uint tg = lid / 32u;
    uint nb[2] = {0u, 0u};
    for (uint v = 0u; v < 2u; ++v) {
        const uint h = 2u * pair + v;
        const bool live = h < P.heads;
        float ss = 0.0f;
        for (uint rb = 0u; rb < QNB; ++rb) {
            float acc[QACC];
            for (uint a = 0u; a < QACC; ++a) {
                acc[a] = 0.0f;
            }
            for (uint c = 0u; c < QNC; ++c) {
                threadgroup_barrier(mem_flags::mem_threadgroup);
                for (uint e = lid; e < QRB * QDC; e += WORKGROUP_SIZE) {
                    const uint d = c * QDC + e / QRB;
                    const uint row = min(rb * QRB + e % QRB, QM - 1u); // @qjl-row
                    qs[(e / QRB) * QSP + e % QRB] = d < QD ? as_type<float>(tables[d * QM + row]) : 0.0f;
                }
                for (uint e = lid; e < QT * QDC; e += WORKGROUP_SIZE) {
                    const uint t = e / QDC;
                    const uint d = c * QDC + e % QDC;
                    const bool in = live && d < QD && t0 + t < P.count;
                    const uint k = (e % QDC) * QT + t;
                    qx4[k / 4u][k % 4u] = in ? qjl_input(P, ring, incoming, P.src_start + t0 + t, h * QD + d) : 0.0f;
                }
                threadgroup_barrier(mem_flags::mem_threadgroup);
                for (uint dc = 0u; dc < QDC; ++dc) {
                    const float4 xa = qx4[(dc * QT + tg * QTL) / 4u];
                    const float4 xb = qx4[(dc * QT + tg * QTL) / 4u + 1u];
                    const float xs[QTL] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
                    for (uint i = 0u; i < QRI; ++i) {
                        const float s = qs[dc * QSP + rg + 32u * i];
                        for (uint j = 0u; j < QTL; ++j) {
                            acc[i * QTL + j] += s * xs[j];
                        }
                    }
                }
                if (rb == 0u && lid < QT) {
                    for (uint dc = 0u; dc < QDC; ++dc) {
                        const float x = qx4[(dc * QT + lid) / 4u][lid % 4u];
                        ss += x * x;
                    }
                }
            }
            for (uint i = 0u; i < QRI; ++i) {
                for (uint j = 0u; j < QTL; ++j) {
                    const bool bit = acc[i * QTL + j] >= 0.0f;
                    const uint bits = uint(ulong(simd_ballot(bit)) & 0xffffffffu); // @qjl-ballot
                    if (lane == 0u) {
                        qw[(tg * QTL + j) * QRI + i] = bits;
                    }
                }
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
            for (uint e = lid; e < QT * QRI; e += WORKGROUP_SIZE) {
                const uint t = e / QRI;
                const uint w = rb * QRI + e % QRI;
                if (live && w < QSW && t0 + t < P.count) { // @qjl-tail
                    signs[((P.seg_token + t0 + t) * P.heads + h) * QSW + w] = qw[e];
                }
            }
        }
        nb[v] = uint(as_type<ushort>(half(sqrt(ss))));
    }
    if (lid < QT && t0 + lid < P.count) {
        norms[(P.seg_token + t0 + lid) * P.norm_words + pair] = nb[0] | (nb[1] << 16u);
    }
}
