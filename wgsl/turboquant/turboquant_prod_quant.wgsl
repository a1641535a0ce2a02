// turboquant_prod_quant (workgroup-memory variant, no subgroup operations): read
// turboquant_prod_common.wgsl for the dispatch and the steps. Each set sign bit ORed into its
// word by one atomicOr.

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let item = linear_workgroup(wg, nwg);
    if (item >= P.items) {
        return; // uniform: depends on the workgroup only
    }
    let g = item / P.norm_words;
    let pair = item % P.norm_words;
    let nr = pq_residuals(g, pair, lid);
    for (var it = 0u; it < PQ_IT; it++) {
        let j = it * WORKGROUP_SIZE + lid;
        let dots = pq_row_dots(j);
        // @unroll 8
        for (var v = 0u; v < PQ_SL; v++) {
            if (j < PQ_M && dots[v] >= 0.0) {
                sgn_or(v * PQ_M + j, 1u);
            }
        }
    }
    workgroupBarrier();
    pq_store(g, pair, nr, lid);
}
