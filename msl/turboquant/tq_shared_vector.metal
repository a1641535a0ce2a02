// One vector in threadgroup memory, the steps turboquant_quant and turboquant_prod_quant share
// (twin of wgsl/turboquant/tq_shared_vector.wgsl): thread lid owns coordinates lid, lid + 64,
// ... (TQ_WPL of them). Every function holding a barrier is called by all threads. Needs
// turboquant_common.metal.

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

// ‖xs[0 .. len)‖₂ by thread 0 in index order (barriers before and after).
static inline float tq_norm_shared(threadgroup float* xs, threadgroup float* nsh, uint len, uint lid) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (lid == 0u) {
        float ss = 0.0f;
        for (uint i = 0u; i < len; ++i) {
            const float x = xs[i];
            ss += x * x;
        }
        nsh[0] = sqrt(ss);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return nsh[0];
}

// Head h's vector of absolute token s into xs (zeros past D and for an absent head); its norm.
static inline float tq_load_norm_shared(constant TqParams& P, device const uint* ring,
                                        device const uint* incoming, threadgroup float* xs,
                                        threadgroup float* nsh, uint s, uint h, bool live, uint lid) {
    for (uint k = 0u; k < TQ_WPL; ++k) {
        const uint e = lid + k * WORKGROUP_SIZE;
        if (e < TQ_TP) {
            xs[e] = (live && e < P.dim) ? tq_load(P, ring, incoming, s, h * P.dim + e) : 0.0f;
        }
    }
    return tq_norm_shared(xs, nsh, P.dim, lid);
}

// u = x / n on the thread's coordinates (x itself when n = 0).
static inline void tq_normalize_shared(threadgroup float* xs, float n, uint lid) {
    for (uint k = 0u; k < TQ_WPL; ++k) {
        const uint e = lid + k * WORKGROUP_SIZE;
        if (e < TQ_TP && n != 0.0f) {
            xs[e] = xs[e] / n;
        }
    }
}

// log2(P) butterfly passes (no scale), reads, a barrier, writes, a barrier per pass. A barrier
// must precede the call.
static inline void tq_butterflies_shared(threadgroup float* xs, uint lid) {
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
}

// y = xs · c, the stage codes into cs (RVQ: the stage-2 code of y − ĉ₁), a barrier.
static inline void tq_codes_shared(constant TqParams& P, threadgroup const float* cb,
                                   threadgroup const float* xs, threadgroup uint* cs, uint lid) {
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
}

// The packed rows of cs from word row0 of codes (stored only for a live head).
static inline void tq_store_rows_shared(threadgroup const uint* cs, device uint* codes, uint row0,
                                        bool live, uint lid) {
    for (uint w = lid; w < TQ_TS * TQ_RW; w += WORKGROUP_SIZE) {
        const uint st = w / TQ_RW;
        const uint word = tq_row_word(cs, w - st * TQ_RW, st);
        if (live) {
            codes[row0 + w] = word;
        }
    }
}
