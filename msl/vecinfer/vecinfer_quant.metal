// vecinfer_quant: VecInfer's fused transform + argmin + packed indices
// (../shared/spec/vecinfer.md, "Quantize"). Twin of wgsl/vecinfer/vecinfer_quant_io.wgsl (read
// it: the dispatch, one threadgroup of 64 threads per (token block, head) item, and the steps)
// with the subgroup variant's reduction: a group of 8 lanes' candidates by simd_shuffle_xor at
// offsets 1, 2, 4 (8 consecutive threads lie in one 32-wide SIMD group). The distances are
// summed in index order, with no contraction (the emulated MSL must be bit-identical to the
// CPU). CPU twin: src/cpu/vecinfer/vecinfer_quant.rs.
//
// [[buffer(0)]] P:        ViParams (constant)
// [[buffer(1)]] ring:     uint [ring_tokens][in_row_words]
// [[buffer(2)]] incoming: uint [n][in_row_words]
// [[buffer(3)]] codes:    uint [tokens][H][row_words]   (segment)
// [[buffer(4)]] tables:   uint: keys λ [H][D], then the codebooks [H][C][d_s] from cb_offset (f32 bits)
#include <metal_stdlib>
using namespace metal;

// Keep in sync with ViParams in src/codecs/vecinfer/plans.rs.
struct ViParams {
    uint heads;
    uint dim;
    uint count;
    uint src_start;
    uint t_old;
    uint inc_start;
    uint ring_tokens;
    uint seg_token;
    uint in_row_words;
    uint row_words;
    uint items;
    uint cb_offset;
    float inv_sqrt_p;
    uint p0;
    uint p1;
    uint p2;
};

#define VP VI_P
#define VDS VI_DS
#define VC VI_C
#define VB VI_BITS
#define VNS (VI_P / VI_DS)
#define VRW ((VNS * VI_BITS + 31u) / 32u)
#define VGL 8u
#define VGROUPS (WORKGROUP_SIZE / VGL)
#define VROUNDS ((VNS + VGROUPS - 1u) / VGROUPS)
#define VRT (VROUNDS < 4u ? VROUNDS : 4u)   // rounds per pass (divides VROUNDS: powers of 2)
#define VPASSES (VROUNDS / VRT)

static inline float vi_input(constant ViParams& P, device const uint* ring, device const uint* incoming,
                             uint s, uint e) {
    const uint w = s < P.t_old ? ring[(s % P.ring_tokens) * P.in_row_words + (e >> 1u)]
                               : incoming[(s - P.inc_start) * P.in_row_words + (e >> 1u)];
    return float(as_type<half>(ushort((e & 1u) != 0u ? (w >> 16u) : (w & 0xffffu))));
}

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void vecinfer_quant(constant ViParams& P [[buffer(0)]],
                           device const uint* ring [[buffer(1)]],
                           device const uint* incoming [[buffer(2)]],
                           device uint* codes [[buffer(3)]],
                           device const uint* tables [[buffer(4)]],
                           uint3 wg [[threadgroup_position_in_grid]],
                           uint3 nwg [[threadgroups_per_grid]],
                           uint lid [[thread_index_in_threadgroup]]) {
    threadgroup float vcb[VC * VDS];
    threadgroup float vx[VP];
    threadgroup uint vidx[VNS];
    const uint item = wg.y * nwg.x + wg.x;
    if (item >= P.items) {
        return; // uniform: depends on the threadgroup only
    }
    const uint h = item % P.heads;
    const uint t0 = (item / P.heads) * VI_TPW;
    const uint grp = lid / VGL;
    const uint gl = lid % VGL;
    const uint cb0 = P.cb_offset + h * VC * VDS;
    for (uint i = lid; i < VC * VDS; i += WORKGROUP_SIZE) {
        vcb[i] = as_type<float>(tables[cb0 + i]);
    }
    for (uint k = 0u; k < VI_TPW; ++k) {
        const uint tok = t0 + k;
        if (tok >= P.count) {
            break; // uniform
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        // 1. Load (keys ÷ λ), zero-pad.
        for (uint e = lid; e < VP; e += WORKGROUP_SIZE) {
            float x = 0.0f;
            if (e < P.dim) {
                x = vi_input(P, ring, incoming, P.src_start + tok, h * P.dim + e);
                if (VI_KEYS == 1u) {
                    x = x / as_type<float>(tables[h * P.dim + e]); // @vi-lambda
                }
            }
            vx[e] = x;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        // 2. Butterflies.
        for (uint st = 1u; st < VP; st <<= 1u) {
            for (uint q = lid; q < VP / 2u; q += WORKGROUP_SIZE) {
                const uint i = ((q / st) * 2u * st) + (q % st);
                const float a = vx[i];
                const float b = vx[i + st];
                vx[i] = a + b;
                vx[i + st] = a - b;
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        // 3. Argmin, one sub-vector per group of 8 lanes per round; a pass takes VRT rounds,
        //    their sub-vectors in registers, each centroid read once for all of them.
        for (uint ps = 0u; ps < VPASSES; ++ps) {
            float x[VRT * VDS];
            for (uint r = 0u; r < VRT; ++r) {
                const uint svc = min((ps * VRT + r) * VGROUPS + grp, VNS - 1u);
                for (uint i = 0u; i < VDS; ++i) {
                    x[r * VDS + i] = vx[svc * VDS + i] * P.inv_sqrt_p;
                }
            }
            float best[VRT];
            uint arg[VRT];
            for (uint r = 0u; r < VRT; ++r) {
                best[r] = INFINITY;
                arg[r] = 0u;
            }
            for (uint c = gl; c < VC; c += VGL) {
                float cb[VDS];
                for (uint i = 0u; i < VDS; ++i) {
                    cb[i] = vcb[c * VDS + i];
                }
                for (uint r = 0u; r < VRT; ++r) {
                    float d = 0.0f;
                    for (uint i = 0u; i < VDS; ++i) {
                        const float e = x[r * VDS + i] - cb[i];
                        d += e * e;
                    }
                    if (d < best[r]) { // @vi-tie
                        best[r] = d;
                        arg[r] = c;
                    }
                }
            }
            for (uint r = 0u; r < VRT; ++r) {
                const uint sv = (ps * VRT + r) * VGROUPS + grp;
                float d = best[r];
                uint a = arg[r];
                for (uint o = 1u; o < VGL; o <<= 1u) {
                    const float od = simd_shuffle_xor(d, ushort(o));
                    const uint oi = simd_shuffle_xor(a, ushort(o));
                    if (od < d || (od == d && oi < a)) {
                        d = od;
                        a = oi;
                    }
                }
                if (gl == 0u && sv < VNS) {
                    vidx[sv] = a;
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        // 4. Packed row.
        for (uint w = lid; w < VRW; w += WORKGROUP_SIZE) {
            uint out = 0u;
            const uint lo = 32u * w;
            const uint first = lo / VB;
            const uint last = min((lo + 31u) / VB, VNS - 1u);
            for (uint i = first; i <= last; ++i) {
                const uint at = i * VB;
                const uint c = vidx[i];
                out |= at >= lo ? (c << (at - lo)) : (c >> (lo - at));
            }
            codes[((P.seg_token + tok) * P.heads + h) * VRW + w] = out;
        }
    }
}
