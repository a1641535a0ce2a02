// qjl_encode (subgroup variant): read wgsl/qjl/qjl_encode_io.wgsl for the dispatch and the
// steps. The norm by subgroupAdd and one workgroup word per subgroup; a pass's sign bits by
// one subgroupBallot per subgroup (wgsl/common/sign_ballot.wgsl; one pass's 64 rows may be
// one subgroup's part, or several subgroups' whole).

var<workgroup> qred: array<f32, WORKGROUP_SIZE>;

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
    var nn = vec2<f32>(0.0);
    for (var v = 0u; v < 2u; v++) {
        let h = 2u * pair + v;
        let live = h < P.heads;
        workgroupBarrier(); // the previous head's qx, sign words and qred are read
        qjl_load(P.src_start + tok, h, live, lid);
        workgroupBarrier();
        var ss = 0.0;
        for (var d = lid; d < QD; d += WORKGROUP_SIZE) {
            ss += qx[d] * qx[d];
        }
        let sub = subgroupAdd(ss);
        qred[lid] = select(0.0, sub, sgi == 0u);
        workgroupBarrier();
        var tot = 0.0;
        for (var i = 0u; i < WORKGROUP_SIZE; i += min(sgs, WORKGROUP_SIZE)) {
            tot += qred[i];
        }
        nn[v] = sqrt(tot);
        for (var it = 0u; it < QIT; it++) {
            let r = it * WORKGROUP_SIZE + lid;
            let dot = qjl_row_dot(r);
            let bit = r < QM && dot >= 0.0; // @qjl-tail
            sgn_ballot(r, bit, sgi, sgs);
        }
        workgroupBarrier();
        qjl_store(P.seg_token + tok, h, live, lid);
    }
    if (lid == 0u) {
        norms[(P.seg_token + tok) * P.norm_words + pair] = pack2x16float(nn);
    }
}
