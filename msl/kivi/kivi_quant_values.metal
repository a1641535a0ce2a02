// kivi_quant_values: per-token value quantization for value groups of 65..=256 channels, one
// thread per 32-channel part of a group (LANES = 4 threads per group up to 128 channels, 8 up
// to 256). Twin of wgsl/kivi/kivi_quant_values.wgsl; same bindings and geometry: a thread
// loads its part once, takes the group's min and max from its LANES neighbours through
// threadgroup memory (one barrier), and packs and stores its own 32 codes (b whole words of
// the group stream). Specialized on VALUE_GROUP and VALUE_BITS (#defines prepended by the
// host).
//
// [[buffer(0)]] P:        KiviParams (constant)
// [[buffer(1)]] ring:     uint [C][resid_row_words]
// [[buffer(2)]] incoming: uint [n][resid_row_words]
// [[buffer(3)]] codes:    uint [tokens][H][row_words]        (segment)
// [[buffer(4)]] params:   uint [tokens][H][n_groups][1 or 2] (segment)
// [[buffer(5)]] status:   uint [1]
//
// Dispatch: threadgroups of WORKGROUP_SIZE threads; thread lid of threadgroup w serves part
// lid % LANES of group g = w * (WORKGROUP_SIZE / LANES) + lid / LANES,
// g = (token * H + head) * n_groups + group. Threads past the last group reach the barrier
// and store nothing.

#define PART 32u
#define LANES (VALUE_GROUP <= 128u ? 4u : 8u)
#define PWORDS VALUE_BITS

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
    threadgroup float part_lo[WORKGROUP_SIZE];
    threadgroup float part_hi[WORKGROUP_SIZE];
    const uint part = lid % LANES;
    const uint g = (wg.y * nwg.x + wg.x) * (WORKGROUP_SIZE / LANES) + lid / LANES;
    const bool valid = g < P.count * P.heads * P.n_groups;
    const uint j = g % P.n_groups;
    const uint th = g / P.n_groups;
    const uint h = th % P.heads;
    const uint t = th / P.heads;
    const uint s = P.src_start + t;
    const uint c0 = j * VALUE_GROUP;
    const uint n = min(VALUE_GROUP, P.dim - c0);
    const uint p0 = part * PART;
    const uint m = (valid && p0 < n) ? min(PART, n - p0) : 0u;
    const uint e0 = h * P.dim + c0 + p0;

    float xs[PART];
    float lo = 3.0e38f;
    float hi = -3.0e38f;
    for (uint c = 0u; c < PART; ++c) {
        xs[c] = 0.0f;
        if (c < m) {
            const float x = kivi_load_x(P, ring, incoming, s, e0 + c);
            xs[c] = x;
            lo = min(lo, x);
            hi = max(hi, x);
        }
    }
    part_lo[lid] = lo;
    part_hi[lid] = hi;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint first = lid - part;
    for (uint k = 0u; k < LANES; ++k) {
        lo = min(lo, part_lo[first + k]);
        hi = max(hi, part_hi[first + k]);
    }
    if (m == 0u) {
        return;
    }
    const float scale = (hi - lo) * P.inv_levels;
    if (part == 0u) {
        kivi_store_pair(params, status, th * P.n_groups + j + P.dst_offset * P.heads * P.n_groups, scale, lo);
    }
    const uint levels = (1u << VALUE_BITS) - 1u;
    uint words[PWORDS];
    for (uint w = 0u; w < PWORDS; ++w) {
        words[w] = 0u;
    }
    for (uint c = 0u; c < PART; ++c) {
        if (c < m) {
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
    const uint base = ((P.dst_offset + t) * P.heads + h) * P.row_words + j * P.group_words + part * PWORDS;
    const uint used = (m * VALUE_BITS + 31u) / 32u;
    for (uint w = 0u; w < PWORDS; ++w) {
        if (w < used) {
            codes[base + w] = words[w];
        }
    }
}
