// kivi_quant_keys: per-channel key quantization of whole token blocks, fused (min/max, packed
// codes, (scale, lo)). Twin of wgsl/kivi/kivi_quant_keys.wgsl; same bindings and geometry.
// Specialized on KEY_GROUP (#define prepended by the host).
//
// [[buffer(0)]] P:        KiviParams (constant)
// [[buffer(1)]] ring:     uint [C][resid_row_words]   f16 residual rows, token s in slot s % C
// [[buffer(2)]] incoming: uint [n][resid_row_words]   f16 rows of this append (token inc_start + i)
// [[buffer(3)]] codes:    uint [blocks][H][D][group_words] (segment)
// [[buffer(4)]] params:   uint [blocks][H][D][1 or 2]      (segment)
// [[buffer(5)]] status:   uint [1]                        set to 1 on an f16 parameter overflow
//
// Dispatch: one thread per (block, channel pair p = word p of a residual row), i = block *
// pairs + p, WORKGROUP_SIZE threads per threadgroup, threadgroups split over (x, y). The first
// KCACHE words of the block are kept in registers for the code pass.

#if KEY_GROUP < 64u
#define KCACHE KEY_GROUP
#else
#define KCACHE 64u
#endif

static inline uint kivi_key_word(constant KiviParams& P, device const uint* ring, device const uint* incoming, uint s, uint p) {
    if (s < P.t_old) {
        return ring[(s % P.ring_tokens) * P.resid_row_words + p];
    }
    return incoming[(s - P.inc_start) * P.resid_row_words + p];
}

static inline void kivi_key_codes(constant KiviParams& P, device const uint* ring, device const uint* incoming,
                                  device uint* codes, uint gi, uint half_, uint s0, uint p, float scale,
                                  float lo, thread const uint* cache) {
    const uint b = P.bits;
    const uint levels = (1u << b) - 1u;
    const uint base = gi * P.group_words;
    for (uint w = 0u; w < P.group_words; ++w) {
        const uint bit0 = w * 32u;
        const uint end_bit = min(bit0 + 32u, KEY_GROUP * b);
        uint acc = 0u;
        for (uint t = bit0 / b; t < (end_bit + b - 1u) / b; ++t) {
            const uint word = t < KCACHE ? cache[t] : kivi_key_word(P, ring, incoming, s0 + t, p);
            const float x = kivi_f16_to_float(half_ == 1u ? (word >> 16u) : word);
            const uint c = kivi_code(x, scale, lo, levels);
            const uint start = t * b;
            acc |= (start >= bit0) ? (c << (start - bit0)) : (c >> (bit0 - start));
        }
        codes[base + w] = acc;
    }
}

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
    const uint pairs = (hd_count + 1u) / 2u;
    const uint i = (wg.y * nwg.x + wg.x) * WORKGROUP_SIZE + lid;
    if (i >= P.count * pairs) {
        return;
    }
    const uint p = i % pairs;
    const uint j = i / pairs;
    const uint s0 = P.src_start + j * KEY_GROUP;
    uint cache[KCACHE];
    float lo0 = 3.0e38f, hi0 = -3.0e38f, lo1 = 3.0e38f, hi1 = -3.0e38f;
    for (uint t = 0u; t < KEY_GROUP; ++t) {
        const uint w = kivi_key_word(P, ring, incoming, s0 + t, p);
        if (t < KCACHE) {
            cache[t] = w;
        }
        const float x0 = kivi_f16_to_float(w);
        const float x1 = kivi_f16_to_float(w >> 16u);
        lo0 = min(lo0, x0);
        hi0 = max(hi0, x0);
        lo1 = min(lo1, x1);
        hi1 = max(hi1, x1);
    }
    const uint e = 2u * p;
    const uint g0 = (P.dst_offset + j) * hd_count + e;
    const float scale0 = (hi0 - lo0) * P.inv_levels;
    kivi_store_pair(params, status, g0, scale0, lo0);
    kivi_key_codes(P, ring, incoming, codes, g0, 0u, s0, p, scale0, lo0, cache);
    if (e + 1u < hd_count) {
        const float scale1 = (hi1 - lo1) * P.inv_levels;
        kivi_store_pair(params, status, g0 + 1u, scale1, lo1);
        kivi_key_codes(P, ring, incoming, codes, g0 + 1u, 1u, s0, p, scale1, lo1, cache);
    }
}
