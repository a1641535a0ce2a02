// BROKEN on purpose: threadgroup array indexed one past its end.
#include <metal_stdlib>
using namespace metal;

kernel void tg_out_of_range(device float* out [[buffer(0)]],
                            uint lid [[thread_index_in_threadgroup]]) {
    threadgroup float t[32];
    t[lid] = 1.0;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[lid] = t[lid + 1];
}
