// Per-row min/max with a simd_shuffle_xor butterfly (the shape of a per-token quantizer),
// cross-checked against simd_min/simd_max. One SIMD group (32 lanes) per row of `cols` floats.
#include <metal_stdlib>
using namespace metal;

struct Params {
    uint rows;
    uint cols;
};

[[max_total_threads_per_threadgroup(64)]]
kernel void simd_minmax(constant Params& p [[buffer(0)]],
                        device const float* x [[buffer(1)]],
                        device float2* out [[buffer(2)]],
                        device uint* agree [[buffer(3)]],
                        uint3 tg [[threadgroup_position_in_grid]],
                        ushort lane [[thread_index_in_simdgroup]],
                        ushort sg [[simdgroup_index_in_threadgroup]],
                        ushort sgs [[simdgroups_per_threadgroup]]) {
    const uint row = tg.x * sgs + sg;
    if (row >= p.rows) {
        return;
    }
    float lo = INFINITY;
    float hi = -INFINITY;
    for (uint c = lane; c < p.cols; c += 32u) {
        const float v = x[row * p.cols + c];
        lo = min(lo, v);
        hi = max(hi, v);
    }
    for (ushort off = 16; off > 0; off >>= 1) {
        lo = min(lo, simd_shuffle_xor(lo, off));
        hi = max(hi, simd_shuffle_xor(hi, off));
    }
    const float lo2 = simd_min(lo);
    const float hi2 = simd_max(hi);
    const bool same = simd_all(lo == lo2 && hi == hi2);
    if (lane == 0) {
        out[row] = float2(lo, hi);
        agree[row] = same ? 1u : 0u;
    }
}
