// attend, workgroup-memory variant: the entry point (helpers: attend_workgroup.wgsl).

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    attend_main(lid, linear_workgroup(wg, nwg), lid);
}
