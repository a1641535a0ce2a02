// kivi_dequant_keys: reconstructs quantized keys (tests and tools). Twin of
// wgsl/kivi/kivi_dequant_keys.wgsl.
//
// [[buffer(0)]] P:      KiviParams (constant); count = tokens, dst_offset = first block
// [[buffer(1)]] codes:  uint (segment)
// [[buffer(2)]] params: uint (segment)
// [[buffer(3)]] out:    float [count][H][D]
//
// Dispatch: one thread per (token, head, channel), threadgroups split over (x, y).

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void kivi_dequant_keys(constant KiviParams& P [[buffer(0)]],
                              device const uint* codes [[buffer(1)]],
                              device const uint* params [[buffer(2)]],
                              device float* out [[buffer(3)]],
                              uint3 wg [[threadgroup_position_in_grid]],
                              uint3 nwg [[threadgroups_per_grid]],
                              uint lid [[thread_index_in_threadgroup]]) {
    const uint hd_count = P.heads * P.dim;
    const uint i = (wg.y * nwg.x + wg.x) * WORKGROUP_SIZE + lid;
    if (i >= P.count * hd_count) {
        return;
    }
    const uint e = i % hd_count;
    const uint t = i / hd_count;
    const uint gi = (P.dst_offset + t / P.group) * hd_count + e;
    const float2 pair = kivi_load_pair(params, gi);
    const uint q = kivi_get_code(codes, gi * P.group_words, t % P.group, P.bits);
    out[i] = kivi_reconstruct(q, pair.x, pair.y);
}
