// TurboQuant shared WGSL (../shared/spec/turboquant.md), concatenated before turboquant_quant
// (both variants) and turboquant_dequant: the uniform block, the tables' layout
// (src/codecs/turboquant/layout.rs), the codebook in workgroup memory, the boundary search,
// the signs and f16 rounding. CPU twins: src/cpu/turboquant/.
// Specialization: TQ_P (P, a power of two ≥ 4), TQ_LOG2P, TQ_BITS (b, 1..=8), TQ_STAGES
// (1: MSE, 2: RVQ).

// Keep in sync with TqParams in src/codecs/turboquant/plans.rs and
// msl/turboquant/turboquant_common.metal.
struct TqParams {
    heads: u32,
    dim: u32,
    count: u32,         // tokens of this dispatch
    src_start: u32,     // quantize: absolute token of the first one
    t_old: u32,         // quantize: tokens < t_old come from the ring, the others from `incoming`
    inc_start: u32,     // quantize: absolute token of `incoming`'s first row
    ring_tokens: u32,   // quantize: ring capacity (token s sits in row s % ring_tokens)
    seg_token: u32,     // token (in the segment) of the first token written / read
    in_row_words: u32,  // words of one f16 input row (H·D halves)
    row_words: u32,     // words of one code row: ceil(P·b / 32)
    norm_words: u32,    // words of one token's norms: ceil(H / 2)
    items: u32,         // work items (quantize: (token, head pair)s; dequantize: (token, head)s)
    inv_sqrt_p: f32,    // c = the f32 nearest to 1/√P
    cb_offset: u32,     // first word of the codebooks in the tables: H·ceil(P / 32)
    _p0: u32,
    _p1: u32,
}

const TP: u32 = TQ_P;
const TB: u32 = TQ_BITS;
const TS: u32 = TQ_STAGES;
const TN: u32 = 1u << TQ_BITS;        // codebook entries
const T_MASK: u32 = TN - 1u;
const TSW: u32 = (TP + 31u) / 32u;    // sign words per head
const TRW: u32 = (TP * TB + 31u) / 32u; // words per code row

// The codebooks: per stage, 2^b centroids then 2^b boundaries (the last one f32::MAX).
var<workgroup> tq_cb: array<f32, 2u * TS * TN>;

// Copies the codebooks from the tables (every invocation calls it; a barrier must follow).
fn tq_load_codebook(lid: u32) {
    for (var i = lid; i < 2u * TS * TN; i += WORKGROUP_SIZE) {
        tq_cb[i] = bitcast<f32>(tables[P.cb_offset + i]);
    }
}

// The code of y in stage s: the number of boundaries strictly below y (on a boundary: the
// lower cell), by binary search over the ascending boundaries.
fn tq_code(y: f32, s: u32) -> u32 {
    let bnd = s * 2u * TN + TN;
    var c = 0u;
    // @unroll 8
    for (var k = 0u; k < TB; k++) {
        let step = 1u << (TB - 1u - k);
        c = select(c, c + step, tq_cb[bnd + c + step - 1u] < y);
    }
    return c;
}

// The centroid of `code` in stage s.
fn tq_centroid(code: u32, s: u32) -> f32 {
    return tq_cb[s * 2u * TN + code];
}

// The sign bit (0 or 0x80000000) of coordinate i of head h's sign row (XOR it into an f32:
// the exact product with s_i = ±1).
fn tq_sign(h: u32, i: u32) -> u32 {
    return ((tables[h * TSW + (i >> 5u)] >> (i & 31u)) & 1u) << 31u;
}

fn tq_flip(x: f32, h: u32, i: u32) -> f32 {
    return bitcast<f32>(bitcast<u32>(x) ^ tq_sign(h, i));
}

// f16 bits of a non-negative finite norm, round to nearest even (the `half` crate's from_f32):
// WGSL lets pack2x16float round either way. A norm beyond f16 is refused on the host before
// anything is encoded; one that rounds up here by a last-bit difference is stored as 65504.
fn tq_f16_bits(x: f32) -> u32 {
    let a = bitcast<u32>(x) & 0x7fffffffu;
    if (a >= 0x477ff000u) {
        return 0x7bffu;
    }
    if (a >= 0x38800000u) {
        let r = a + 0xfffu + ((a >> 13u) & 1u);
        return (r - 0x38000000u) >> 13u;
    }
    if (a < 0x33000000u) {
        return 0u;
    }
    let e = a >> 23u;
    let m = (a & 0x7fffffu) | 0x800000u;
    let shift = 126u - e; // 14..=24
    let q = m >> shift;
    let rem = m & ((1u << shift) - 1u);
    let half_ = 1u << (shift - 1u);
    return q + select(0u, 1u, rem > half_ || (rem == half_ && (q & 1u) == 1u));
}
