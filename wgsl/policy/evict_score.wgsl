// evict_score, workgroup-memory variant: the lanes' sums added by a tree in workgroup memory
// (wgsl/policy/evict_score_io.wgsl: what it computes, bindings, dispatch).

var<workgroup> red: array<f32, WORKGROUP_SIZE>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let v = linear_workgroup(wg, nwg);
    if (v >= P.n * P.heads) {
        return; // uniform: depends on the workgroup only
    }
    red[lid] = score_part(v / P.heads, v % P.heads, lid);
    workgroupBarrier();
    for (var s = WORKGROUP_SIZE / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        scores[v] = score_finish(red[0]);
    }
}
