// evict_compact in MSL: the twin of wgsl/policy/evict_compact.wgsl (what it computes, the
// stream layout, bindings, dispatch). CPU twin src/cpu/policy/evict_compact.rs.
#include <metal_stdlib>
using namespace metal;

// Keep in sync with CompactParams in src/policy/kernels.rs and wgsl/policy/evict_compact.wgsl.
struct CompactParams {
    uint src0;
    uint row_words;
    uint unit_rows;
    uint head_bits;
    uint heads;
    uint kept;
    uint keep_of;
    uint words;
};

static inline uint compact_mask(uint lo, uint hi) {
    const uint top = hi == 32u ? 0xffffffffu : (1u << hi) - 1u;
    return top & ~((1u << lo) - 1u);
}

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void evict_compact(constant CompactParams& P [[buffer(0)]],
                          device const uint* src [[buffer(1)]],
                          device const uint* keep [[buffer(2)]],
                          device uint* dst [[buffer(3)]],
                          uint3 wg [[threadgroup_position_in_grid]],
                          uint3 nwg [[threadgroups_per_grid]],
                          uint lid [[thread_index_in_threadgroup]]) {
    const uint unit_words = P.unit_rows * P.row_words;
    const uint w = (wg.y * nwg.x + wg.x) * WORKGROUP_SIZE + lid;
    if (w >= P.words - (P.keep_of - P.kept) * unit_words) {
        return;
    }
    const uint u = w / unit_words;
    const uint within = w % unit_words;
    if (u >= P.kept) {
        dst[w] = src[P.src0 + (u - P.kept + P.keep_of) * unit_words + within];
        return;
    }
    const uint r = within / P.row_words;
    const uint c = within % P.row_words;
    uint out = 0u;
    uint b = c * 32u;
    const uint end = b + 32u;
    while (b < end) {
        const uint h = b / P.head_bits;
        uint su = u;
        uint stop = end;
        if (h < P.heads) {
            su = keep[h * P.kept + u];
            stop = min(end, (h + 1u) * P.head_bits);
        }
        const uint word = src[P.src0 + (su * P.unit_rows + r) * P.row_words + c];
        out |= word & compact_mask(b - c * 32u, stop - c * 32u);
        b = stop;
    }
    dst[w] = out;
}
