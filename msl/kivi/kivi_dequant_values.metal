// kivi_dequant_values: reconstructs quantized values (tests and tools). Twin of
// wgsl/kivi/kivi_dequant_values.wgsl.
//
// [[buffer(0)]] P:      KiviParams (constant); count = tokens, dst_offset = first token
// [[buffer(1)]] codes:  uint (segment)
// [[buffer(2)]] params: uint (segment)
// [[buffer(3)]] out:    float [count][H][D]
//
// Dispatch: one thread per (token, head, channel), threadgroups split over (x, y).

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void kivi_dequant_values(constant KiviParams& P [[buffer(0)]],
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
    const uint d = i % P.dim;
    const uint th = i / P.dim;
    const uint j = d / P.group;
    const uint row = P.dst_offset * P.heads + th;
    const float2 pair = kivi_load_pair(params, row * P.n_groups + j);
    const uint q = kivi_get_code(codes, row * P.row_words + j * P.group_words, d - j * P.group, P.bits);
    out[i] = kivi_reconstruct(q, pair.x, pair.y);
}
