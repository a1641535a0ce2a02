// kivi_quant_values: per-token value quantization, fused. Twin of
// wgsl/kivi_quant_values_subgroup.wgsl: one threadgroup of 32 threads (one Apple SIMD group)
// per (token, head, group); min/max by a simd_shuffle_xor butterfly; thread l then writes
// words l, l + 32, ... of the group stream, recomputing codes from the input.
//
// [[buffer(0)]] P:        KiviParams (constant)
// [[buffer(1)]] ring:     uint [C][resid_row_words]
// [[buffer(2)]] incoming: uint [n][resid_row_words]
// [[buffer(3)]] codes:    uint [tokens][H][row_words]        (segment)
// [[buffer(4)]] params:   uint [tokens][H][n_groups][1 or 2] (segment)
// [[buffer(5)]] status:   uint [1]
//
// Dispatch: threadgroup g = (token * H + head) * n_groups + group, WORKGROUP_SIZE (32)
// threads, threadgroups split over (x, y). The early return depends on g only, so it is
// uniform across the SIMD group and every shuffle has all 32 lanes.

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void kivi_quant_values(constant KiviParams& P [[buffer(0)]],
                              device const uint* ring [[buffer(1)]],
                              device const uint* incoming [[buffer(2)]],
                              device uint* codes [[buffer(3)]],
                              device uint* params [[buffer(4)]],
                              device uint* status [[buffer(5)]],
                              uint3 wg [[threadgroup_position_in_grid]],
                              uint3 nwg [[threadgroups_per_grid]],
                              uint lid [[thread_index_in_threadgroup]]) {
    const uint g = wg.y * nwg.x + wg.x;
    if (g >= P.count * P.heads * P.n_groups) {
        return;
    }
    const uint j = g % P.n_groups;
    const uint th = g / P.n_groups;
    const uint h = th % P.heads;
    const uint t = th / P.heads;
    const uint s = P.src_start + t;
    const uint c0 = j * P.group;
    const uint n = min(P.group, P.dim - c0);
    const uint e0 = h * P.dim + c0;

    float lo = 3.0e38f;
    float hi = -3.0e38f;
    for (uint c = lid; c < n; c += WORKGROUP_SIZE) {
        const float x = kivi_load_x(P, ring, incoming, s, e0 + c);
        lo = min(lo, x);
        hi = max(hi, x);
    }
    for (ushort off = 1; off < 32; off <<= 1) {
        lo = min(lo, simd_shuffle_xor(lo, off));
        hi = max(hi, simd_shuffle_xor(hi, off));
    }

    const float scale = (hi - lo) * P.inv_levels;
    const uint gi = ((P.dst_offset + t) * P.heads + h) * P.n_groups + j;
    if (lid == 0u) {
        kivi_store_pair(params, status, gi, scale, lo);
    }
    const uint b = P.bits;
    const uint levels = (1u << b) - 1u;
    const uint base = ((P.dst_offset + t) * P.heads + h) * P.row_words + j * P.group_words;
    const uint words = (n * b + 31u) / 32u;
    for (uint w = lid; w < words; w += WORKGROUP_SIZE) {
        const uint bit0 = w * 32u;
        const uint end_bit = min(bit0 + 32u, n * b);
        uint acc = 0u;
        for (uint c = bit0 / b; c < (end_bit + b - 1u) / b; ++c) {
            const uint code = kivi_code(kivi_load_x(P, ring, incoming, s, e0 + c), scale, lo, levels);
            const uint start = c * b;
            acc |= (start >= bit0) ? (code << (start - bit0)) : (code >> (bit0 - start));
        }
        codes[base + w] = acc;
    }
}
