// BROKEN on purpose: butterfly max with a wrong last xor offset (2 instead of 1).
#include <metal_stdlib>
using namespace metal;

kernel void wrong_shuffle(device const float* x [[buffer(0)]],
                          device float* out [[buffer(1)]],
                          uint gid [[thread_position_in_grid]],
                          uint lane [[thread_index_in_simdgroup]]) {
    float m = x[gid];
    m = max(m, simd_shuffle_xor(m, 16));
    m = max(m, simd_shuffle_xor(m, 8));
    m = max(m, simd_shuffle_xor(m, 4));
    m = max(m, simd_shuffle_xor(m, 2));
    m = max(m, simd_shuffle_xor(m, 2)); // should be 1
    out[gid] = m;
}
