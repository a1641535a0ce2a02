// attend_prefill, subgroup variant: a query vector's PF_LPV invocations (consecutive, in one
// subgroup: PF_LPV ≤ 8 ≤ the subgroup width, invocation order probed per device) sum by
// butterfly shuffles. The kernel: attend_prefill.wgsl.

fn pf_lane_sum(x: f32, lid: u32) -> f32 {
    var r = x;
    for (var off = 1u; off < PF_LPV; off <<= 1u) {
        r += subgroupShuffleXor(r, off);
    }
    return r;
}
