// BROKEN on purpose: lanes return before a threadgroup_barrier the others wait at.
#include <metal_stdlib>
using namespace metal;

kernel void early_return_barrier(constant uint& n [[buffer(0)]],
                                 device float* out [[buffer(1)]],
                                 uint gid [[thread_position_in_grid]],
                                 uint lid [[thread_index_in_threadgroup]]) {
    threadgroup float t[64];
    if (gid >= n) {
        return;
    }
    t[lid] = (float)gid;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[gid] = t[63 - lid];
}
