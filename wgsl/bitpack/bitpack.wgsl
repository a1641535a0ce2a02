// bitpack: n codes of b bits -> one dense little-endian bitstream in u32 words
// (../shared/spec/bitpack.md). Code i occupies stream bits [i*b, (i+1)*b); bit k of the stream
// is bit (k % 32) of word k / 32; codes may straddle two words; unused high bits are zero.
//
// @binding(0) params: BitpackParams (uniform)             keep in sync with src/bitpack.rs
// @binding(1) codes:  array<u32> [ceil(n / 4)]            code i = byte (i % 4) of word i / 4
// @binding(2) words:  array<u32> [ceil(n * b / 32)]       output
//
// Dispatch: one invocation per output word, WORKGROUP_SIZE per workgroup, workgroups split
// over (x, y). Codes are masked to b bits (the host API rejects codes >= 2^b beforehand).
// No cross-lane operation: the same source serves the subgroup and workgroup variants.

struct BitpackParams {
    n: u32,        // number of codes
    bits: u32,     // b, 1..=8
    n_words: u32,  // ceil(n * b / 32)
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: BitpackParams;
@group(0) @binding(1) var<storage, read> codes: array<u32>;
@group(0) @binding(2) var<storage, read_write> words: array<u32>;

fn code_at(i: u32) -> u32 {
    return (codes[i >> 2u] >> ((i & 3u) * 8u)) & 0xffu;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let w = linear_workgroup(wg, nwg) * WORKGROUP_SIZE + lid;
    if (w >= params.n_words) {
        return;
    }
    let b = params.bits;
    let mask = (1u << b) - 1u;
    let bit0 = w * 32u;
    let end_bit = min(bit0 + 32u, params.n * b);
    let first = bit0 / b;
    let last = (end_bit + b - 1u) / b; // exclusive
    var acc = 0u;
    for (var i = first; i < last; i++) {
        let c = code_at(i) & mask;
        let start = i * b;
        if (start >= bit0) {
            acc |= c << (start - bit0);
        } else {
            acc |= c >> (bit0 - start);
        }
    }
    words[w] = acc;
}
