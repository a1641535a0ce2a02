// evict_score, subgroup variant: each subgroup adds its lanes' sums (subgroupAdd, any width
// the adapter reports), then lane 0 adds the subgroups' sums in order through workgroup memory
// (wgsl/policy/evict_score_io.wgsl: what it computes, bindings, dispatch).

var<workgroup> red: array<f32, WORKGROUP_SIZE>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_invocation_id) sgl: u32,
) {
    let v = linear_workgroup(wg, nwg);
    if (v >= P.n * P.heads) {
        return; // uniform: depends on the workgroup only
    }
    let s = subgroupAdd(score_part(v / P.heads, v % P.heads, lid));
    // Every lane writes (workgroup memory is not assumed zeroed): its subgroup's sum once.
    red[lid] = select(0.0, s, sgl == 0u);
    workgroupBarrier();
    if (lid == 0u) {
        var a = 0.0;
        for (var i = 0u; i < WORKGROUP_SIZE; i++) {
            a += red[i];
        }
        scores[v] = score_finish(a);
    }
}
