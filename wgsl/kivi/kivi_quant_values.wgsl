// kivi_quant_values (workgroup-memory variant): per-token value quantization, fused.
// Layout: src/codecs/kivi/layout.rs. CPU reference: src/cpu/kivi/kivi_quant_values.rs.
// Bindings: wgsl/kivi/kivi_quant_io.wgsl.
//
// Dispatch: workgroups of WORKGROUP_SIZE (256) invocations = 8 slices of 32; slice s of
// workgroup w owns group g = w * 8 + s, g = (token * H + head) * n_groups + group (groups of
// at most 256 channels, the last one of a row ragged when Gv does not divide D).
// Lane l of a slice loads channels l, l + 32, ... once (kept in registers), min/max is a tree
// in workgroup memory, each lane writes its codes to workgroup memory, and after a barrier
// lane l assembles words l, l + 32, ... of the group stream. Slices past the end take part in
// every barrier but load and store nothing, so all barriers are in uniform control flow.

const SLICES: u32 = WORKGROUP_SIZE / 32u;
const MAX_GROUP: u32 = 256u;
const PER_LANE: u32 = MAX_GROUP / 32u;

var<workgroup> red_lo: array<f32, WORKGROUP_SIZE>;
var<workgroup> red_hi: array<f32, WORKGROUP_SIZE>;
var<workgroup> group_codes: array<u32, 2048>; // [SLICES][MAX_GROUP]

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let slice = lid / 32u;
    let lane = lid % 32u;
    let g = linear_workgroup(wg, nwg) * SLICES + slice;
    let valid = g < P.count * P.heads * P.n_groups;
    let j = g % P.n_groups;
    let th = g / P.n_groups;
    let h = th % P.heads;
    let t = th / P.heads;
    let s = P.src_start + t;
    let c0 = j * P.group;
    var n = 0u;
    if (valid) {
        n = min(P.group, P.dim - c0);
    }
    let e0 = h * P.dim + c0;

    var xs: array<f32, PER_LANE>;
    var lo = 3.0e38;
    var hi = -3.0e38;
    for (var k = 0u; k < PER_LANE; k++) {
        let c = lane + 32u * k;
        if (c < n) {
            let x = load_x(s, e0 + c);
            xs[k] = x;
            lo = min(lo, x);
            hi = max(hi, x);
        }
    }
    red_lo[lid] = lo;
    red_hi[lid] = hi;
    workgroupBarrier();
    for (var off = 16u; off > 0u; off >>= 1u) {
        if (lane < off) {
            red_lo[lid] = min(red_lo[lid], red_lo[lid + off]);
            red_hi[lid] = max(red_hi[lid], red_hi[lid + off]);
        }
        workgroupBarrier();
    }
    lo = red_lo[slice * 32u];
    hi = red_hi[slice * 32u];
    quantize_and_store(valid, slice, lane, t, h, j, n, &xs, lo, hi);
}
