// kivi_quant_values_thread: per-token value quantization for value groups of at most 64
// channels, one thread per (token, head, group), the group in registers. Twin of
// wgsl/kivi/kivi_quant_values_thread.wgsl; same bindings and geometry. Specialized on VALUE_GROUP
// and VALUE_BITS (#defines prepended by the host), so the loops unroll.
//
// [[buffer(0)]] P:        KiviParams (constant)
// [[buffer(1)]] ring:     uint [C][resid_row_words]
// [[buffer(2)]] incoming: uint [n][resid_row_words]
// [[buffer(3)]] codes:    uint [tokens][H][row_words]        (segment)
// [[buffer(4)]] params:   uint [tokens][H][n_groups][1 or 2] (segment)
// [[buffer(5)]] status:   uint [1]
//
// Dispatch: one thread per group g = (token * H + head) * n_groups + group, WORKGROUP_SIZE
// threads per threadgroup, threadgroups split over (x, y).

#define WMAX ((VALUE_GROUP * VALUE_BITS + 31u) / 32u)

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void kivi_quant_values_thread(constant KiviParams& P [[buffer(0)]],
                                     device const uint* ring [[buffer(1)]],
                                     device const uint* incoming [[buffer(2)]],
                                     device uint* codes [[buffer(3)]],
                                     device uint* params [[buffer(4)]],
                                     device uint* status [[buffer(5)]],
                                     uint3 wg [[threadgroup_position_in_grid]],
                                     uint3 nwg [[threadgroups_per_grid]],
                                     uint lid [[thread_index_in_threadgroup]]) {
    const uint g = (wg.y * nwg.x + wg.x) * WORKGROUP_SIZE + lid;
    if (g >= P.count * P.heads * P.n_groups) {
        return;
    }
    const uint j = g % P.n_groups;
    const uint th = g / P.n_groups;
    const uint h = th % P.heads;
    const uint t = th / P.heads;
    const uint s = P.src_start + t;
    const uint c0 = j * VALUE_GROUP;
    const uint n = min(VALUE_GROUP, P.dim - c0);
    const uint e0 = h * P.dim + c0;

    float xs[VALUE_GROUP];
    float lo = 3.0e38f;
    float hi = -3.0e38f;
    for (uint c = 0u; c < VALUE_GROUP; ++c) {
        xs[c] = 0.0f;
        if (c < n) {
            const float x = kivi_load_x(P, ring, incoming, s, e0 + c);
            xs[c] = x;
            lo = min(lo, x);
            hi = max(hi, x);
        }
    }
    const float scale = (hi - lo) * P.inv_levels;
    kivi_store_pair(params, status, th * P.n_groups + j + P.dst_offset * P.heads * P.n_groups, scale, lo);
    const uint levels = (1u << VALUE_BITS) - 1u;
    uint words[WMAX];
    for (uint w = 0u; w < WMAX; ++w) {
        words[w] = 0u;
    }
    for (uint c = 0u; c < VALUE_GROUP; ++c) {
        if (c < n) {
            const uint code = kivi_code(xs[c], scale, lo, levels);
            const uint start = c * VALUE_BITS;
            const uint w = start >> 5u;
            const uint off = start & 31u;
            words[w] |= code << off;
            if (off + VALUE_BITS > 32u) {
                words[w + 1u] |= code >> (32u - off);
            }
        }
    }
    const uint base = ((P.dst_offset + t) * P.heads + h) * P.row_words + j * P.group_words;
    const uint used = (n * VALUE_BITS + 31u) / 32u;
    for (uint w = 0u; w < WMAX; ++w) {
        if (w < used) {
            codes[base + w] = words[w];
        }
    }
}
