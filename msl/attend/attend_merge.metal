// The attention merge kernel (ATTEND_NAME): the splits' partial records of every query vector
// combined and normalized, the value codec's part through its finish hook. Twin of
// wgsl/attend/attend_merge.wgsl (read it: formula, roles of bindings 3 and 4, dispatch).

// Splits whose words a lane loads before adding any (a divisor of WORKGROUP_SIZE), and whether a
// lane serves a second channel (lid + WORKGROUP_SIZE): the WGSL twin's MG_U, MG_TWO.
constant constexpr uint ATTEND_MG_U = 16u;
constant constexpr bool ATTEND_MG_TWO = ATTEND_WIDE > WORKGROUP_SIZE;

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
    const uint last = A.n_parts - 1u;
    // The WGSL twin's mapping: M across the lanes and a tree; then per chunk of WORKGROUP_SIZE
    // splits, one weight per lane (mgw, mgl) and every lane walking the chunk in split order,
    // ATTEND_MG_U splits' words loaded together (a second channel only where ATTEND_MG_TWO).
    threadgroup float mgw[WORKGROUP_SIZE];
    threadgroup float mgl[WORKGROUP_SIZE];
    float mx = ATTEND_NEG;
    for (uint s = lid; s < A.n_parts; s += WORKGROUP_SIZE) {
        mx = max(mx, parts[base + s * pw]);
    }
    mgw[lid] = mx;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint n = WORKGROUP_SIZE / 2u; n > 0u; n >>= 1u) {
        if (lid < n) {
            mgw[lid] = max(mgw[lid], mgw[lid + n]);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    const float mm = mgw[0];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint c0 = 2u + min(lid, pw - 3u);
    const uint c1 = 2u + min(lid + WORKGROUP_SIZE, pw - 3u);
    float4 acc = float4(0.0f); // codec part of channels c0, c1; ring part of c0, c1
    float ll = 0.0f;
    for (uint s0 = 0u; s0 < A.n_parts; s0 += WORKGROUP_SIZE) {
        float w = 0.0f;
        float lw = 0.0f;
        if (s0 + lid < A.n_parts) {
            const uint b = base + (s0 + lid) * pw;
            w = precise::exp2(parts[b] - mm);
            lw = parts[b + 1u] * w;
        }
        mgw[lid] = w;
        mgl[lid] = lw;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        const uint n = min(A.n_parts - s0, uint(WORKGROUP_SIZE));
        for (uint j = 0u; j < n; j += ATTEND_MG_U) {
            float x0[ATTEND_MG_U];
            float x1[ATTEND_MG_U];
            for (uint i = 0u; i < ATTEND_MG_U; ++i) {
                const uint b = base + min(s0 + j + i, last) * pw;
                x0[i] = parts[b + c0];
                x1[i] = ATTEND_MG_TWO ? parts[b + c1] : 0.0f;
            }
            for (uint i = 0u; i < ATTEND_MG_U; ++i) {
                const float wi = mgw[j + i];
                ll += mgl[j + i];
                if (s0 + j + i < A.n_parts_c) {
                    acc.x += x0[i] * wi;
                    acc.y += x1[i] * wi;
                } else {
                    acc.z += x0[i] * wi;
                    acc.w += x1[i] * wi;
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    const float inv = ll > 0.0f ? 1.0f / ll : 0.0f;
    if (lid < V_W) {
        S.fin[lid] = acc.x * inv;
    }
    if (lid + WORKGROUP_SIZE < V_W) {
        S.fin[lid + WORKGROUP_SIZE] = acc.y * inv;
    }
    const float2 ring = float2(acc.z, acc.w) * inv;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    v_finish(A, VP, vtab, S, lid, h);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint o = ((v / A.qg) * A.hq + h * A.qg + v % A.qg) * ATTEND_DIM;
    if (lid < ATTEND_DIM) {
        out[o + lid] = S.fin[lid] + ring.x;
    }
    if (lid + WORKGROUP_SIZE < ATTEND_DIM) {
        out[o + lid + WORKGROUP_SIZE] = S.fin[lid + WORKGROUP_SIZE] + ring.y;
    }
}
