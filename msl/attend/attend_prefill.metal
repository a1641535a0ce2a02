// The attention prefill kernel (ATTEND_NAME): many query vectors per threadgroup, the tiles'
// keys and values read once into threadgroup memory. Twin of wgsl/attend/attend_prefill.wgsl
// (read it: mapping, hooks k_value / v_value, workgroup storage) with its subgroup variant's
// sum (SIMD groups are 32 wide: a vector's PF_LPV lanes are consecutive lanes of one).

#define PF_TT 16u
#define PF_W ATTEND_WIDE
#define PF_LPV (PF_W <= 32u ? 1u : PF_W <= 64u ? 2u : PF_W <= 128u ? 4u : 8u)
#define PF_QB (WORKGROUP_SIZE / PF_LPV)
#define PF_S4 ((PF_W + 3u) / 4u)

static inline float pf_ring(constant AttendParams& A, device const uint* ring, uint pos, uint cap,
                            uint c, uint h) {
    const uint e = h * ATTEND_DIM + c;
    return attend_half(ring[(pos % cap) * A.row_words + (e >> 1u)], e);
}

static inline float pf_lane_sum(float x) {
    for (ushort off = 1; off < PF_LPV; off <<= 1) {
        x += simd_shuffle_xor(x, off);
    }
    return x;
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
    threadgroup float4 pft[PF_TT * PF_S4 + 8u * PF_LPV];
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
    const uint v = vb * PF_QB + lid / PF_LPV;
    const bool live = v < A.vec_total;
    const uint vc = min(v, A.vec_total - 1u);
    const uint pv = A.q_pos0 + vc / A.qg;
    const uint c0 = (lid % PF_LPV) * 32u;
    float4 qr[8];
    const uint qbase = ((vc / A.qg) * A.hq + h * A.qg + vc % A.qg) * ATTEND_DIM;
    for (uint i = 0u; i < 8u; ++i) {
        float4 x = float4(0.0f);
        for (uint k = 0u; k < 4u; ++k) {
            const uint c = c0 + 4u * i + k;
            if (live && c < ATTEND_DIM) {
                x[k] = q[qbase + c] * A.scale_log2;
            }
        }
        qr[i] = x;
    }
    for (uint e = lid; e < PF_TT * PF_S4 + 8u * PF_LPV; e += WORKGROUP_SIZE) {
        pft[e] = float4(0.0f);
    }
    float4 o[8];
    for (uint i = 0u; i < 8u; ++i) {
        o[i] = float4(0.0f);
    }
    float m = ATTEND_NEG;
    float l = 0.0f;
    const uint kl = A.qk - 1u - A.tok0;
    const uint vl = min(s1, A.qv) - 1u - A.tok0;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint t0 = s0; t0 < s1; t0 += PF_TT) {
        for (uint e = lid; e < PF_TT * ATTEND_DIM; e += WORKGROUP_SIZE) {
            const uint t = e / ATTEND_DIM;
            const uint c = e - t * ATTEND_DIM;
            const uint pos = t0 + t;
            float x = 0.0f;
            if (pos < s1) {
                if (pos < A.qk) {
                    x = k_value(A, KP, kseg, pos - A.tok0, kl, c, h);
                } else if (ATT_RING == 1u) {
                    x = pf_ring(A, ringk, pos, A.ring_cap_k, c, h);
                }
            }
            pft[t * PF_S4 + c / 4u][c % 4u] = x;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        float s[PF_TT];
        float mt = ATTEND_NEG;
        for (uint t = 0u; t < PF_TT; ++t) {
            float4 a = float4(0.0f);
            for (uint i = 0u; i < 8u; ++i) {
                a += qr[i] * pft[t * PF_S4 + c0 / 4u + i];
            }
            const float full = pf_lane_sum(a.x + a.y + a.z + a.w);
            const uint pos = t0 + t;
            const bool ok = live && pos < s1 && attend_visible(A, attend_key_pos(A, kseg, pos, h), pv);
            s[t] = ok ? full : ATTEND_NEG;
            mt = max(mt, s[t]);
        }
        const float m_new = max(m, mt);
        const float corr = precise::exp2(m - m_new);
        m = m_new;
        l *= corr;
        for (uint i = 0u; i < 8u; ++i) {
            o[i] *= corr;
        }
        for (uint t = 0u; t < PF_TT; ++t) {
            s[t] = s[t] > ATTEND_NEG ? precise::exp2(s[t] - m_new) : 0.0f;
            l += s[t];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint e = lid; e < PF_TT * width; e += WORKGROUP_SIZE) {
            const uint t = e / width;
            const uint c = e - t * width;
            const uint pos = t0 + t;
            float x = 0.0f;
            if (pos < s1) {
                if (!vring && pos < A.qv) {
                    x = v_value(A, VP, vseg, vtab, pos - A.tok0, vl, c, h);
                } else if (ATT_RING == 1u) {
                    x = pf_ring(A, ringv, pos, A.ring_cap_v, c, h);
                }
            }
            pft[t * PF_S4 + c / 4u][c % 4u] = x;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint t = 0u; t < PF_TT; ++t) {
            for (uint i = 0u; i < 8u; ++i) {
                o[i] += s[t] * pft[t * PF_S4 + c0 / 4u + i];
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (live) {
        const uint b = ((h * A.vec_total + v) * A.n_parts + part) * (ATTEND_WIDE + 2u);
        if (lid % PF_LPV == 0u) {
            partials[b] = m;
            partials[b + 1u] = l;
        }
        for (uint i = 0u; i < 8u; ++i) {
            for (uint k = 0u; k < 4u; ++k) {
                const uint c = c0 + 4u * i + k;
                if (c < width) {
                    partials[b + 2u + c] = o[i][k];
                }
            }
        }
    }
}
