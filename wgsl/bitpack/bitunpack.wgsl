// bitunpack: dense little-endian bitstream of n codes of b bits -> codes, one byte each
// (../shared/spec/bitpack.md). Inverse of bitpack.
//
// @binding(0) params: BitpackParams (uniform)             keep in sync with src/bitpack.rs
// @binding(1) words:  array<u32> [ceil(n * b / 32)]
// @binding(2) codes:  array<u32> [ceil(n / 4)]            output: code i = byte (i % 4) of word i / 4
//
// Dispatch: one invocation per output word (4 codes), WORKGROUP_SIZE per workgroup,
// workgroups split over (x, y). Unused high bytes of the last output word are zero.
// No cross-lane operation: the same source serves the subgroup and workgroup variants.

struct BitpackParams {
    n: u32,
    bits: u32,
    n_words: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: BitpackParams;
@group(0) @binding(1) var<storage, read> words: array<u32>;
@group(0) @binding(2) var<storage, read_write> codes: array<u32>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = linear_workgroup(wg, nwg) * WORKGROUP_SIZE + lid;
    let n_out = (params.n + 3u) / 4u;
    if (t >= n_out) {
        return;
    }
    let b = params.bits;
    var out = 0u;
    for (var k = 0u; k < 4u; k++) {
        let i = t * 4u + k;
        if (i < params.n) {
            let start = i * b;
            let wi = start >> 5u;
            let off = start & 31u;
            var hi = 0u;
            if (off + b > 32u) {
                hi = words[wi + 1u];
            }
            out |= bits_code(words[wi], hi, off, b) << (8u * k);
        }
    }
    codes[t] = out;
}
