// The second half of kivi_quant_values, shared by its subgroup and workgroup variants: codes
// into workgroup memory, (scale, lo) stored by lane 0, words assembled by lanes 0.. of the
// slice. Needs `group_codes`, SLICES, MAX_GROUP and PER_LANE from the kernel.

fn quantize_and_store(
    valid: bool,
    slice: u32,
    lane: u32,
    t: u32,
    h: u32,
    j: u32,
    n: u32,
    xs: ptr<function, array<f32, PER_LANE>>,
    lo: f32,
    hi: f32,
) {
    let scale = kivi_scale(lo, hi, P.inv_levels);
    let levels = (1u << P.bits) - 1u;
    let cbase = slice * MAX_GROUP;
    for (var k = 0u; k < PER_LANE; k++) {
        let c = lane + 32u * k;
        if (c < n) {
            group_codes[cbase + c] = kivi_code((*xs)[k], scale, lo, levels);
        }
    }
    workgroupBarrier();
    if (!valid) {
        return;
    }
    let gi = ((P.dst_offset + t) * P.heads + h) * P.n_groups + j;
    if (lane == 0u) {
        store_params(gi, scale, lo);
    }
    let b = P.bits;
    let base = ((P.dst_offset + t) * P.heads + h) * P.row_words + j * P.group_words;
    let words = (n * b + 31u) / 32u;
    for (var w = lane; w < words; w += 32u) {
        let bit0 = w * 32u;
        let end_bit = min(bit0 + 32u, n * b);
        var acc = 0u;
        for (var c = bit0 / b; c < (end_bit + b - 1u) / b; c++) {
            let code = group_codes[cbase + c];
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
