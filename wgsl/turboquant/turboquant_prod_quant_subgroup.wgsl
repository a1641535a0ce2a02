// turboquant_prod_quant (subgroup variant): read turboquant_prod_common.wgsl for the dispatch
// and the steps. A pass's sign bits by one subgroupBallot per subgroup
// (wgsl/common/sign_ballot.wgsl); the vector stays in workgroup memory (n and ρ by invocation 0
// in index order: bit-exact with the CPU reference).

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_invocation_id) sgi: u32,
    @builtin(subgroup_size) sgs: u32,
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
            // Vector v's row j at bit v·m + j: a subgroup's rows stay consecutive.
            sgn_ballot(v * PQ_M + j, j < PQ_M && dots[v] >= 0.0, sgi, sgs);
        }
    }
    workgroupBarrier();
    pq_store(g, pair, nr, lid);
}
