// turboquant_prod_quant: TurboQuant-Prod keys, fused (../shared/spec/turboquant.md
// "TurboQuant-Prod"). Twin of wgsl/turboquant/turboquant_prod_common.wgsl (read it: the
// dispatch, one threadgroup of 64 threads per (token, head pair) item, and the steps) with
// the subgroup variant's ballot: a pass's sign bits by simd_ballot, the SIMD group's first lane
// writing its 32 rows' word (Apple SIMD groups are 32 wide: one word each, no atomics). n and ρ
// by thread 0 in index order. One threadgroup per (PQ_TT tokens, head pair): the 2·PQ_TT
// residuals kept in rs, the sketch's words read once for all of them. CPU twin:
// quantize_prod_vector in src/cpu/turboquant/turboquant_quant.rs. Specialization: TQ_P,
// TQ_LOG2P, TQ_BITS (b − 1), TQ_STAGES (1), PQ_M, PQ_TOKENS_PER_WG.
//
// [[buffer(0)]] P:        TqParams (constant; items = (group of PQ_TT tokens, head pair)s)
// [[buffer(1)]] ring:     uint [ring_tokens][in_row_words]
// [[buffer(2)]] incoming: uint [n][in_row_words]
// [[buffer(3)]] codes:    uint [tokens][H][row_words]      (segment)
// [[buffer(4)]] signs:    uint [tokens][H][m / 32]         (segment)
// [[buffer(5)]] norms:    uint [tokens][ceil(H / 2)]       (segment)
// [[buffer(6)]] rhos:     uint [tokens][ceil(H / 2)]       (segment)
// [[buffer(7)]] tables:   uint (signs, codebook, Sᵀ [P][m] f32: gpu_sketch_table)

#define PQ_SW (PQ_M / 32u)
#define PQ_IT ((PQ_M + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE)
#define PQ_TT PQ_TOKENS_PER_WG
#define PQ_SL (2u * PQ_TT)

// (S r_v)_j for every vector v of the threadgroup (residuals rs [PQ_SL][P]), each summed in
// index order: one sketch word per i for all of them.
static inline void pq_row_dots(constant TqParams& P, device const uint* tables, threadgroup const float* rs,
                               uint j, thread float* a) {
    const uint base = P.cb_offset + 2u * TQ_TN + min(j, PQ_M - 1u); // Sᵀ [P][m]
    for (uint v = 0u; v < PQ_SL; ++v) {
        a[v] = 0.0f;
    }
    for (uint i = 0u; i < TQ_TP; ++i) {
        const float s = as_type<float>(tables[base + i * PQ_M]);
        for (uint v = 0u; v < PQ_SL; ++v) {
            a[v] += s * rs[v * TQ_TP + i];
        }
    }
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
    threadgroup float rs[PQ_SL * TQ_TP];
    threadgroup uint sw[PQ_SL * PQ_SW];
    threadgroup float nsh[1];
    const uint item = wg.y * nwg.x + wg.x;
    if (item >= P.items) {
        return; // uniform: depends on the threadgroup only
    }
    const uint g = item / P.norm_words;
    const uint pair = item % P.norm_words;
    tq_load_codebook(P, tables, cb, lid);
    for (uint w = lid; w < PQ_SL * PQ_SW; w += WORKGROUP_SIZE) {
        sw[w] = 0u;
    }
    float nn[PQ_SL];
    float rr[PQ_SL];
    for (uint t = 0u; t < PQ_TT; ++t) {
        const uint tok = min(g * PQ_TT + t, P.count - 1u);
        const bool tlive = g * PQ_TT + t < P.count;
        const uint row = P.seg_token + tok;
        for (uint v = 0u; v < 2u; ++v) {
            const uint h = 2u * pair + v;
            const bool live = tlive && h < P.heads;
            const uint hs = min(h, P.heads - 1u);
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
            // 2. û₁ = inverse-rotate(ŷ₁), r = u − û₁, kept in rs.
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
                    rs[(2u * t + v) * TQ_TP + e] = xs[e];
                }
            }
            // 3. ρ.
            const float rho = tq_norm_shared(xs, nsh, TQ_TP, lid);
            nn[2u * t + v] = n;
            rr[2u * t + v] = live ? rho : 0.0f; // an absent head's ρ stays 0 (its residual is not)
            threadgroup_barrier(mem_flags::mem_threadgroup); // the next vector reuses xs, cs, us
        }
    }
    // 4. The sign bits of S r for every vector (vector v's row j at bit v·m + j).
    for (uint it = 0u; it < PQ_IT; ++it) {
        const uint j = it * WORKGROUP_SIZE + lid;
        float dots[PQ_SL];
        pq_row_dots(P, tables, rs, j, dots);
        for (uint v = 0u; v < PQ_SL; ++v) {
            const bool bit = j < PQ_M && dots[v] >= 0.0f;
            const uint bits = uint(ulong(simd_ballot(bit)) & 0xffffffffu);
            if (lane == 0u && bits != 0u) {
                sw[min((v * PQ_M + j) >> 5u, PQ_SL * PQ_SW - 1u)] |= bits;
            }
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // 5. The sign words, n and ρ.
    for (uint w = lid; w < PQ_SL * PQ_SW; w += WORKGROUP_SIZE) {
        const uint vec = w / PQ_SW;
        const uint t = vec / 2u;
        const uint h = 2u * pair + vec % 2u;
        if (g * PQ_TT + t < P.count && h < P.heads) {
            signs[((P.seg_token + g * PQ_TT + t) * P.heads + h) * PQ_SW + w % PQ_SW] = sw[w];
        }
    }
    if (lid == 0u) {
        for (uint t = 0u; t < PQ_TT; ++t) {
            if (g * PQ_TT + t < P.count) {
                const uint at = (P.seg_token + g * PQ_TT + t) * P.norm_words + pair;
                norms[at] = tq_f16_bits(nn[2u * t]) | (tq_f16_bits(nn[2u * t + 1u]) << 16u);
                rhos[at] = tq_f16_bits(rr[2u * t]) | (tq_f16_bits(rr[2u * t + 1u]) << 16u);
            }
        }
    }
}
