// turboquant_dequant: x̂ = n_st · inverse-rotate(ŷ) of stored TurboQuant vectors (tools and
// tests). Twin of wgsl/turboquant/turboquant_dequant.wgsl (read it: one threadgroup per
// (token, head), the passes, the spec's order × c, × s_i, × n_st). CPU twin:
// src/cpu/turboquant/turboquant_dequant.rs.
//
// [[buffer(0)]] P:      TqParams (constant)
// [[buffer(1)]] codes:  uint [tokens][H][S][row_words]
// [[buffer(2)]] norms:  uint [tokens][ceil(H / 2)]
// [[buffer(3)]] tables: uint (signs, codebooks)
// [[buffer(4)]] out:    float [count][H][D]

static inline uint tq_stored_code(device const uint* codes, uint base, uint i) {
    const uint at = i * TQ_TB;
    const uint w = base + (at >> 5u);
    const uint off = at & 31u;
    const uint hi = off + TQ_TB > 32u ? codes[w + 1u] : 0u;
    return bits_code(codes[w], hi, off, TQ_TB);
}

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void turboquant_dequant(constant TqParams& P [[buffer(0)]],
                               device const uint* codes [[buffer(1)]],
                               device const uint* norms [[buffer(2)]],
                               device const uint* tables [[buffer(3)]],
                               device float* out [[buffer(4)]],
                               uint3 wg [[threadgroup_position_in_grid]],
                               uint3 nwg [[threadgroups_per_grid]],
                               uint lid [[thread_index_in_threadgroup]]) {
    threadgroup float cb[2u * TQ_TS * TQ_TN];
    threadgroup float xs[TQ_TP];
    const uint item = wg.y * nwg.x + wg.x;
    if (item >= P.items) {
        return; // uniform
    }
    const uint tok = item / P.heads;
    const uint h = item % P.heads;
    const uint t = P.seg_token + tok;
    tq_load_codebook(P, tables, cb, lid);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint row0 = (t * P.heads + h) * TQ_TS * TQ_RW;
    for (uint k = 0u; k < TQ_WPL; ++k) {
        const uint e = lid + k * WORKGROUP_SIZE;
        if (e < TQ_TP) {
            float y = tq_centroid(cb, tq_stored_code(codes, row0, e), 0u);
            if (TQ_TS == 2u) {
                y += tq_centroid(cb, tq_stored_code(codes, row0 + TQ_RW, e), 1u);
            }
            xs[e] = y;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint p = 0u; p < TQ_LOG2P; ++p) {
        const uint hh = 1u << p;
        float a[TQ_WPL];
        float b[TQ_WPL];
        for (uint k = 0u; k < TQ_WPL; ++k) {
            const uint e = min(lid + k * WORKGROUP_SIZE, TQ_TP - 1u);
            a[k] = xs[e];
            b[k] = xs[e ^ hh];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint k = 0u; k < TQ_WPL; ++k) {
            const uint e = lid + k * WORKGROUP_SIZE;
            if (e < TQ_TP) {
                xs[e] = (e & hh) != 0u ? b[k] - a[k] : a[k] + b[k];
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    const float n = tq_half(norms[t * P.norm_words + h / 2u], h & 1u);
    for (uint k = 0u; k < TQ_WPL; ++k) {
        const uint e = lid + k * WORKGROUP_SIZE;
        if (e < P.dim) {
            out[item * P.dim + e] = tq_flip(tables, xs[e] * P.inv_sqrt_p, h, e) * n;
        }
    }
}
