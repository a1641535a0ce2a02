// kivi_quant_keys: per-channel key quantization of whole token blocks, fused: min/max, codes
// packed straight into the segment's code words, (scale, lo) stored; no intermediate tensor.
// Layout: src/codecs/kivi/layout.rs. CPU reference: src/cpu/kivi/kivi_quant_keys.rs.
// Bindings: wgsl/kivi/kivi_quant_io.wgsl. Specialized on KEY_GROUP (fixed for a cache's
// life, never on the sequence length).
//
// Dispatch: one invocation per (block, channel pair): i = block * pairs + p, where pair p is
// the residual row's word p (channels 2p and 2p + 1 of the flattened head * D + channel
// index). Consecutive invocations read consecutive words of a token row, so a subgroup's
// loads are coalesced although each invocation strides by a row per token. The block's words
// are read once and the first KCACHE kept in registers for the code pass. No
// cross-invocation reduction: one source serves both WGSL variants.

const KCACHE: u32 = min(KEY_GROUP, 64u);

fn key_word(s: u32, p: u32) -> u32 {
    if (s < P.t_old) {
        return ring[(s % P.ring_tokens) * P.resid_row_words + p];
    }
    return incoming[(s - P.inc_start) * P.resid_row_words + p];
}

fn write_codes(gi: u32, half_: u32, s0: u32, p: u32, scale: f32, lo: f32, cache: ptr<function, array<u32, KCACHE>>) {
    let b = P.bits;
    let levels = (1u << b) - 1u;
    let base = gi * P.group_words;
    for (var w = 0u; w < P.group_words; w++) {
        let bit0 = w * 32u;
        let end_bit = min(bit0 + 32u, KEY_GROUP * b);
        var acc = 0u;
        for (var t = bit0 / b; t < (end_bit + b - 1u) / b; t++) {
            var word: u32;
            if (t < KCACHE) {
                word = (*cache)[t];
            } else {
                word = key_word(s0 + t, p);
            }
            let c = kivi_code(unpack2x16float(word)[half_], scale, lo, levels);
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

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let hd_count = P.heads * P.dim;
    let pairs = (hd_count + 1u) / 2u;
    let i = linear_workgroup(wg, nwg) * WORKGROUP_SIZE + lid;
    if (i >= P.count * pairs) {
        return;
    }
    let p = i % pairs;
    let j = i / pairs;
    let s0 = P.src_start + j * KEY_GROUP;
    var cache: array<u32, KCACHE>;
    var lo = vec2<f32>(3.0e38);
    var hi = vec2<f32>(-3.0e38);
    for (var t = 0u; t < KEY_GROUP; t++) {
        let w = key_word(s0 + t, p);
        if (t < KCACHE) {
            cache[t] = w;
        }
        let x = unpack2x16float(w);
        lo = min(lo, x);
        hi = max(hi, x);
    }
    let e = 2u * p;
    let g0 = (P.dst_offset + j) * hd_count + e;
    let scale0 = kivi_scale(lo.x, hi.x, P.inv_levels);
    store_params(g0, scale0, lo.x);
    write_codes(g0, 0u, s0, p, scale0, lo.x, &cache);
    if (e + 1u < hd_count) {
        let scale1 = kivi_scale(lo.y, hi.y, P.inv_levels);
        store_params(g0 + 1u, scale1, lo.y);
        write_codes(g0 + 1u, 1u, s0, p, scale1, lo.y, &cache);
    }
}
