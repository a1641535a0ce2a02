// kivi_quant_keys: per-channel key quantization of whole token blocks, fused: min/max, codes
// packed straight into the segment's code words, (scale, lo) stored; no intermediate tensor.
// Layout: src/codecs/kivi/layout.rs. CPU reference: src/cpu/kivi/kivi_quant_keys.rs.
// Bindings: wgsl/kivi/kivi_quant_io.wgsl. Specialized on KEY_GROUP (fixed for a cache's
// life, never on the sequence length).
//
// Dispatch: one invocation per (block, channel pair): i = block * pairs + p, where pair p is
// the residual row's word p (channels 2p and 2p + 1 of the flattened head * D + channel
// index). Consecutive invocations read consecutive words of a token row, so a subgroup's
// loads are coalesced although each invocation strides by a row per token. The block's first
// KCACHE words are loaded back to back (unrolled: all in flight at once) and kept in registers
// for the code pass; codes stream into their words (Packer) without a per-word token loop. No
// cross-invocation reduction: one source serves both WGSL variants.

const KCACHE: u32 = min(KEY_GROUP, 64u);

fn key_word(s: u32, p: u32) -> u32 {
    if (s < P.t_old) {
        return ring[(s % P.ring_tokens) * P.resid_row_words + p];
    }
    return incoming[(s - P.inc_start) * P.resid_row_words + p];
}

// A group's code words filled token by token: `acc` holds word `w` of the group until a code
// starts in the next word (or straddles into it), then word w is stored.
struct Packer {
    acc: u32,
    w: u32,
}

fn pack_code(pk: ptr<function, Packer>, base: u32, t: u32, c: u32, b: u32) {
    let start = t * b;
    let ws = start >> 5u;
    let off = start & 31u;
    if (ws != (*pk).w) {
        codes[base + (*pk).w] = (*pk).acc;
        (*pk).acc = 0u;
        (*pk).w = ws;
    }
    (*pk).acc |= c << off;
    if (off + b > 32u) {
        codes[base + ws] = (*pk).acc;
        (*pk).acc = c >> (32u - off);
        (*pk).w = ws + 1u;
    }
}

// Codes of one channel of the pair (`half_` 0: the low f16 of each word, 1: the high) packed
// into group `gi`'s words. Tokens below KCACHE come from the registers (the loop is unrolled at
// composition, so `cache` is indexed by constants and never spills to the stack).
fn write_codes(gi: u32, half_: u32, s0: u32, p: u32, scale: f32, lo: f32, cache: ptr<function, array<u32, KCACHE>>) {
    let b = P.bits;
    let levels = (1u << b) - 1u;
    let base = gi * P.group_words;
    var pk = Packer(0u, 0u);
    // @unroll 64 kqc
    for (var t = 0u; t < KCACHE; t++) {
        let c = kivi_code(unpack2x16float((*cache)[t])[half_], scale, lo, levels);
        pack_code(&pk, base, t, c, b);
    }
    for (var t = KCACHE; t < KEY_GROUP; t++) {
        let c = kivi_code(unpack2x16float(key_word(s0 + t, p))[half_], scale, lo, levels);
        pack_code(&pk, base, t, c, b);
    }
    codes[base + pk.w] = pk.acc;
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
    // @unroll 64 kql
    for (var t = 0u; t < KCACHE; t++) {
        let w = key_word(s0 + t, p);
        cache[t] = w;
        let x = unpack2x16float(w);
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
