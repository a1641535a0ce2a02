// attend, subgroup variant: the entry point (helpers: attend_subgroup.wgsl).

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) sgl: u32,
) {
    SGW = min(sg_size, 32u);
    attend_main(lid, linear_workgroup(wg, nwg), sgl);
}
