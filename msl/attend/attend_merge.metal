// attend_merge: combines the chunks' (m, l, acc) of every (query row, query head) and
// normalizes: out = Σ_c acc_c·e^(m_c − M) / Σ_c l_c·e^(m_c − M), M = max_c m_c. Twin of
// wgsl/attend/attend_merge.wgsl; CPU reference: the single-pass online softmax of src/cpu/attend.rs
// (same result up to f32 summation order). Uses AttendParams of msl/attend/attend_core.metal.
//
// [[buffer(0)]] A:        AttendParams (constant; tq, hq, dim, nc_total used)
// [[buffer(1)]] partials: float [Tq][Hq][nc_total][D + 2]
// [[buffer(2)]] out:      float [Tq][Hq][D]
//
// Dispatch: one threadgroup of WORKGROUP_SIZE (64) per (query row, query head), linear index
// i * Hq + head. A chunk that saw no token has m = ATTEND_NEG and l = 0: its weight
// e^(NEG − M) is 0 (precise::exp: see msl/attend/attend_core.metal).

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void attend_merge(constant AttendParams& A [[buffer(0)]],
                         device const float* partials [[buffer(1)]],
                         device float* out [[buffer(2)]],
                         uint3 wg [[threadgroup_position_in_grid]],
                         uint3 nwg [[threadgroups_per_grid]],
                         uint lid [[thread_index_in_threadgroup]]) {
    const uint wid = wg.y * nwg.x + wg.x;
    if (wid >= A.tq * A.hq) {
        return;
    }
    const uint stride = A.dim + 2u;
    const uint base = wid * A.nc_total * stride;
    float m = ATTEND_NEG;
    for (uint c = 0u; c < A.nc_total; ++c) {
        m = max(m, partials[base + c * stride]);
    }
    float l = 0.0f;
    for (uint c = 0u; c < A.nc_total; ++c) {
        const uint b = base + c * stride;
        l += partials[b + 1u] * precise::exp(partials[b] - m);
    }
    for (uint d = lid; d < A.dim; d += WORKGROUP_SIZE) {
        float y = 0.0f;
        for (uint c = 0u; c < A.nc_total; ++c) {
            const uint b = base + c * stride;
            y += partials[b + 2u + d] * precise::exp(partials[b] - m);
        }
        float o = 0.0f;
        if (l > 0.0f) {
            o = y / l;
        }
        out[wid * A.dim + d] = o;
    }
}
