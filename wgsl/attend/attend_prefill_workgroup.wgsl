// attend_prefill, workgroup-memory variant: a query vector's PF_LPV invocations sum through
// workgroup memory (two barriers per call; every invocation calls it equally often). The
// kernel: attend_prefill.wgsl.

var<workgroup> pf_red: array<f32, WORKGROUP_SIZE>;

fn pf_lane_sum(x: f32, lid: u32) -> f32 {
    pf_red[lid] = x;
    workgroupBarrier();
    let g = lid - lid % PF_LPV;
    var r = 0.0;
    for (var k = 0u; k < PF_LPV; k++) {
        r += pf_red[g + k];
    }
    workgroupBarrier();
    return r;
}
