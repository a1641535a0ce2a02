// attend_kivi / attend_f16, workgroup-memory variant: the entry point and the slice
// reductions of the attention core (wgsl/attend/attend_core.wgsl) as trees in workgroup memory.
// Bindings and dispatch: wgsl/attend/attend_core.wgsl and the codec file.

fn slice_reduce(v: f32, lid: u32, is_max: bool) -> f32 {
    scratch[lid] = v;
    workgroupBarrier();
    let lane = lid % 32u;
    for (var off = 16u; off > 0u; off >>= 1u) {
        if (lane < off) {
            let a = scratch[lid];
            let b = scratch[lid + off];
            scratch[lid] = select(a + b, max(a, b), is_max);
        }
        workgroupBarrier();
    }
    let r = scratch[lid - lane];
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
) {
    attend_main(lid, linear_workgroup(wg, nwg));
}
