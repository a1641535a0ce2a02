// kivi_quant_keys: per-channel key quantization of whole token blocks, fused (min/max, packed
// codes, (scale, lo)). Twin of wgsl/kivi_quant_keys.wgsl; same bindings and geometry.
//
// [[buffer(0)]] P:        KiviParams (constant)
// [[buffer(1)]] ring:     uint [C][resid_row_words]   f16 residual rows, token s in slot s % C
// [[buffer(2)]] incoming: uint [n][resid_row_words]   f16 rows of this append
// [[buffer(3)]] codes:    uint [blocks][H][D][group_words] (segment)
// [[buffer(4)]] params:   uint [blocks][H][D][1 or 2]      (segment)
// [[buffer(5)]] status:   uint [1]                        set to 1 on an f16 parameter overflow
//
// Dispatch: one thread per (block, head, channel), i = (block * H + head) * D + channel,
// WORKGROUP_SIZE threads per threadgroup, threadgroups split over (x, y).

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void kivi_quant_keys(constant KiviParams& P [[buffer(0)]],
                            device const uint* ring [[buffer(1)]],
                            device const uint* incoming [[buffer(2)]],
                            device uint* codes [[buffer(3)]],
                            device uint* params [[buffer(4)]],
                            device uint* status [[buffer(5)]],
                            uint3 wg [[threadgroup_position_in_grid]],
                            uint3 nwg [[threadgroups_per_grid]],
                            uint lid [[thread_index_in_threadgroup]]) {
    const uint hd_count = P.heads * P.dim;
    const uint i = (wg.y * nwg.x + wg.x) * WORKGROUP_SIZE + lid;
    if (i >= P.count * hd_count) {
        return;
    }
    const uint e = i % hd_count;
    const uint j = i / hd_count;
    const uint s0 = P.src_start + j * P.group;
    float lo = kivi_load_x(P, ring, incoming, s0, e);
    float hi = lo;
    for (uint t = 1u; t < P.group; ++t) {
        const float x = kivi_load_x(P, ring, incoming, s0 + t, e);
        lo = min(lo, x);
        hi = max(hi, x);
    }
    const float scale = (hi - lo) * P.inv_levels;
    const uint gi = (P.dst_offset + j) * hd_count + e;
    kivi_store_pair(params, status, gi, scale, lo);
    const uint b = P.bits;
    const uint levels = (1u << b) - 1u;
    const uint base = gi * P.group_words;
    for (uint w = 0u; w < P.group_words; ++w) {
        const uint bit0 = w * 32u;
        const uint end_bit = min(bit0 + 32u, P.group * b);
        uint acc = 0u;
        for (uint t = bit0 / b; t < (end_bit + b - 1u) / b; ++t) {
            const uint c = kivi_code(kivi_load_x(P, ring, incoming, s0 + t, e), scale, lo, levels);
            const uint start = t * b;
            acc |= (start >= bit0) ? (c << (start - bit0)) : (c >> (bit0 - start));
        }
        codes[base + w] = acc;
    }
}
