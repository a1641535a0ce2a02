// kivi_quant_keys: per-channel key quantization of whole token blocks, fused: min/max, codes
// packed straight into the segment's code words, (scale, lo) stored; no intermediate tensor.
// Layout: src/kivi/layout.rs. CPU reference: src/cpu/kivi_quant_keys.rs.
// Bindings: wgsl/common/kivi_quant_io.wgsl.
//
// Dispatch: one invocation per (block, head, channel), linear index
// i = (block * H + head) * D + channel, so consecutive invocations take consecutive channels
// and a subgroup's loads of one token row are coalesced although each invocation strides by
// H*D. No cross-invocation reduction: one source serves both WGSL variants.

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let hd_count = P.heads * P.dim;
    let i = linear_workgroup(wg, nwg) * WORKGROUP_SIZE + lid;
    if (i >= P.count * hd_count) {
        return;
    }
    let e = i % hd_count;
    let j = i / hd_count;
    let s0 = P.src_start + j * P.group;
    var lo = load_x(s0, e);
    var hi = lo;
    for (var t = 1u; t < P.group; t++) {
        let x = load_x(s0 + t, e);
        lo = min(lo, x);
        hi = max(hi, x);
    }
    let scale = kivi_scale(lo, hi, P.inv_levels);
    let gi = (P.dst_offset + j) * hd_count + e;
    store_params(gi, scale, lo);
    let levels = (1u << P.bits) - 1u;
    let b = P.bits;
    let base = gi * P.group_words;
    for (var w = 0u; w < P.group_words; w++) {
        let bit0 = w * 32u;
        let end_bit = min(bit0 + 32u, P.group * b);
        var acc = 0u;
        for (var t = bit0 / b; t < (end_bit + b - 1u) / b; t++) {
            let c = kivi_code(load_x(s0 + t, e), scale, lo, levels);
            let start = t * b;
            if (start >= bit0) {
                acc |= c << (start - bit0);
            } else {
                acc |= c >> (bit0 - start);
            }
        }
        codes[base + w] = acc;
    }
}
