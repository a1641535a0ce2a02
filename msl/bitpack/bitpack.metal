// bitpack: n codes of b bits -> one dense little-endian bitstream in u32 words
// (../shared/spec/bitpack.md). Twin of wgsl/bitpack/bitpack.wgsl; same bindings, same geometry.
//
// [[buffer(0)]] params: BitpackParams (constant)          keep in sync with src/bitpack.rs
// [[buffer(1)]] codes:  uint [ceil(n / 4)]                code i = byte (i % 4) of word i / 4
// [[buffer(2)]] words:  uint [ceil(n * b / 32)]           output
//
// Dispatch: one thread per output word, WORKGROUP_SIZE threads per threadgroup (a #define
// the host prepends), threadgroups split over (x, y). Codes are masked to b bits.
#include <metal_stdlib>
using namespace metal;

struct BitpackParams {
    uint n;
    uint bits;
    uint n_words;
    uint pad;
};

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void bitpack(constant BitpackParams& params [[buffer(0)]],
                    device const uint* codes [[buffer(1)]],
                    device uint* words [[buffer(2)]],
                    uint3 wg [[threadgroup_position_in_grid]],
                    uint3 nwg [[threadgroups_per_grid]],
                    uint lid [[thread_index_in_threadgroup]]) {
    const uint w = (wg.y * nwg.x + wg.x) * WORKGROUP_SIZE + lid;
    if (w >= params.n_words) {
        return;
    }
    const uint b = params.bits;
    const uint mask = (1u << b) - 1u;
    const uint bit0 = w * 32u;
    const uint end_bit = min(bit0 + 32u, params.n * b);
    const uint first = bit0 / b;
    const uint last = (end_bit + b - 1u) / b;
    uint acc = 0u;
    for (uint i = first; i < last; ++i) {
        const uint c = ((codes[i >> 2u] >> ((i & 3u) * 8u)) & 0xffu) & mask;
        const uint start = i * b;
        if (start >= bit0) {
            acc |= c << (start - bit0);
        } else {
            acc |= c >> (bit0 - start);
        }
    }
    words[w] = acc;
}
