// BROKEN on purpose: lanes of one SIMD group call different SIMD-group functions.
#include <metal_stdlib>
using namespace metal;

kernel void divergent_simd(device const float* x [[buffer(0)]],
                           device float* out [[buffer(1)]],
                           uint gid [[thread_position_in_grid]],
                           uint lane [[thread_index_in_simdgroup]]) {
    float v = x[gid];
    if (lane < 16) {
        v = simd_sum(v);
    } else {
        v = simd_max(v);
    }
    out[gid] = v;
}
