// evict_select, subgroup variant: lane il = subgroup_id · subgroup_size + subgroup lane takes
// chunk slot il (no assumption on how subgroups tile the invocation index); the kept flags'
// prefix sum is subgroupExclusiveAdd within a subgroup plus the earlier subgroups' totals
// through workgroup memory. Any subgroup width that divides WORKGROUP_SIZE
// (wgsl/policy/evict_select_io.wgsl: what it computes, bindings, dispatch).

var<workgroup> totals: array<u32, WORKGROUP_SIZE>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(subgroup_id) sg_id: u32,
) {
    let h = linear_workgroup(wg, nwg);
    if (h >= P.heads) {
        return; // uniform: depends on the workgroup only
    }
    let il = sg_id * sg_size + sg_lane;
    let groups = WORKGROUP_SIZE / sg_size;
    select_prologue(h, il);
    storageBarrier();
    let nth = select_threshold(h, il);
    let c_all = P.end - P.first;
    var placed = P.first; // kept units written so far
    for (var base = 0u; base < c_all; base += WORKGROUP_SIZE) {
        let c = base + il;
        var k = 0u;
        if (c < c_all) {
            k = select_kept(h, c, nth);
        }
        let within = subgroupExclusiveAdd(k);
        let total = subgroupAdd(k);
        if (sg_lane == 0u) {
            totals[sg_id] = total;
        }
        workgroupBarrier();
        var before = 0u;
        var chunk = 0u;
        for (var g = 0u; g < groups; g++) {
            before += select(0u, totals[g], g < sg_id);
            chunk += totals[g];
        }
        if (k == 1u) {
            keep[h * P.kept + placed + before + within] = P.first + c;
        }
        placed += chunk;
        workgroupBarrier(); // every lane has read the totals before the next chunk writes them
    }
}
