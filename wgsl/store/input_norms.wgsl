// input_norms: for codecs that store one f16 norm per vector (their check_rows refuses a
// vector whose L2 norm f16 cannot hold), the same check on the GPU: the sum of squares of the
// f16 row's channels in channel order (f32), its square root, flagged when not below 65520
// (what f16 rounds to Inf) in the input status's NORM mark for `side`.
//
// @binding(0) params: NormParams (uniform)
// @binding(1) rows:   array<u32> [tokens][row_words]   (input_convert's output)
// @binding(2) status: array<atomic<u32>>
//
// Dispatch: one thread per vector (token, head), WORKGROUP_SIZE (64) per workgroup, (x, y).

// keep in sync with NormParams in src/store/gpu_input.rs
struct NormParams {
    vectors: u32,
    heads: u32,
    dim: u32,
    row_words: u32,
    side: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: NormParams;
@group(0) @binding(1) var<storage, read> rows: array<u32>;
@group(0) @binding(2) var<storage, read_write> status: array<atomic<u32>>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let v = linear_workgroup(wg, nwg) * WORKGROUP_SIZE + lid;
    if (v >= params.vectors) {
        return;
    }
    let t = v / params.heads;
    let h = v % params.heads;
    var s = 0.0;
    for (var d = 0u; d < params.dim; d++) {
        let e = h * params.dim + d;
        let x = unpack2x16float(rows[t * params.row_words + e / 2u])[e % 2u];
        s = s + x * x;
    }
    let n = sqrt(s);
    if (!(n < 65520.0)) {
        atomicMax(&status[ST_NORM_MARK + params.side], 0xffffffffu - v);
    }
}
