// kivi_quant_values (subgroup variant): as wgsl/kivi/kivi_quant_values.wgsl (8 slices of 32
// invocations per workgroup, one value group per slice), but min/max is a subgroupShuffleXor
// butterfly over offsets below min(subgroup size, 32); when subgroups are narrower than a
// slice (lavapipe: 8) the partials of a slice's subgroups are combined in workgroup memory.
// Correct for any subgroup width that tiles the workgroup in order (invocation index =
// subgroup_id * subgroup_size + subgroup_invocation_id); a device that lays subgroups out
// otherwise sets status bit 1 (the host reports it, never silently).
// Every subgroup operation and barrier is in uniform control flow: slices past the end run
// them with neutral values and store nothing.

const SLICES: u32 = WORKGROUP_SIZE / 32u;
const MAX_GROUP: u32 = 256u;
const PER_LANE: u32 = MAX_GROUP / 32u;

var<workgroup> part_lo: array<f32, WORKGROUP_SIZE>;
var<workgroup> part_hi: array<f32, WORKGROUP_SIZE>;
var<workgroup> group_codes: array<u32, 2048>; // [SLICES][MAX_GROUP]

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(subgroup_id) sg_id: u32,
) {
    let slice = lid / 32u;
    let lane = lid % 32u;
    let g = linear_workgroup(wg, nwg) * SLICES + slice;
    let valid = g < P.count * P.heads * P.n_groups;
    if (lid != sg_id * sg_size + sg_lane) {
        atomicOr(&status[0], 2u);
    }
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
    let width = min(sg_size, 32u);
    for (var off = 1u; off < width; off <<= 1u) {
        lo = min(lo, subgroupShuffleXor(lo, off));
        hi = max(hi, subgroupShuffleXor(hi, off));
    }
    // Subgroups narrower than 32 tile the slice: every lane of one holds its partial, so the
    // slice combines lanes 0, width, 2 * width, ... (no iteration when width is 32).
    part_lo[lid] = lo;
    part_hi[lid] = hi;
    workgroupBarrier();
    lo = part_lo[slice * 32u];
    hi = part_hi[slice * 32u];
    for (var k = width; k < 32u; k += width) {
        lo = min(lo, part_lo[slice * 32u + k]);
        hi = max(hi, part_hi[slice * 32u + k]);
    }
    quantize_and_store(valid, slice, lane, t, h, j, n, &xs, lo, hi);
}
