// Bindings shared by kivi_dequant_keys and kivi_dequant_values (tests and tools only:
// attention reads the packed codes itself and never materializes this).
//
// @binding(0) P:      KiviParams (uniform); count = tokens, dst_offset = first block (keys)
//                     or token (values) inside the segment
// @binding(1) codes:  array<u32>  the segment's code words
// @binding(2) params: array<u32>  the segment's (scale, lo) words
// @binding(3) out:    array<f32> [count][H][D]

@group(0) @binding(0) var<uniform> P: KiviParams;
@group(0) @binding(1) var<storage, read> codes: array<u32>;
@group(0) @binding(2) var<storage, read> params: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

fn load_pair(gi: u32) -> vec2<f32> {
    if (PARAMS_F16 == 1u) {
        return unpack2x16float(params[gi]);
    }
    return vec2<f32>(bitcast<f32>(params[2u * gi]), bitcast<f32>(params[2u * gi + 1u]));
}

// Code i of the stream starting at word `base`.
fn get_code(base: u32, i: u32) -> u32 {
    let start = i * P.bits;
    let w = base + (start >> 5u);
    let off = start & 31u;
    var hi = 0u;
    if (off + P.bits > 32u) {
        hi = codes[w + 1u];
    }
    return bits_code(codes[w], hi, off, P.bits);
}
