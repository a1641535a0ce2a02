// input_finish: after input_convert (and input_norms) of both sides of one append, records
// the first problem in the layer's input status (kind, index, raw bits, the token's row) and
// sets the sticky REJECTED word, unless an earlier append was already rejected.
//
// @binding(0) params:  FinishParams (uniform)
// @binding(1) k_input: array<u32>  the application's key range
// @binding(2) v_input: array<u32>  the application's value range
// @binding(3) k_rows:  array<u32> [tokens][row_words]
// @binding(4) v_rows:  array<u32> [tokens][row_words]
// @binding(5) status:  array<u32>
//
// Dispatch: one workgroup; thread 0 does the work.

// keep in sync with FinishParams in src/store/gpu_input.rs
struct FinishParams {
    t_old: u32,
    heads: u32,
    row_words: u32,
    _pad0: u32,
    elem_offset: vec2<u32>,
    dtype: vec2<u32>,
}

@group(0) @binding(0) var<uniform> params: FinishParams;
@group(0) @binding(1) var<storage, read> k_input: array<u32>;
@group(0) @binding(2) var<storage, read> v_input: array<u32>;
@group(0) @binding(3) var<storage, read> k_rows: array<u32>;
@group(0) @binding(4) var<storage, read> v_rows: array<u32>;
@group(0) @binding(5) var<storage, read_write> status: array<u32>;

fn raw_bits(side: u32, flat: u32) -> u32 {
    let i = params.elem_offset[side] + flat;
    if (params.dtype[side] == 0u) {
        var w = 0u;
        if (side == 0u) { w = k_input[i / 2u]; } else { w = v_input[i / 2u]; }
        return (w >> (16u * (i % 2u))) & 0xffffu;
    }
    if (side == 0u) { return k_input[i]; }
    return v_input[i];
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(local_invocation_index) lid: u32) {
    if (lid != 0u || status[ST_REJECTED] != 0u) {
        return;
    }
    for (var kind = 0u; kind < 4u; kind++) {
        let mark = status[ST_VALUE_MARK + kind];
        if (mark == 0u) {
            continue;
        }
        let index = 0xffffffffu - mark;
        let side = kind % 2u;
        status[ST_T_OLD] = params.t_old;
        status[ST_KIND] = kind;
        status[ST_INDEX] = index;
        if (kind < 2u) {
            status[ST_RAW] = raw_bits(side, index);
            status[ST_DTYPE] = params.dtype[side];
        } else {
            let t = index / params.heads;
            for (var w = 0u; w < params.row_words; w++) {
                if (side == 0u) {
                    status[ST_ROW + w] = k_rows[t * params.row_words + w];
                } else {
                    status[ST_ROW + w] = v_rows[t * params.row_words + w];
                }
            }
        }
        status[ST_REJECTED] = 1u;
        return;
    }
}
