// Threadgroup-memory tree reduction (sum of uints, max of floats) with barriers, plus a
// neighbour exchange through threadgroup memory. One threadgroup per block of TG threads.
#include <metal_stdlib>
using namespace metal;

#define TG 256

struct Params {
    uint n;
};

[[max_total_threads_per_threadgroup(TG)]]
kernel void tg_reduce(constant Params& p [[buffer(0)]],
                      device const uint* a [[buffer(1)]],
                      device const float* f [[buffer(2)]],
                      device uint* sums [[buffer(3)]],
                      device float* maxes [[buffer(4)]],
                      device uint* shifted [[buffer(5)]],
                      uint gid [[thread_position_in_grid]],
                      uint lid [[thread_position_in_threadgroup]],
                      uint grp [[threadgroup_position_in_grid]]) {
    threadgroup uint su[TG];
    threadgroup float sm[TG];
    const uint v = gid < p.n ? a[gid] : 0u;
    su[lid] = v;
    sm[lid] = gid < p.n ? f[gid] : -3.0e38;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // neighbour read: needs the barrier above
    if (gid < p.n) {
        shifted[gid] = su[(lid + 1u) % TG];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = TG / 2; s > 0; s >>= 1) {
        if (lid < s) {
            su[lid] += su[lid + s];
            sm[lid] = max(sm[lid], sm[lid + s]);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (lid == 0) {
        sums[grp] = su[0];
        maxes[grp] = sm[0];
    }
}
