// The attention prefill kernel (ATTEND_NAME): many query vectors per threadgroup in GEMM form
// with register tiles. Twin of wgsl/attend/attend_prefill.wgsl (read it: mapping, hooks
// k_value / v_value, the four steps per tile, threadgroup storage); no cross-lane step. A tile
// from the codec alone is staged four elements at a time, as the WGSL's (keys four tokens of a
// channel, values four channels of a token), through the codec's optional k_quad / v_quad
// (ATT_K_QUAD / ATT_V_QUAD defined) or else element by element (pf_kquad / pf_vquad); not
// measured on Apple hardware.

#define PF_W ATTEND_WIDE
#define PF_WP ((PF_W + 63u) / 64u * 64u)
#define PF_DP ((ATTEND_DIM + 15u) / 16u * 16u)
#define PF_QB (PF_WP <= 128u ? 32u : 16u)
#define PF_TT (PF_WP <= 128u ? 16u : 8u)
#define PF_Q4 (PF_QB / 4u)
#define PF_CG (WORKGROUP_SIZE / PF_Q4)
#define PF_OC4 (PF_WP / (4u * PF_CG))
#define PF_TQ (PF_TT / 4u)
#define PF_SN (PF_Q4 * PF_TT)
#define PF_PARTS (WORKGROUP_SIZE / PF_SN)
#define PF_PC (PF_DP / PF_PARTS)
#define PF_FS (PF_PARTS * PF_TT * PF_Q4)
#define PF_SM (WORKGROUP_SIZE / PF_QB)
#define PF_ST (PF_TT / PF_SM)

static inline float pf_ring(constant AttendParams& A, device const uint* ring, uint pos, uint cap,
                            uint c, uint h) {
    const uint e = h * ATTEND_DIM + c;
    return attend_half(ring[(pos % cap) * A.row_words + (e >> 1u)], e);
}

// Four keys of channel c, rows row .. row + 3 (clamped to `last`), and four values of row
// `row` (clamped to `last`), channels c .. c + 3 (c a multiple of 4; channels past the value
// space read its last): through the codec's k_quad / v_quad where it defines ATT_K_QUAD /
// ATT_V_QUAD and the elements allow, else element by element. Twins of the WGSL's.
static inline float4 pf_kquad(constant AttendParams& A, constant KParams& KP, device const uint* kseg,
                              uint row, uint last, uint c, uint h) {
#if defined(ATT_K_QUAD)
    if (ATT_K_QUAD && row % 4u == 0u && row + 3u <= last) {
        return k_quad(A, KP, kseg, row, c, h);
    }
#endif
    return float4(k_value(A, KP, kseg, row, last, c, h), k_value(A, KP, kseg, row + 1u, last, c, h),
                  k_value(A, KP, kseg, row + 2u, last, c, h), k_value(A, KP, kseg, row + 3u, last, c, h));
}

