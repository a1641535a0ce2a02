// Threadgroup atomics: a 16-bin histogram of the low 4 bits of a block's values, counted with
// atomic_fetch_add_explicit (whose return values are summed, so they are used), then written
// out after a barrier. One threadgroup per block of TG threads.
#include <metal_stdlib>
using namespace metal;

#define TG 128

struct Params {
    uint n;
};

[[max_total_threads_per_threadgroup(TG)]]
kernel void tg_histogram(constant Params& p [[buffer(0)]],
                         device const uint* a [[buffer(1)]],
                         device uint* hist [[buffer(2)]],
                         device uint* olds [[buffer(3)]],
                         uint gid [[thread_position_in_grid]],
                         uint lid [[thread_position_in_threadgroup]],
                         uint grp [[threadgroup_position_in_grid]]) {
    threadgroup atomic_uint bins[16];
    if (lid < 16u) {
        atomic_store_explicit(&bins[lid], 0u, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (gid < p.n) {
        olds[gid] = atomic_fetch_add_explicit(&bins[a[gid] & 15u], 1u, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (lid < 16u) {
        hist[grp * 16u + lid] = atomic_load_explicit(&bins[lid], memory_order_relaxed);
    }
}
