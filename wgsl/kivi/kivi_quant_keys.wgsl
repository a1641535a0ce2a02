// kivi_quant_keys: per-channel key quantization of whole token blocks, fused: min/max, codes
// packed straight into the segment's code words, (scale, lo) stored; no intermediate tensor.
// Layout: src/codecs/kivi/layout.rs. CPU reference: src/cpu/kivi/kivi_quant_keys.rs.
// Bindings: wgsl/kivi/kivi_quant_io.wgsl. Specialized on KEY_GROUP and KEY_BITS (fixed for
// a cache's life, never on the sequence length).
//
// Dispatch: one invocation per (block, channel pair): i = block * pairs + p, where pair p is
// the residual row's word p (channels 2p and 2p + 1 of the flattened head * D + channel
// index). Consecutive invocations read consecutive words of a token row, so a subgroup's
// loads are coalesced although each invocation strides by a row per token. The block's first
// KCACHE words are kept in registers for the code pass; a block wholly in the incoming rows
// (a prefill) loads them with no branch in between, so they are in flight together. Specialized
// on KEY_GROUP and KEY_BITS: code positions in the words are constants. No
// cross-invocation reduction: one source serves both WGSL variants.

const KCACHE: u32 = min(KEY_GROUP, 64u);
// Words of one channel's group stream (KEY_GROUP codes of KEY_BITS bits).
const KWORDS: u32 = (KEY_GROUP * KEY_BITS + 31u) / 32u;
const KWORDS_UNROLLED: u32 = min(KWORDS, 16u); // all of them for groups of up to 64 tokens

fn key_word(s: u32, p: u32) -> u32 {
    if (s < P.t_old) {
        return ring[(s % P.ring_tokens) * P.resid_row_words + p];
    }
    return incoming[(s - P.inc_start) * P.resid_row_words + p];
}

// Code `c` of token t placed into the group's words (constant positions once unrolled).
fn place(words: ptr<function, array<u32, KWORDS>>, t: u32, c: u32) {
    let start = t * KEY_BITS;
    let w = start >> 5u;
    let off = start & 31u;
    (*words)[w] |= c << off;
    if (off + KEY_BITS > 32u) {
        (*words)[w + 1u] |= c >> (32u - off);
    }
}

// Codes of one channel of the pair (`half_` 0: the low f16 of each word, 1: the high) packed
// into group `gi`'s words. Unrolled at composition: `cache` and `words` are indexed by
// constants (registers), every shift is a constant.
fn write_codes(gi: u32, half_: u32, s0: u32, p: u32, scale: f32, lo: f32, cache: ptr<function, array<u32, KCACHE>>) {
    let levels = (1u << KEY_BITS) - 1u;
    var words: array<u32, KWORDS>;
    // @unroll 64 kqc
    for (var t = 0u; t < KCACHE; t++) {
        place(&words, t, kivi_code(unpack2x16float((*cache)[t])[half_], scale, lo, levels));
    }
    for (var t = KCACHE; t < KEY_GROUP; t++) {
        place(&words, t, kivi_code(unpack2x16float(key_word(s0 + t, p))[half_], scale, lo, levels));
    }
    let base = gi * P.group_words;
    // @unroll 16 kqc
    for (var w = 0u; w < KWORDS_UNROLLED; w++) {
        codes[base + w] = words[w];
    }
    for (var w = KWORDS_UNROLLED; w < KWORDS; w++) {
        codes[base + w] = words[w]; // groups above 64 tokens only
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
    if (s0 >= P.t_old) {
        // The whole block is in this append's rows (every block of a prefill): loads with no
        // branch between them, all in flight at once.
        let r0 = (s0 - P.inc_start) * P.resid_row_words + p;
        // @unroll 64 kql
        for (var t = 0u; t < KCACHE; t++) {
            cache[t] = incoming[r0 + t * P.resid_row_words];
        }
    } else {
        // @unroll 64 kql
        for (var t = 0u; t < KCACHE; t++) {
            cache[t] = key_word(s0 + t, p);
        }
    }
    var lo = vec2<f32>(3.0e38);
    var hi = vec2<f32>(-3.0e38);
    // @unroll 64 kql
    for (var t = 0u; t < KCACHE; t++) {
        let x = unpack2x16float(cache[t]);
        lo = min(lo, x);
        hi = max(hi, x);
    }
    for (var t = KCACHE; t < KEY_GROUP; t++) {
        let x = unpack2x16float(key_word(s0 + t, p));
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
