// turboquant_quant: TurboQuant-MSE / -RVQ quantization, fused (../shared/spec/turboquant.md).
// Twin of wgsl/turboquant/turboquant_quant.wgsl, the workgroup-memory variant (read it: the
// dispatch, one threadgroup of 64 threads per (token, head pair) item, and the five steps):
// the vector in threadgroup memory, invocation 0's norm in index order, signs first,
// butterfly passes that read both partners, wait at a barrier and then write, codes by binary
// search, packed words assembled from the codes. CPU twin: src/cpu/turboquant/turboquant_quant.rs.
//
// [[buffer(0)]] P:        TqParams (constant)
// [[buffer(1)]] ring:     uint [ring_tokens][in_row_words]
// [[buffer(2)]] incoming: uint [n][in_row_words]
// [[buffer(3)]] codes:    uint [tokens][H][S][row_words]   (segment)
// [[buffer(4)]] norms:    uint [tokens][ceil(H / 2)]       (segment)
// [[buffer(5)]] tables:   uint (signs, codebooks)

// The vector's steps: tq_shared_vector.metal (concatenated before this file).

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void turboquant_quant(constant TqParams& P [[buffer(0)]],
                             device const uint* ring [[buffer(1)]],
                             device const uint* incoming [[buffer(2)]],
                             device uint* codes [[buffer(3)]],
                             device uint* norms [[buffer(4)]],
                             device const uint* tables [[buffer(5)]],
                             uint3 wg [[threadgroup_position_in_grid]],
                             uint3 nwg [[threadgroups_per_grid]],
                             uint lid [[thread_index_in_threadgroup]]) {
    threadgroup float cb[2u * TQ_TS * TQ_TN];
    threadgroup float xs[TQ_TP];
    threadgroup uint cs[TQ_TP * TQ_TS];
    threadgroup float nsh[1];
    const uint item = wg.y * nwg.x + wg.x;
    if (item >= P.items) {
        return; // uniform: depends on the threadgroup only
    }
    const uint tok = item / P.norm_words;
    const uint pair = item % P.norm_words;
    const uint s = P.src_start + tok;
    tq_load_codebook(P, tables, cb, lid);
    float nn[2] = {0.0f, 0.0f};
    for (uint v = 0u; v < 2u; ++v) {
        const uint h = 2u * pair + v;
        const bool live = h < P.heads;
        const uint hs = min(h, P.heads - 1u);
        const float n = tq_load_norm_shared(P, ring, incoming, xs, nsh, s, h, live, lid);
        tq_normalize_shared(xs, n, lid);
        tq_signs_shared(tables, xs, hs, lid); // @tq-signs-before
        threadgroup_barrier(mem_flags::mem_threadgroup);
        tq_butterflies_shared(xs, lid);
        // @tq-signs-after
        tq_codes_shared(P, cb, xs, cs, lid);
        tq_store_rows_shared(cs, codes, ((P.seg_token + tok) * P.heads + hs) * TQ_TS * TQ_RW, live, lid);
        nn[v] = n;
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (lid == 0u) {
        norms[(P.seg_token + tok) * P.norm_words + pair] = tq_f16_bits(nn[0]) | (tq_f16_bits(nn[1]) << 16u);
    }
}
