// Structs through device pointers, pointer arithmetic, half buffers, float4 loads, a helper
// function taking device and threadgroup pointers, 2-D threadgroups.
#include <metal_stdlib>
using namespace metal;

struct Item {
    float scale;
    uint offset;
    half2 hv;
};

static float apply(device const Item* it, threadgroup const float* tile, uint k) {
    return tile[k] * it->scale + (float)it->offset + (float)(it->hv.x + it->hv.y);
}

kernel void structs(device const Item* items [[buffer(0)]],
                    device const float4* v [[buffer(1)]],
                    device half* out [[buffer(2)]],
                    uint2 lid [[thread_position_in_threadgroup]],
                    uint2 tpg [[threads_per_threadgroup]],
                    uint2 gid [[thread_position_in_grid]],
                    uint2 grid [[threads_per_grid]]) {
    threadgroup float tile[4][8];
    const uint k = gid.y * grid.x + gid.x;
    const float4 q = v[k];
    tile[lid.y][lid.x] = q.x + q.y + q.z + q.w;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    threadgroup const float* row = tile[lid.y];
    device const Item* it = items + (k % 3);
    const float r = apply(it, row, (lid.x + 1) % tpg.x);
    *(out + k) = (half)r;
}
