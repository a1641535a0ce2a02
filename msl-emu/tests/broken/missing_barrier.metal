// BROKEN on purpose: neighbour read through threadgroup memory without threadgroup_barrier.
#include <metal_stdlib>
using namespace metal;

kernel void missing_barrier(device const uint* a [[buffer(0)]],
                            device uint* out [[buffer(1)]],
                            uint gid [[thread_position_in_grid]],
                            uint lid [[thread_index_in_threadgroup]],
                            uint n [[threads_per_threadgroup]]) {
    threadgroup uint tile[256];
    tile[lid] = a[gid];
    // threadgroup_barrier(mem_flags::mem_threadgroup);   <- missing
    out[gid] = tile[(lid + 1u) % n];
}
