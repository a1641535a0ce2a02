// vecinfer_quant (workgroup-memory variant, no subgroup operations): read
// wgsl/vecinfer/vecinfer_quant_io.wgsl for the dispatch and the steps. A group's 8 candidates
// are reduced by a tree over workgroup memory (offsets 4, 2, 1 inside the group).

var<workgroup> vrd: array<f32, WORKGROUP_SIZE>;
var<workgroup> vri: array<u32, WORKGROUP_SIZE>;

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
                vrd[lid] = bitcast<f32>(ms[j].x);
                vri[lid] = ms[j].y;
                workgroupBarrier();
                for (var o = VI_GL / 2u; o > 0u; o >>= 1u) {
                    if (lane_g < o) {
                        let od = vrd[lid + o];
                        let oi = vri[lid + o];
                        if (vi_better(od, oi, vrd[lid], vri[lid])) {
                            vrd[lid] = od;
                            vri[lid] = oi;
                        }
                    }
                    workgroupBarrier();
                }
                if (lane_g == 0u && sv < VNS) {
                    vidx[sv] = vri[lid];
                }
                workgroupBarrier(); // vrd, vri reused by the next round
            }
        }
        vi_store(P.seg_token + tok, h, lid);
    }
}
