// kivi_quant_values (subgroup variant): as wgsl/kivi_quant_values.wgsl, but min/max is a
// subgroupShuffleXor butterfly inside each subgroup, then (when the subgroup is narrower than
// the workgroup of 32, e.g. lavapipe's 8) one partial per subgroup is combined through
// workgroup memory. Correct for any subgroup width: with widths >= 32 the whole workgroup is
// one subgroup and the butterfly alone decides.
// The early return depends on the workgroup index only, so every subgroup op below runs in
// uniform control flow.

var<workgroup> part_lo: array<f32, WORKGROUP_SIZE>;
var<workgroup> part_hi: array<f32, WORKGROUP_SIZE>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(num_subgroups) n_sg: u32,
) {
    let g = linear_workgroup(wg, nwg);
    if (g >= P.count * P.heads * P.n_groups) {
        return;
    }
    let j = g % P.n_groups;
    let th = g / P.n_groups;
    let h = th % P.heads;
    let t = th / P.heads;
    let s = P.src_start + t;
    let c0 = j * P.group;
    let n = min(P.group, P.dim - c0);
    let e0 = h * P.dim + c0;

    var lo = 3.0e38;
    var hi = -3.0e38;
    for (var c = lid; c < n; c += WORKGROUP_SIZE) {
        let x = load_x(s, e0 + c);
        lo = min(lo, x);
        hi = max(hi, x);
    }
    let width = min(sg_size, WORKGROUP_SIZE);
    for (var off = 1u; off < width; off <<= 1u) {
        lo = min(lo, subgroupShuffleXor(lo, off));
        hi = max(hi, subgroupShuffleXor(hi, off));
    }
    if (n_sg > 1u) {
        if (sg_lane == 0u) {
            part_lo[sg_id] = lo;
            part_hi[sg_id] = hi;
        }
        workgroupBarrier();
        lo = part_lo[0];
        hi = part_hi[0];
        for (var k = 1u; k < n_sg; k++) {
            lo = min(lo, part_lo[k]);
            hi = max(hi, part_hi[k]);
        }
    }

    let scale = kivi_scale(lo, hi, P.inv_levels);
    let gi = ((P.dst_offset + t) * P.heads + h) * P.n_groups + j;
    if (lid == 0u) {
        store_params(gi, scale, lo);
    }
    let levels = (1u << P.bits) - 1u;
    let b = P.bits;
    let base = ((P.dst_offset + t) * P.heads + h) * P.row_words + j * P.group_words;
    let words = (n * b + 31u) / 32u;
    for (var w = lid; w < words; w += WORKGROUP_SIZE) {
        let bit0 = w * 32u;
        let end_bit = min(bit0 + 32u, n * b);
        var acc = 0u;
        for (var c = bit0 / b; c < (end_bit + b - 1u) / b; c++) {
            let code = kivi_code(load_x(s, e0 + c), scale, lo, levels);
            let start = c * b;
            if (start >= bit0) {
                acc |= code << (start - bit0);
            } else {
                acc |= code >> (bit0 - start);
            }
        }
        codes[base + w] = acc;
    }
}
