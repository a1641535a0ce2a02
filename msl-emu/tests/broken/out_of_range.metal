// BROKEN on purpose: reads one element past the end (no `gid + 1 < n` guard).
#include <metal_stdlib>
using namespace metal;

kernel void out_of_range(device const uint* a [[buffer(0)]],
                         device uint* out [[buffer(1)]],
                         uint gid [[thread_position_in_grid]]) {
    out[gid] = a[gid] + a[gid + 1];
}
