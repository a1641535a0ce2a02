// vecinfer_quant (subgroup variant): read wgsl/vecinfer/vecinfer_quant_io.wgsl for the dispatch
// and the steps. A group's 8 candidates are reduced by subgroupShuffleXor at offsets 1, 2, 4
// (every lane ends with the group's winner). The 8 lanes of a group must lie in one subgroup,
// in invocation order (src/gpu/probe.rs); every shuffle and barrier is in uniform control
// flow: a round's groups past n_sub compute on a clamped sub-vector and store nothing.

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
    let h = item % P.heads;
    let t0 = (item / P.heads) * VI_TPW;
    let grp = lid / VI_GL;
    let lane_g = lid % VI_GL;
    vi_load_codebook(h, lid);
    for (var k = 0u; k < VI_TPW; k++) {
        let tok = t0 + k;
        if (tok >= P.count) {
            break; // uniform
        }
        workgroupBarrier(); // the previous token's vx and vidx are read
        vi_transform(P.src_start + tok, h, lid);
        for (var ps = 0u; ps < VI_PASSES; ps++) {
            let ms = vi_lane_mins(ps, grp, lane_g);
            // @unroll 4
            for (var j = 0u; j < VI_RT; j++) {
                let sv = (ps * VI_RT + j) * VI_GROUPS + grp;
                var d = bitcast<f32>(ms[j].x);
                var i = ms[j].y;
                for (var o = 1u; o < VI_GL; o <<= 1u) {
                    let od = subgroupShuffleXor(d, o);
                    let oi = subgroupShuffleXor(i, o);
                    if (vi_better(od, oi, d, i)) {
                        d = od;
                        i = oi;
                    }
                }
                if (lane_g == 0u && sv < VNS) {
                    vidx[sv] = i;
                }
            }
        }
        workgroupBarrier();
        vi_store(P.seg_token + tok, h, lid);
    }
}
