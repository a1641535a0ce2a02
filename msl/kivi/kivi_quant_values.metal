// kivi_quant_values: per-token value quantization, fused. Twin of
// wgsl/kivi/kivi_quant_values_subgroup.wgsl: threadgroups of WORKGROUP_SIZE (256) threads = 8 SIMD
// groups of 32 (Apple's width); SIMD group s of threadgroup w owns value group
// g = w * 8 + s, g = (token * H + head) * n_groups + group (at most 256 channels).
// Lane l loads channels l, l + 32, ... once; min/max by a simd_shuffle_xor butterfly; codes
// go to threadgroup memory; after a barrier lane l assembles words l, l + 32, ...
//
// [[buffer(0)]] P:        KiviParams (constant)
// [[buffer(1)]] ring:     uint [C][resid_row_words]
// [[buffer(2)]] incoming: uint [n][resid_row_words]
// [[buffer(3)]] codes:    uint [tokens][H][row_words]        (segment)
// [[buffer(4)]] params:   uint [tokens][H][n_groups][1 or 2] (segment)
// [[buffer(5)]] status:   uint [1]
//
// SIMD groups past the end run every shuffle and barrier with neutral values and store
// nothing, so all 32 lanes take part in every shuffle and every thread reaches the barrier.

#define SLICES (WORKGROUP_SIZE / 32)
#define MAX_GROUP 256
#define PER_LANE (MAX_GROUP / 32)

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void kivi_quant_values(constant KiviParams& P [[buffer(0)]],
                              device const uint* ring [[buffer(1)]],
                              device const uint* incoming [[buffer(2)]],
                              device uint* codes [[buffer(3)]],
                              device uint* params [[buffer(4)]],
                              device uint* status [[buffer(5)]],
                              uint3 wg [[threadgroup_position_in_grid]],
                              uint3 nwg [[threadgroups_per_grid]],
                              uint slice [[simdgroup_index_in_threadgroup]],
                              uint lane [[thread_index_in_simdgroup]]) {
    threadgroup uint group_codes[SLICES * MAX_GROUP];
    const uint g = (wg.y * nwg.x + wg.x) * SLICES + slice;
    const bool valid = g < P.count * P.heads * P.n_groups;
    const uint j = g % P.n_groups;
    const uint th = g / P.n_groups;
    const uint h = th % P.heads;
    const uint t = th / P.heads;
    const uint s = P.src_start + t;
    const uint c0 = j * P.group;
    const uint n = valid ? min(P.group, P.dim - c0) : 0u;
    const uint e0 = h * P.dim + c0;

    float xs[PER_LANE];
    float lo = 3.0e38f;
    float hi = -3.0e38f;
    for (uint k = 0u; k < PER_LANE; ++k) {
        const uint c = lane + 32u * k;
        xs[k] = 0.0f;
        if (c < n) {
            const float x = kivi_load_x(P, ring, incoming, s, e0 + c);
            xs[k] = x;
            lo = min(lo, x);
            hi = max(hi, x);
        }
    }
    for (ushort off = 1; off < 32; off <<= 1) {
        lo = min(lo, simd_shuffle_xor(lo, off));
        hi = max(hi, simd_shuffle_xor(hi, off));
    }

    const float scale = (hi - lo) * P.inv_levels;
    const uint levels = (1u << P.bits) - 1u;
    const uint cbase = slice * MAX_GROUP;
    for (uint k = 0u; k < PER_LANE; ++k) {
        const uint c = lane + 32u * k;
        if (c < n) {
            group_codes[cbase + c] = kivi_code(xs[k], scale, lo, levels);
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (!valid) {
        return;
    }
    const uint gi = ((P.dst_offset + t) * P.heads + h) * P.n_groups + j;
    if (lane == 0u) {
        kivi_store_pair(params, status, gi, scale, lo);
    }
    const uint b = P.bits;
    const uint base = ((P.dst_offset + t) * P.heads + h) * P.row_words + j * P.group_words;
    const uint words = (n * b + 31u) / 32u;
    for (uint w = lane; w < words; w += 32u) {
        const uint bit0 = w * 32u;
        const uint end_bit = min(bit0 + 32u, n * b);
        uint acc = 0u;
        for (uint c = bit0 / b; c < (end_bit + b - 1u) / b; ++c) {
            const uint code = group_codes[cbase + c];
            const uint start = c * b;
            acc |= (start >= bit0) ? (code << (start - bit0)) : (code >> (bit0 - start));
        }
        codes[base + w] = acc;
    }
}