static inline float4 pf_vquad(constant AttendParams& A, constant VParams& VP, device const uint* vseg,
                              device const uint* vtab, uint row, uint last, uint c, uint h) {
#if defined(ATT_V_QUAD)
    if (ATT_V_QUAD && c + 3u < V_W) {
        return v_quad(A, VP, vseg, min(row, last), c, h);
    }
#endif
    return float4(v_value(A, VP, vseg, vtab, row, last, min(c, V_W - 1u), h),
                  v_value(A, VP, vseg, vtab, row, last, min(c + 1u, V_W - 1u), h),
                  v_value(A, VP, vseg, vtab, row, last, min(c + 2u, V_W - 1u), h),
                  v_value(A, VP, vseg, vtab, row, last, min(c + 3u, V_W - 1u), h));
}

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void ATTEND_NAME(constant AttendParams& A [[buffer(0)]],
                        constant KParams& KP [[buffer(1)]],
                        constant VParams& VP [[buffer(2)]],
                        device const float* q [[buffer(3)]],
                        device float* partials [[buffer(4)]],
                        device const uint* kseg [[buffer(5)]],
                        device const uint* ktab [[buffer(6)]],
                        device const uint* vseg [[buffer(7)]],
                        device const uint* vtab [[buffer(8)]],
                        device const uint* ringk [[buffer(9)]],
                        device const uint* ringv [[buffer(10)]],
                        uint3 wg [[threadgroup_position_in_grid]],
                        uint3 nwg [[threadgroups_per_grid]],
                        uint lid [[thread_index_in_threadgroup]]) {
    threadgroup float4 pf_q[PF_DP * PF_Q4];
    threadgroup float4 pf_kv[PF_TT * PF_WP / 4u];
    // Scores by part ([part][token][vector quad]); after the softmax, the weights in part 0;
    // then the rescale factors ([vector quad] from PF_FS).
    threadgroup float4 pf_s[PF_FS + PF_Q4];
    // The softmax threads' maxima of the tile ([thread]); after the tile loop their sums.
    threadgroup float pf_mx[WORKGROUP_SIZE];
    const uint wid = wg.y * nwg.x + wg.x;
    const uint nsplit = A.n_split_c + A.n_split_r;
    const uint per_h = A.vblocks * nsplit;
    if (wid >= A.hkv * per_h) {
        return; // uniform: depends on the threadgroup only
    }
    const uint h = wid / per_h;
    const uint split = (wid % per_h) / A.vblocks;
    const uint vb = wid % A.vblocks;
    const bool vring = split >= A.n_split_c;
    uint s0 = A.tok0 + split * A.split_c;
    uint s1 = min(s0 + A.split_c, A.c_end);
    uint part = A.part_c + split;
    if (vring) {
        s0 = A.r0 + (split - A.n_split_c) * A.split_r;
        s1 = min(s0 + A.split_r, A.tok_end);
        part = A.part_r + split - A.n_split_c;
    }
    const uint width = vring ? ATTEND_DIM : V_W;
    const uint v0 = vb * PF_QB;
    // 0. The threadgroup's queries, scaled, channel-major.
    for (uint e = lid; e < PF_DP * PF_QB; e += WORKGROUP_SIZE) {
        const uint c = e / PF_QB;
        const uint j = e % PF_QB;
        const uint v = v0 + j;
        float x = 0.0f;
        if (v < A.vec_total && c < ATTEND_DIM) {
            x = q[((v / A.qg) * A.hq + h * A.qg + v % A.qg) * ATTEND_DIM + c] * A.scale_log2;
        }
        pf_q[c * PF_Q4 + j / 4u][j % 4u] = x;
    }
    const uint sq = lid % PF_Q4;
    const uint st = lid / PF_Q4;
    float4 o[4u * PF_OC4];
    for (uint i = 0u; i < 4u * PF_OC4; ++i) {
        o[i] = float4(0.0f);
    }
    float m = ATTEND_NEG;
    float l = 0.0f;
    const uint kl = A.qk - 1u - A.tok0;
    const uint vl = min(s1, A.qv) - 1u - A.tok0;
    for (uint t0 = s0; t0 < s1; t0 += PF_TT) {
        // 1. The tile's keys, channel-major: the same sources and clamps as the WGSL's pf_keys.
        // A tile from the codec alone reads four tokens of a channel at a time (pf_kquad);
        // otherwise one loop whose first arm is uniform per tile (the WGSL's loops keep the
        // ring's loads free of branches; not measured on Apple hardware).
        const uint tend = min(t0 + PF_TT, s1);
        if (tend <= A.qk) {
            for (uint u = lid; u < PF_DP * PF_TQ; u += WORKGROUP_SIZE) {
                pf_kv[u] = pf_kquad(A, KP, kseg, t0 + 4u * (u % PF_TQ) - A.tok0, kl,
                                    min(u / PF_TQ, ATTEND_DIM - 1u), h);
            }
        } else for (uint e = lid; e < PF_TT * PF_DP; e += WORKGROUP_SIZE) {
            const uint c = min(e / PF_TT, ATTEND_DIM - 1u);
            const uint pos = min(t0 + e % PF_TT, s1 - 1u);
            float x = 0.0f;
            if (ATT_RING == 1u && t0 >= A.qk) {
                x = pf_ring(A, ringk, pos, A.ring_cap_k, c, h);
            } else if (pos < A.qk) {
                x = k_value(A, KP, kseg, pos - A.tok0, kl, c, h);
            } else if (ATT_RING == 1u) {
                x = pf_ring(A, ringk, pos, A.ring_cap_k, c, h);
            }
            pf_kv[e / 4u][e % 4u] = x;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        // 2. Scores: thread lid's 4 vectors (vector quad sq) × 1 token over the channels of
        // its part; part 0 masks.
        {
            const uint tt = (lid % PF_SN) / PF_Q4;
            const uint part = lid / PF_SN;
            float4 a = float4(0.0f);
            for (uint c = part * PF_PC; c < (part + 1u) * PF_PC; ++c) {
                const uint at = c * PF_TT + tt;
                a += pf_q[c * PF_Q4 + sq] * pf_kv[at / 4u][at % 4u];
            }
            if (part == 0u) {
                const uint pos = t0 + tt;
                const float4 raw = a;
                a = float4(ATTEND_NEG);
                if (pos < s1) {
                    const uint kp = attend_key_pos(A, kseg, pos, h);
                    for (uint j = 0u; j < 4u; ++j) {
                        const uint v = v0 + 4u * sq + j;
                        if (v < A.vec_total && attend_visible(A, kp, A.q_pos0 + v / A.qg)) {
                            a[j] = raw[j];
                        }
                    }
                }
            }
            pf_s[(part * PF_TT + tt) * PF_Q4 + sq] = a;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        // 3. The softmax spread over the threadgroup (the WGSL's pf_softmax): thread lid
        // serves vector lid % PF_QB over PF_ST tokens of the tile, scores summed by part (NEG
        // where part 0 masked); the vector's maxima meet in pf_mx behind a barrier; each
        // thread keeps its part of l; the vector's first thread writes the factor.
        {
            const uint v = lid % PF_QB;
            const uint q4 = v / 4u;
            const uint j = v % 4u;
            const uint tb = (lid / PF_QB) * PF_ST;
            float mt = ATTEND_NEG;
            for (uint i = 0u; i < PF_ST; ++i) {
                const uint t = tb + i;
                const float p0 = pf_s[t * PF_Q4 + q4][j];
                float s = p0;
                for (uint pt = 1u; pt < PF_PARTS; ++pt) {
                    s += pf_s[(pt * PF_TT + t) * PF_Q4 + q4][j];
                }
                s = p0 > ATTEND_NEG ? s : ATTEND_NEG;
                pf_s[t * PF_Q4 + q4][j] = s;
                mt = max(mt, s);
            }
            pf_mx[lid] = mt;
            threadgroup_barrier(mem_flags::mem_threadgroup);
            for (uint k = 0u; k < PF_SM; ++k) {
                mt = max(mt, pf_mx[k * PF_QB + v]);
            }
            const float m_new = max(m, mt);
            const float corr = precise::exp2(m - m_new);
            m = m_new;
            float sum = 0.0f;
            for (uint i = 0u; i < PF_ST; ++i) {
                const uint t = tb + i;
                const float s = pf_s[t * PF_Q4 + q4][j];
                const float p = s > ATTEND_NEG ? precise::exp2(s - m_new) : 0.0f;
                pf_s[t * PF_Q4 + q4][j] = p;
                sum += p;
            }
            l = l * corr + sum;
            if (lid < PF_QB) {
                pf_s[PF_FS + q4][j] = corr;
            }
        }
        // The tile's values, token-major (pf_values likewise: four channels of a token at a
        // time from the codec alone, pf_vquad).
        if (!vring && tend <= A.qv) {
            for (uint u = lid; u < PF_TT * PF_WP / 4u; u += WORKGROUP_SIZE) {
                pf_kv[u] = pf_vquad(A, VP, vseg, vtab, t0 + u / (PF_WP / 4u) - A.tok0, vl,
                                    4u * (u % (PF_WP / 4u)), h);
            }
        } else for (uint e = lid; e < PF_TT * PF_WP; e += WORKGROUP_SIZE) {
            const uint c = min(e % PF_WP, width - 1u);
            const uint pos = min(t0 + e / PF_WP, s1 - 1u);
            float x = 0.0f;
            if (ATT_RING == 1u && (vring || t0 >= A.qv)) {
                x = pf_ring(A, ringv, pos, A.ring_cap_v, c, h);
            } else if (!vring && pos < A.qv) {
                x = v_value(A, VP, vseg, vtab, pos - A.tok0, vl, c, h);
            } else if (ATT_RING == 1u) {
                x = pf_ring(A, ringv, pos, A.ring_cap_v, c, h);
            }
            pf_kv[e / 4u][e % 4u] = x;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        // 4. The output tile: rescaled, then p·v̂ token by token.
        const float4 corr = pf_s[PF_FS + sq];
        for (uint j = 0u; j < 4u; ++j) {
            for (uint k = 0u; k < PF_OC4; ++k) {
                o[j * PF_OC4 + k] *= corr[j];
            }
        }
        for (uint t = 0u; t < PF_TT; ++t) {
            const float4 p = pf_s[t * PF_Q4 + sq];
            for (uint k = 0u; k < PF_OC4; ++k) {
                const float4 x = pf_kv[t * PF_WP / 4u + st * PF_OC4 + k];
                for (uint j = 0u; j < 4u; ++j) {
                    o[j * PF_OC4 + k] += p[j] * x;
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    // The vector's PF_SM parts of l added up (the last tile's barrier ordered pf_mx's reads).
    pf_mx[lid] = l;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    l = 0.0f;
    for (uint k = 0u; k < PF_SM; ++k) {
        l += pf_mx[k * PF_QB + lid % PF_QB];
    }
    // 5. The records of (vector, split).
    const uint base = (h * A.vec_total) * A.n_parts + part;
    if (lid < PF_QB && v0 + lid < A.vec_total) {
        const uint b = (base + (v0 + lid) * A.n_parts) * (ATTEND_WIDE + 2u);
        partials[b] = m;
        partials[b + 1u] = l;
    }
    for (uint j = 0u; j < 4u; ++j) {
        const uint v = v0 + 4u * sq + j;
        if (v < A.vec_total) {
            const uint b = (base + v * A.n_parts) * (ATTEND_WIDE + 2u) + 2u;
            for (uint k = 0u; k < PF_OC4; ++k) {
                for (uint i = 0u; i < 4u; ++i) {
                    const uint c = (st * PF_OC4 + k) * 4u + i;
                    if (c < width) {
                        partials[b + c] = o[j * PF_OC4 + k][i];
                    }
                }
            }
        }
    }
}
