// bitunpack: dense little-endian bitstream of n codes of b bits -> codes, one byte each
// (../shared/spec/bitpack.md). Twin of wgsl/bitpack/bitunpack.wgsl; same bindings, same geometry.
//
// [[buffer(0)]] params: BitpackParams (constant)          keep in sync with src/bitpack.rs
// [[buffer(1)]] words:  uint [ceil(n * b / 32)]
// [[buffer(2)]] codes:  uint [ceil(n / 4)]                output: code i = byte (i % 4) of word i / 4
//
// Dispatch: one thread per output word (4 codes), WORKGROUP_SIZE threads per threadgroup,
// threadgroups split over (x, y).
#include <metal_stdlib>
using namespace metal;

struct BitpackParams {
    uint n;
    uint bits;
    uint n_words;
    uint pad;
};

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void bitunpack(constant BitpackParams& params [[buffer(0)]],
                      device const uint* words [[buffer(1)]],
                      device uint* codes [[buffer(2)]],
                      uint3 wg [[threadgroup_position_in_grid]],
                      uint3 nwg [[threadgroups_per_grid]],
                      uint lid [[thread_index_in_threadgroup]]) {
    const uint t = (wg.y * nwg.x + wg.x) * WORKGROUP_SIZE + lid;
    const uint n_out = (params.n + 3u) / 4u;
    if (t >= n_out) {
        return;
    }
    const uint b = params.bits;
    uint out = 0u;
    for (uint k = 0u; k < 4u; ++k) {
        const uint i = t * 4u + k;
        if (i < params.n) {
            const uint start = i * b;
            const uint wi = start >> 5u;
            const uint off = start & 31u;
            const uint hi = off + b > 32u ? words[wi + 1u] : 0u;
            out |= bits_code(words[wi], hi, off, b) << (8u * k);
        }
    }
    codes[t] = out;
}
