// qjl_encode (workgroup-memory variant, no subgroup operations): read
// wgsl/qjl/qjl_encode_io.wgsl for the dispatch and the steps. The norm by a tree over
// workgroup memory; each set sign bit ORed into its word by one atomicOr.

var<workgroup> qred: array<f32, WORKGROUP_SIZE>;

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
        qred[lid] = ss;
        workgroupBarrier();
        for (var st = WORKGROUP_SIZE / 2u; st > 0u; st >>= 1u) {
            if (lid < st) {
                qred[lid] += qred[lid + st];
            }
            workgroupBarrier();
        }
        nn[v] = sqrt(qred[0]);
        for (var it = 0u; it < QIT; it++) {
            let r = it * WORKGROUP_SIZE + lid;
            let dot = qjl_row_dot(r);
            let bit = r < QM && dot >= 0.0; // @qjl-tail
            if (bit) {
                sgn_or(r, 1u);
            }
        }
        workgroupBarrier();
        qjl_store(P.seg_token + tok, h, live, lid);
    }
    if (lid == 0u) {
        norms[(P.seg_token + tok) * P.norm_words + pair] = pack2x16float(nn);
    }
}
