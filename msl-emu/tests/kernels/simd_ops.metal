// Exercises the SIMD-group functions, with lanes >= `live` returned early (inactive).
#include <metal_stdlib>
using namespace metal;

kernel void simd_ops(constant uint& live [[buffer(0)]],
                     device const int* x [[buffer(1)]],
                     device int* out [[buffer(2)]],
                     uint tid [[thread_index_in_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]]) {
    if (lane >= live) {
        return;
    }
    const int v = x[tid];
    device int* o = out + tid * 12;
    o[0] = simd_sum(v);
    o[1] = simd_min(v);
    o[2] = simd_max(v);
    o[3] = simd_prefix_exclusive_sum(v);
    o[4] = simd_broadcast(v, 3);
    o[5] = simd_broadcast_first(v + 1);
    o[6] = simd_shuffle_up(v, 1);
    o[7] = simd_shuffle_down(v, 2);
    o[8] = simd_shuffle(v, (lane + 1) % live);
    o[9] = (int)(ulong)simd_ballot(v > 0);
    o[10] = simd_any(v == 7) ? 1 : 0;
    o[11] = simd_or(v);
}
