// evict_select, workgroup-memory variant: the kept flags' prefix sum is a Hillis–Steele scan in
// workgroup memory (wgsl/policy/evict_select_io.wgsl: what it computes, bindings, dispatch).

var<workgroup> scan: array<u32, WORKGROUP_SIZE>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let h = linear_workgroup(wg, nwg);
    if (h >= P.heads) {
        return; // uniform: depends on the workgroup only
    }
    select_prologue(h, lid);
    storageBarrier();
    let nth = select_threshold(h, lid);
    let c_all = P.end - P.first;
    var placed = P.first; // kept units written so far
    for (var base = 0u; base < c_all; base += WORKGROUP_SIZE) {
        let c = base + lid;
        var k = 0u;
        if (c < c_all) {
            k = select_kept(h, c, nth);
        }
        scan[lid] = k;
        workgroupBarrier();
        for (var off = 1u; off < WORKGROUP_SIZE; off <<= 1u) {
            var v = 0u;
            if (lid >= off) {
                v = scan[lid - off];
            }
            workgroupBarrier();
            scan[lid] += v;
            workgroupBarrier();
        }
        if (k == 1u) {
            keep[h * P.kept + placed + scan[lid] - 1u] = P.first + c;
        }
        placed += scan[WORKGROUP_SIZE - 1u];
        workgroupBarrier(); // every lane has read the scan before the next chunk writes it
    }
}
