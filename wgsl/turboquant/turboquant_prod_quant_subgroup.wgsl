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
    let tok = item / P.norm_words;
    let pair = item % P.norm_words;
    let row = P.seg_token + tok;
    tq_load_codebook(lid);
    var nn = vec2<f32>(0.0);
    var rr = vec2<f32>(0.0);
    for (var v = 0u; v < 2u; v++) {
        let h = 2u * pair + v;
        let live = h < P.heads;
        let hs = min(h, P.heads - 1u);
        let nr = pq_residual(P.src_start + tok, h, hs, live, (row * P.heads + hs) * TRW, lid);
        for (var it = 0u; it < PQ_IT; it++) {
            let j = it * WORKGROUP_SIZE + lid;
            let dot = pq_row_dot(j);
            sgn_ballot(j, j < PQ_M && dot >= 0.0, sgi, sgs);
        }
        workgroupBarrier();
        pq_store_signs(row, hs, live, lid);
        nn[v] = nr.x;
        rr[v] = select(0.0, nr.y, live); // an absent head's half stays 0 (its residual is not)
        workgroupBarrier(); // the next vector reuses tq_x, tq_c, pq_u and the sign row
    }
    if (lid == 0u) {
        norms[row * P.norm_words + pair] = tq_f16_bits(nn.x) | (tq_f16_bits(nn.y) << 16u);
        rhos[row * P.norm_words + pair] = tq_f16_bits(rr.x) | (tq_f16_bits(rr.y) << 16u);
    }
}
