// turboquant_prod_quant: TurboQuant-Prod keys, fused (../shared/spec/turboquant.md
// "TurboQuant-Prod"). Twin of wgsl/turboquant/turboquant_prod_common.wgsl (read it: the
// dispatch, one threadgroup of 64 threads per (token, head pair) item, and the steps) with
// the subgroup variant's ballot: a pass's sign bits by simd_ballot, the SIMD group's first lane
// writing its 32 rows' word (Apple SIMD groups are 32 wide: one word each, no atomics). n and ρ
// by thread 0 in index order. CPU twin: quantize_prod_vector in
// src/cpu/turboquant/turboquant_quant.rs. Specialization: TQ_P, TQ_LOG2P, TQ_BITS (b − 1),
// TQ_STAGES (1), PQ_M.
//
// [[buffer(0)]] P:        TqParams (constant)
// [[buffer(1)]] ring:     uint [ring_tokens][in_row_words]
// [[buffer(2)]] incoming: uint [n][in_row_words]
// [[buffer(3)]] codes:    uint [tokens][H][row_words]      (segment)
// [[buffer(4)]] signs:    uint [tokens][H][m / 32]         (segment)
// [[buffer(5)]] norms:    uint [tokens][ceil(H / 2)]       (segment)
// [[buffer(6)]] rhos:     uint [tokens][ceil(H / 2)]       (segment)
// [[buffer(7)]] tables:   uint (signs, codebook, Sᵀ [P][m] f32: gpu_sketch_table)

#define PQ_SW (PQ_M / 32u)
#define PQ_IT ((PQ_M + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE)

// (S r)_j: sketch row j with r in xs, summed in index order.
static inline float pq_row_dot(constant TqParams& P, device const uint* tables, threadgroup const float* xs,
                               uint j) {
    const uint base = P.cb_offset + 2u * TQ_TN + min(j, PQ_M - 1u); // Sᵀ [P][m]
    float a = 0.0f;
    for (uint i = 0u; i < TQ_TP; ++i) {
        a += as_type<float>(tables[base + i * PQ_M]) * xs[i];
    }
    return a;
}

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void turboquant_prod_quant(constant TqParams& P [[buffer(0)]],
                                  device const uint* ring [[buffer(1)]],
                                  device const uint* incoming [[buffer(2)]],
                                  device uint* codes [[buffer(3)]],
                                  device uint* signs [[buffer(4)]],
                                  device uint* norms [[buffer(5)]],
                                  device uint* rhos [[buffer(6)]],
                                  device const uint* tables [[buffer(7)]],
                                  uint3 wg [[threadgroup_position_in_grid]],
                                  uint3 nwg [[threadgroups_per_grid]],
                                  uint lid [[thread_index_in_threadgroup]],
                                  uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float cb[2u * TQ_TN];
    threadgroup float xs[TQ_TP];
    threadgroup float us[TQ_TP];
    threadgroup uint cs[TQ_TP];
    threadgroup uint sw[PQ_SW];
    threadgroup float nsh[1];
    const uint item = wg.y * nwg.x + wg.x;
    if (item >= P.items) {
        return; // uniform: depends on the threadgroup only
    }
    const uint tok = item / P.norm_words;
    const uint pair = item % P.norm_words;
    const uint row = P.seg_token + tok;
    tq_load_codebook(P, tables, cb, lid);
    float nn[2] = {0.0f, 0.0f};
    float rr[2] = {0.0f, 0.0f};
    for (uint v = 0u; v < 2u; ++v) {
        const uint h = 2u * pair + v;
        const bool live = h < P.heads;
        const uint hs = min(h, P.heads - 1u);
        for (uint w = lid; w < PQ_SW; w += WORKGROUP_SIZE) {
            sw[w] = 0u;
        }
        // 1. The MSE stage (TurboQuant-MSE's steps), u kept.
        const float n = tq_load_norm_shared(P, ring, incoming, xs, nsh, P.src_start + tok, h, live, lid);
        tq_normalize_shared(xs, n, lid);
        for (uint k = 0u; k < TQ_WPL; ++k) {
            const uint e = lid + k * WORKGROUP_SIZE;
            if (e < TQ_TP) {
                us[e] = xs[e];
            }
        }
        tq_signs_shared(tables, xs, hs, lid);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        tq_butterflies_shared(xs, lid);
        tq_codes_shared(P, cb, xs, cs, lid);
        tq_store_rows_shared(cs, codes, (row * P.heads + hs) * TQ_RW, live, lid);
        // 2. û₁ = inverse-rotate(ŷ₁), r = u − û₁.
        for (uint k = 0u; k < TQ_WPL; ++k) {
            const uint e = lid + k * WORKGROUP_SIZE;
            if (e < TQ_TP) {
                xs[e] = tq_centroid(cb, cs[e], 0u);
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        tq_butterflies_shared(xs, lid);
        for (uint k = 0u; k < TQ_WPL; ++k) {
            const uint e = lid + k * WORKGROUP_SIZE;
            if (e < TQ_TP) {
                xs[e] = us[e] - tq_flip(tables, xs[e] * P.inv_sqrt_p, hs, e); // @pq-residual
            }
        }
        // 3. ρ; 4. the sign bits of S r.
        const float rho = tq_norm_shared(xs, nsh, TQ_TP, lid);
        for (uint it = 0u; it < PQ_IT; ++it) {
            const uint j = it * WORKGROUP_SIZE + lid;
            const float dot = pq_row_dot(P, tables, xs, j);
            const bool bit = j < PQ_M && dot >= 0.0f;
            const uint bits = uint(ulong(simd_ballot(bit)) & 0xffffffffu);
            if (lane == 0u && bits != 0u) {
                sw[min(j >> 5u, PQ_SW - 1u)] |= bits;
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        // 5. The sign words.
        for (uint w = lid; w < PQ_SW; w += WORKGROUP_SIZE) {
            if (live) {
                signs[(row * P.heads + hs) * PQ_SW + w] = sw[w];
            }
        }
        nn[v] = n;
        rr[v] = live ? rho : 0.0f; // an absent head's half stays 0 (its residual is not)
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (lid == 0u) {
        norms[row * P.norm_words + pair] = tq_f16_bits(nn[0]) | (tq_f16_bits(nn[1]) << 16u);
        rhos[row * P.norm_words + pair] = tq_f16_bits(rr[0]) | (tq_f16_bits(rr[1]) << 16u);
    }
}
