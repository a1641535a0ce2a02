// qjl_encode (subgroup variant): read wgsl/qjl/qjl_encode_io.wgsl for the dispatch and the
// steps. The norm by subgroupAdd and one workgroup word per subgroup; a pass's sign bits by
// one subgroupBallot per subgroup: its vec4<u32> holds lane i's predicate at bit i % 32 of
// word i / 32, the lanes' rows are consecutive (a subgroup is consecutive invocations in
// order: src/gpu/probe.rs checks it per device), so the subgroup's first lane ORs each
// 32-row word of the ballot into its place. Any subgroup width 8..128 (one pass's 64 rows may
// be one subgroup's part, or several subgroups' whole).

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
        workgroupBarrier(); // the previous head's qx, qw and qred are read
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
            let b = subgroupBallot(bit);
            if (sgi == 0u) {
                // @unroll 4
                for (var k = 0u; k < 4u; k++) {
                    let width = min(sgs - min(sgs, 32u * k), 32u); // lanes in word k
                    if (width > 0u) {
                        var bits = b[k]; // @qjl-ballot
                        if (width < 32u) {
                            bits &= (1u << width) - 1u;
                        }
                        qjl_or(r + 32u * k, bits);
                    }
                }
            }
        }
        workgroupBarrier();
        qjl_store(P.seg_token + tok, h, live, lid);
    }
    if (lid == 0u) {
        norms[(P.seg_token + tok) * P.norm_words + pair] = pack2x16float(nn);
    }
}
