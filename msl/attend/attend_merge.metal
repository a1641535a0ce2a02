// The attention merge kernel (ATTEND_NAME): the splits' partial records of every query vector
// combined and normalized, the value codec's part through its finish hook. Twin of
// wgsl/attend/attend_merge.wgsl (read it: formula, roles of bindings 3 and 4, dispatch).

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void ATTEND_NAME(constant AttendParams& A [[buffer(0)]],
                        constant KParams& KP [[buffer(1)]],
                        constant VParams& VP [[buffer(2)]],
                        device const float* parts [[buffer(3)]],
                        device float* out [[buffer(4)]],
                        device const uint* kseg [[buffer(5)]],
                        device const uint* ktab [[buffer(6)]],
                        device const uint* vseg [[buffer(7)]],
                        device const uint* vtab [[buffer(8)]],
                        device const uint* ringk [[buffer(9)]],
                        device const uint* ringv [[buffer(10)]],
                        uint3 wg [[threadgroup_position_in_grid]],
                        uint3 nwg [[threadgroups_per_grid]],
                        uint lid [[thread_index_in_threadgroup]]) {
    threadgroup AttendShared S;
    const uint wid = wg.y * nwg.x + wg.x;
    if (wid >= A.hkv * A.vec_total) {
        return; // uniform
    }
    const uint h = wid / A.vec_total;
    const uint v = wid % A.vec_total;
    const uint pw = ATTEND_WIDE + 2u;
    const uint base = wid * A.n_parts * pw;
    // Eight splits per trip of each loop, their loads first (the WGSL twin's MERGE_UNROLL);
    // the sums keep split order.
    const uint last = A.n_parts - 1u;
    float mm = ATTEND_NEG;
    for (uint s0 = 0u; s0 < A.n_parts; s0 += 8u) {
        float m8[8];
        for (uint j = 0u; j < 8u; ++j) {
            m8[j] = parts[base + min(s0 + j, last) * pw];
        }
        for (uint j = 0u; j < 8u; ++j) {
            mm = max(mm, m8[j]);
        }
    }
    float ll = 0.0f;
    for (uint s0 = 0u; s0 < A.n_parts; s0 += 8u) {
        float m8[8];
        float l8[8];
        for (uint j = 0u; j < 8u; ++j) {
            const uint b = base + min(s0 + j, last) * pw;
            m8[j] = parts[b];
            l8[j] = parts[b + 1u];
        }
        for (uint j = 0u; j < 8u; ++j) {
            if (s0 + j < A.n_parts) {
                ll += l8[j] * precise::exp2(m8[j] - mm);
            }
        }
    }
    const float inv = ll > 0.0f ? 1.0f / ll : 0.0f;
    float ring[2];
    for (uint k = 0u; k < 2u; ++k) {
        const uint c = lid + k * WORKGROUP_SIZE;
        float oc = 0.0f;
        float orr = 0.0f;
        for (uint s0 = 0u; s0 < A.n_parts; s0 += 8u) {
            float m8[8];
            float x8[8];
            for (uint j = 0u; j < 8u; ++j) {
                const uint b = base + min(s0 + j, last) * pw;
                m8[j] = parts[b];
                x8[j] = parts[b + 2u + min(c, pw - 3u)];
            }
            for (uint j = 0u; j < 8u; ++j) {
                const uint s = s0 + j;
                if (s < A.n_parts) {
                    const float w = precise::exp2(m8[j] - mm);
                    if (s < A.n_parts_c) {
                        oc += x8[j] * w;
                    } else {
                        orr += x8[j] * w;
                    }
                }
            }
        }
        if (c < V_W) {
            S.fin[c] = oc * inv;
        }
        ring[k] = orr * inv;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    v_finish(A, VP, vtab, S, lid, h);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint o = ((v / A.qg) * A.hq + h * A.qg + v % A.qg) * ATTEND_DIM;
    for (uint k = 0u; k < 2u; ++k) {
        const uint c = lid + k * WORKGROUP_SIZE;
        if (c < ATTEND_DIM) {
            out[o + c] = S.fin[c] + ring[k];
        }
    }
}
