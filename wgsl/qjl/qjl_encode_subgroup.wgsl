// qjl_encode (subgroup variant): read wgsl/qjl/qjl_encode_io.wgsl for the dispatch and the
// steps. The sign bits by one subgroupBallot per (row i, token j): its vec4<u32> holds lane
// k's predicate at bit k % 32 of word k / 32; a subgroup is consecutive invocations in order
// (src/gpu/probe.rs checks it per device), so ballot word k covers invocations l0 .. l0 + 31
// (l0 = the subgroup's first + 32·k), rows rg = l0 % 32 .. of token group l0 / 32: the
// subgroup's first lane ORs it, shifted to rg, into that word. Any subgroup width 8..128.

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
    let t0 = (item / P.norm_words) * QT;
    let pair = item % P.norm_words;
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
                    let b = subgroupBallot(acc[i * QTL + j] >= 0.0);
                    if (sgi == 0u) {
                        // @unroll 4
                        for (var k = 0u; k < 4u; k++) {
                            let width = min(sgs - min(sgs, 32u * k), 32u); // lanes in word k
                            if (width > 0u) {
                                var bits = b[k]; // @qjl-ballot
                                if (width < 32u) {
                                    bits &= (1u << width) - 1u;
                                }
                                let l0 = lid + 32u * k;
                                if (bits != 0u) {
                                    atomicOr(&qw[((l0 / 32u) * QTL + j) * QRI + i], bits << (l0 % 32u));
                                }
                            }
                        }
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
