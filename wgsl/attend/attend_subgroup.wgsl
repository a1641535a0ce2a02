// attend_kivi / attend_f16, subgroup variant: slice reductions (32 invocations = one query
// head) by a subgroupShuffleXor butterfly over offsets below min(subgroup size, 32); when
// subgroups are narrower than a slice (lavapipe: 8) their results are combined in workgroup
// memory. Needs subgroups laid out in invocation order (invocation = subgroup_id *
// subgroup_size + subgroup_invocation_id): the context probes that once per device and does
// not offer this variant where it fails (src/gpu/probe.rs).
// Bindings and dispatch: wgsl/attend/attend_core.wgsl and the codec file.

var<private> SG_WIDTH: u32;

fn slice_reduce(v: f32, lid: u32, is_max: bool) -> f32 {
    var x = v;
    for (var off = 1u; off < SG_WIDTH; off <<= 1u) {
        let y = subgroupShuffleXor(x, off);
        x = select(x + y, max(x, y), is_max);
    }
    if (ATT_SG_WIDE == 1u) {
        return x; // the whole slice is one subgroup: the butterfly already reduced it
    }
    scratch[lid] = x;
    workgroupBarrier();
    let first = lid - lid % 32u;
    var r = scratch[first];
    for (var k = SG_WIDTH; k < 32u; k += SG_WIDTH) {
        let y = scratch[first + k];
        r = select(r + y, max(r, y), is_max);
    }
    workgroupBarrier();
    return r;
}

fn slice_max(v: f32, lid: u32) -> f32 {
    return slice_reduce(v, lid, true);
}

fn slice_sum(v: f32, lid: u32) -> f32 {
    return slice_reduce(v, lid, false);
}

@compute @workgroup_size(128)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_size) sg_size: u32,
) {
    SG_WIDTH = min(sg_size, 32u);
    attend_main(lid, linear_workgroup(wg, nwg));
}
