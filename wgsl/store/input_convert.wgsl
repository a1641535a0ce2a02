// input_convert: one append's K or V from the application's buffer ([tokens, H, D] row-major,
// f16 or f32 from element `elem_offset` of the bound range) to kvpack's f16 rows
// ([tokens][row_words] u32, element 2i in the low half, an odd row padded with a zero half),
// rounding f32 to nearest even; flags the first element that is NaN, ±Inf or beyond f16's
// range in the input status (its VALUE mark for `side`).
//
// @binding(0) params: ConvertParams (uniform)
// @binding(1) input:  array<u32>  the application's range (f16 pairs or f32)
// @binding(2) rows:   array<u32> [tokens][row_words]   output
// @binding(3) status: array<atomic<u32>>  the layer's input status (input_common.wgsl)
//
// Dispatch: one thread per output word, WORKGROUP_SIZE (256) per workgroup, split over (x, y)
// by the host; grid-stride, so any workgroup count covers every word.

// keep in sync with ConvertParams in src/store/gpu_input.rs
struct ConvertParams {
    words: u32,
    row_elems: u32,
    row_words: u32,
    elem_offset: u32,
    dtype: u32,
    side: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: ConvertParams;
@group(0) @binding(1) var<storage, read> input: array<u32>;
@group(0) @binding(2) var<storage, read_write> rows: array<u32>;
@group(0) @binding(3) var<storage, read_write> status: array<atomic<u32>>;

fn input_f16_bits(flat: u32) -> u32 {
    let i = params.elem_offset + flat;
    if (params.dtype == 0u) {
        return (input[i / 2u] >> (16u * (i % 2u))) & 0xffffu;
    }
    return f32_to_f16_bits(input[i]);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let stride = nwg.x * nwg.y * WORKGROUP_SIZE;
    for (var i = linear_workgroup(wg, nwg) * WORKGROUP_SIZE + lid; i < params.words; i += stride) {
        let t = i / params.row_words;
        let w = i % params.row_words;
        var out = 0u;
        for (var j = 0u; j < 2u; j++) {
            let e = 2u * w + j;
            if (e < params.row_elems) {
                let flat = t * params.row_elems + e;
                let h = input_f16_bits(flat);
                if ((h & 0x7c00u) == 0x7c00u) {
                    atomicMax(&status[ST_VALUE_MARK + params.side], 0xffffffffu - flat);
                }
                out |= h << (16u * j);
            }
        }
        rows[i] = out;
    }
}
