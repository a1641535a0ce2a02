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

static inline float tq_load(constant TqParams& P, device const uint* ring, device const uint* incoming,
                            uint s, uint e) {
    uint w;
    if (s < P.t_old) {
        w = ring[(s % P.ring_tokens) * P.in_row_words + (e >> 1u)];
    } else {
        w = incoming[(s - P.inc_start) * P.in_row_words + (e >> 1u)];
    }
    return tq_half(w, e & 1u);
}

// Word w of stage s's packed row from its codes in cs (one per coordinate).
static inline uint tq_row_word(threadgroup const uint* cs, uint w, uint s) {
    uint out = 0u;
    const uint lo = 32u * w;
    const uint first = lo / TQ_TB;
    const uint last = min((lo + 31u) / TQ_TB, TQ_TP - 1u);
    for (uint i = first; i <= last; ++i) {
        const uint at = i * TQ_TB;
        const uint c = cs[s * TQ_TP + i];
        out |= at >= lo ? (c << (at - lo)) : (c >> (lo - at));
    }
    return out;
}

static inline void tq_signs_shared(device const uint* tables, threadgroup float* xs, uint h, uint lid) {
    for (uint k = 0u; k < TQ_WPL; ++k) {
        const uint e = lid + k * WORKGROUP_SIZE;
        if (e < TQ_TP) {
            xs[e] = tq_flip(tables, xs[e], h, e);
        }
    }
}

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
        for (uint k = 0u; k < TQ_WPL; ++k) {
            const uint e = lid + k * WORKGROUP_SIZE;
            if (e < TQ_TP) {
                xs[e] = (live && e < P.dim) ? tq_load(P, ring, incoming, s, h * P.dim + e) : 0.0f;
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (lid == 0u) {
            float ss = 0.0f;
            for (uint i = 0u; i < P.dim; ++i) {
                const float x = xs[i];
                ss += x * x;
            }
            nsh[0] = sqrt(ss);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        const float n = nsh[0];
        for (uint k = 0u; k < TQ_WPL; ++k) {
            const uint e = lid + k * WORKGROUP_SIZE;
            if (e < TQ_TP && n != 0.0f) {
                xs[e] = xs[e] / n;
            }
        }
        tq_signs_shared(tables, xs, hs, lid); // @tq-signs-before
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint p = 0u; p < TQ_LOG2P; ++p) {
            const uint hh = 1u << p;
            float a[TQ_WPL];
            float b[TQ_WPL];
            for (uint k = 0u; k < TQ_WPL; ++k) {
                const uint e = min(lid + k * WORKGROUP_SIZE, TQ_TP - 1u);
                a[k] = xs[e];
                b[k] = xs[e ^ hh];
            }
            threadgroup_barrier(mem_flags::mem_threadgroup); // @tq-reads-before-writes
            for (uint k = 0u; k < TQ_WPL; ++k) {
                const uint e = lid + k * WORKGROUP_SIZE;
                if (e < TQ_TP) {
                    xs[e] = (e & hh) != 0u ? b[k] - a[k] : a[k] + b[k];
                }
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        // @tq-signs-after
        for (uint k = 0u; k < TQ_WPL; ++k) {
            const uint e = lid + k * WORKGROUP_SIZE;
            if (e < TQ_TP) {
                const float y = xs[e] * P.inv_sqrt_p;
                const uint c1 = tq_code(cb, y, 0u);
                cs[e] = c1;
                if (TQ_TS == 2u) {
                    cs[min(TQ_TP + e, TQ_TP * TQ_TS - 1u)] = tq_code(cb, y - tq_centroid(cb, c1, 0u), 1u);
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        const uint row0 = ((P.seg_token + tok) * P.heads + hs) * TQ_TS * TQ_RW;
        for (uint w = lid; w < TQ_TS * TQ_RW; w += WORKGROUP_SIZE) {
            const uint st = w / TQ_RW;
            const uint word = tq_row_word(cs, w - st * TQ_RW, st);
            if (live) {
                codes[row0 + w] = word;
            }
        }
        nn[v] = n;
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (lid == 0u) {
        norms[(P.seg_token + tok) * P.norm_words + pair] = tq_f16_bits(nn[0]) | (tq_f16_bits(nn[1]) << 16u);
    }
}
