// subgroup_probe: do subgroups tile the workgroup in invocation order, i.e. is
// local_invocation_index == subgroup_id * subgroup_size + subgroup_invocation_id for every
// invocation? kvpack's subgroup variants assume it (a slice of 32 invocations holds whole
// subgroups). Run once per device by src/gpu/probe.rs; any mismatch sets flags[0].
//
// @binding(0) flags: array<atomic<u32>> [1]
// Dispatch: a few workgroups of WORKGROUP_SIZE.

@group(0) @binding(0) var<storage, read_write> flags: array<atomic<u32>>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(subgroup_id) sg_id: u32,
) {
    if (lid != sg_id * sg_size + sg_lane) {
        atomicOr(&flags[0], 1u);
    }
}
