// qjl_encode (workgroup-memory variant, no subgroup operations): read
// wgsl/qjl/qjl_encode_io.wgsl for the dispatch and the steps. Each set sign bit is ORed into
// its word by one atomicOr.

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
    let t0 = (item / P.norm_words) * QT;
    let pair = item % P.norm_words;
    let rg = lid % 32u;
    let tg = lid / 32u;
    var nn = vec2<f32>(0.0);
    for (var v = 0u; v < 2u; v++) {
        let h = 2u * pair + v;
        let live = h < P.heads;
        var ss = 0.0;
        for (var rb = 0u; rb < QNB; rb++) {
            workgroupBarrier(); // the previous block's words are stored
            qjl_clear(lid);
            let acc = qjl_block(t0, h, live, rb, lid, &ss);
            // @unroll 4
            for (var i = 0u; i < QRI; i++) {
                // @unroll 8
                for (var j = 0u; j < QTL; j++) {
                    if (acc[i * QTL + j] >= 0.0) {
                        atomicOr(&qw[(tg * QTL + j) * QRI + i], 1u << rg);
                    }
                }
            }
            workgroupBarrier();
            qjl_store(t0, h, live, rb, lid);
        }
        nn[v] = sqrt(ss);
    }
    qjl_store_norms(t0, pair, nn, lid);
}
