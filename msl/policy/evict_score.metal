// evict_score in MSL: the twin of wgsl/policy/evict_score_io.wgsl (what it computes, bindings,
// dispatch) with the subgroup variant's sum: one SIMD group of 32 (WORKGROUP_SIZE) per
// (token, head), simd_sum of the lanes' sums. CPU reference src/cpu/policy/evict_score.rs.
#include <metal_stdlib>
using namespace metal;

// Keep in sync with ScoreParams in src/policy/kernels.rs and wgsl/policy/evict_score_io.wgsl.
struct ScoreParams {
    uint n;
    uint heads;
    uint dim;
    uint row_words;
    uint row0;
    uint p0;
    uint p1;
    uint p2;
};

static inline float score_half(uint w, uint e) {
    return float(as_type<half>(ushort((w >> ((e & 1u) * 16u)) & 0xffffu)));
}

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void evict_score(constant ScoreParams& P [[buffer(0)]],
                        device const uint* rows [[buffer(1)]],
                        device const float* filters [[buffer(2)]],
                        device float* scores [[buffer(3)]],
                        uint3 wg [[threadgroup_position_in_grid]],
                        uint3 nwg [[threadgroups_per_grid]],
                        uint lid [[thread_index_in_threadgroup]]) {
    const uint v = wg.y * nwg.x + wg.x;
    if (v >= P.n * P.heads) {
        return;
    }
    const uint t = v / P.heads;
    const uint h = v % P.heads;
    float a = 0.0f;
    for (uint c = lid; c < P.dim; c += WORKGROUP_SIZE) {
        const uint e = h * P.dim + c;
        const float k = score_half(rows[(P.row0 + t) * P.row_words + (e >> 1u)], e);
        if (SCORE_NORM == 1u) {
            a += k * k;
        } else {
            a += k * filters[e];
        }
    }
    const float s = simd_sum(a);
    if (lid == 0u) {
        scores[v] = SCORE_NORM == 1u ? -precise::sqrt(s) : s;
    }
}
