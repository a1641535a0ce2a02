// Attention hooks of KIVI, key side (wgsl/attend/attend_core.wgsl): packed codes per channel
// along tokens (layout: src/codecs/kivi/layout.rs), streams `codes` (word KP.codes) and
// `params` (word KP.params) of the key segment. CPU twin: src/cpu/kivi/attend_k.rs.
//
// The block's (scale, lo) is folded into the query once per channel instead of into every
// element: with x = 1 + code / 2^b (made from the code's bits by integer operations, no
// conversion), k̂ = scale·code + lo = a·x + β for a = scale·2^b, β = lo − a, so a lane's
// score of token j is Σ_c (q_c·a_c)·x_jc + Σ_c q_c·β_c: one multiply-add per code and vector.
// Where a lane's 8 tokens lie in one key block and codes never straddle words (G a multiple
// of 8, b ∈ {1, 2, 4, 8}) the lane's 8 codes of a channel are one word (two at b = 8; the
// block is whole whenever its first token is below Q);
// otherwise a token-by-token path reconstructs k̂ per element (the same values, slower).
// Specialized on ATT_KBITS, ATT_KGROUP, ATT_KPARAMS_F16 (fixed for a cache's life).

// Keep in sync with `KiviUniform` in src/codecs/kivi/codec.rs.
struct KKiviParams {
    codes: u32,
    params: u32,
    _p0: u32,
    _p1: u32,
}
@group(0) @binding(1) var<uniform> KP: KKiviParams;

const K_PREP: bool = false;
const K_PREP_W: u32 = 1u;
const KB: u32 = ATT_KBITS;
const KG: u32 = ATT_KGROUP;
const KPW: u32 = 2u - ATT_KPARAMS_F16;
const KGW: u32 = (KG * KB + 31u) / 32u;
const K_MASK: u32 = (1u << KB) - 1u;
// Codes never straddle words.
const K_POW2: bool = KB == 1u || KB == 2u || KB == 4u || KB == 8u;
const K_FAST: bool = KG % 8u == 0u && K_POW2;
// Where the params are f16 and a lane's channels are whole 16-byte words of them (D a multiple
// of 32; the stream starts on a 16-byte boundary), the fast path reads them 4 at a time
// (kseg4: one bounds-checked load instead of four).
const K_PQ: bool = ATT_KPARAMS_F16 == 1u && R_CPL % 4u == 0u && R_EXACT;

fn k_prepare(lid: u32, h: u32) {}

fn kivi_k_pair(gi: u32) -> vec2<f32> {
    if (ATT_KPARAMS_F16 == 1u) {
        return unpack2x16float(kseg[KP.params + gi]);
    }
    let w = KP.params + 2u * gi;
    return vec2<f32>(bitcast<f32>(kseg[w]), bitcast<f32>(kseg[w + 1u]));
}

// 1 + c / 2^b for code j of `w` (bits j·b ..): the code moved into the mantissa's top bits.
fn kivi_kx(w: u32, j: u32) -> f32 {
    if (DEC_ONE_WG) {
        return bits_unit_or(w, j * KB, KB, dec_one);
    }
    return bits_unit(w, j * KB, KB);
}

// Measuring only (DEC_PAIRS, attend_core.wgsl): the fast path's codes two at a time as
// c·2^-24 (bits_pair_tiny), where a lane's 8 codes of a channel are whole words (b = 4: one
// word, pairs of tokens (j, j + 4); b = 8: two, pairs (j, j + 2) in each).
const K_PAIRS: bool = DEC_PAIRS && (KB == 4u || KB == 8u);
const K_TINY: f32 = 16777216.0; // 2^24

// Code i of the stream starting at word `base` (any b, straddling words).
fn kivi_k_code(base: u32, i: u32) -> u32 {
    let start = i * KB;
    let w = base + (start >> 5u);
    let off = start & 31u;
    var hi = 0u;
    if (off + KB > 32u) {
        hi = kseg[w + 1u];
    }
    return bits_code(kseg[w], hi, off, KB);
}

fn k_score(row: u32, last: u32, cg: u32, h: u32) -> array<vec4<f32>, 8> {
    var acc: array<vec4<f32>, 8>;
    if (K_FAST) {
        let blk = row / KG;
        let bit0 = (row % KG) * KB; // the lane's 8 codes of a channel: bits bit0 .. bit0 + 8·b
        var bias = vec4<f32>(0.0);
        // The lane's first channel's params as a 16-byte word (K_PQ).
        let pq = (KP.params + (blk * AP.hkv + h) * DIM + cg * R_CPL) >> 2u;
        var pw = vec4<u32>(0u);
        // @unroll 32 kch
        for (var i = 0u; i < R_CPL; i++) {
            let c = cg * R_CPL + i;
            let gi = (blk * AP.hkv + h) * DIM + lane_channel(cg, i);
            var pr: vec2<f32>;
            if (K_PQ) {
                if (i % 4u == 0u) {
                    pw = kseg4[pq + i / 4u];
                }
                pr = unpack2x16float(pw[i % 4u]);
            } else {
                pr = kivi_k_pair(gi);
            }
            let w = KP.codes + gi * KGW + (bit0 >> 5u);
            if (K_PAIRS) {
                // k̂ = scale·c + lo = (scale·2^24)·(c·2^-24) + lo.
                let qa = qs[c] * (pr.x * K_TINY); // qs is 0 past D
                bias += qs[c] * pr.y;
                if (KB == 8u) {
                    let w0 = kseg[w];
                    let w1 = kseg[w + 1u];
                    // @unroll 2
                    for (var j = 0u; j < 2u; j++) {
                        let x0 = bits_pair_tiny(w0, j, KB);
                        let x1 = bits_pair_tiny(w1, j, KB);
                        acc[j] += qa * x0.x;
                        acc[j + 2u] += qa * x0.y;
                        acc[j + 4u] += qa * x1.x;
                        acc[j + 6u] += qa * x1.y;
                    }
                } else {
                    let bits = kseg[w];
                    // @unroll 4
                    for (var j = 0u; j < 4u; j++) {
                        let x = bits_pair_tiny(bits, j, KB);
                        acc[j] += qa * x.x;
                        acc[j + 4u] += qa * x.y;
                    }
                }
            } else {
                let a = pr.x * f32(1u << KB);
                let qa = qs[c] * a; // qs is 0 past D
                bias += qs[c] * (pr.y - a);
                if (KB == 8u) {
                    let w0 = kseg[w];
                    let w1 = kseg[w + 1u];
                    // @unroll 4
                    for (var j = 0u; j < 4u; j++) {
                        acc[j] += qa * kivi_kx(w0, j);
                        acc[j + 4u] += qa * kivi_kx(w1, j);
                    }
                } else {
                    let bits = kseg[w] >> (bit0 & 31u);
                    // @unroll 8
                    for (var j = 0u; j < 8u; j++) {
                        acc[j] += qa * kivi_kx(bits, j);
                    }
                }
            }
        }
        // @unroll 8
        for (var j = 0u; j < 8u; j++) {
            acc[j] += bias;
        }
        return acc;
    }
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        let r = min(row + j, last);
        let blk = r / KG;
        // @unroll 32
        for (var i = 0u; i < R_CPL; i++) {
            let c = cg * R_CPL + i;
            let gi = (blk * AP.hkv + h) * DIM + lane_channel(cg, i);
            let pr = kivi_k_pair(gi);
            let code = kivi_k_code(KP.codes + gi * KGW, r % KG);
            acc[j] += qs[c] * kivi_reconstruct(code, pr.x, pr.y);
        }
    }
    return acc;
}

// k̂ of channel c of segment row `row` (clamped to `last`) of head h, as the CPU reference
// reconstructs it (the prefill kernel's element reads: tiles that mix sources or rows not
// four-aligned; k_quad below for the rest).
fn k_value(row: u32, last: u32, c: u32, h: u32) -> f32 {
    let r = min(row, last);
    let gi = ((r / KG) * AP.hkv + h) * DIM + c;
    let pr = kivi_k_pair(gi);
    return kivi_reconstruct(kivi_k_code(KP.codes + gi * KGW, r % KG), pr.x, pr.y);
}

// k̂ of rows row .. row + 3 of channel c of head h (the prefill kernel's key tiles, where
// K_QUAD: row a multiple of 4, row + 3 at most the last row). The four lie in one block and
// their codes in one word (G a multiple of 4, b ∈ {1, 2, 4, 8}): one load of the codes and one
// of the params for the four, the same values as k_value's.
const K_QUAD: bool = KG % 4u == 0u && K_POW2;

fn k_quad(row: u32, c: u32, h: u32) -> vec4<f32> {
    let gi = ((row / KG) * AP.hkv + h) * DIM + c;
    let pr = kivi_k_pair(gi);
    let bit0 = (row % KG) * KB;
    let w = kseg[KP.codes + gi * KGW + (bit0 >> 5u)] >> (bit0 & 31u);
    var x: vec4<f32>;
    // @unroll 4
    for (var j = 0u; j < 4u; j++) {
        x[j] = kivi_reconstruct((w >> (j * KB)) & K_MASK, pr.x, pr.y);
    }
    return x;
}

// k̂ of rows row .. row + 7 of channel c of head h (the tensor-core prefill kernel's key tiles,
// where K_OCT: row a multiple of 8, row + 7 at most the last row): the eight lie in one block
// and their codes in one word (G a multiple of 8, b ∈ {1, 2, 4}): one load of the codes and
// one of the params for the eight, k_value's values, as two quads. In two steps, so that the
// kernel can issue a tile's loads long before it uses them: k_oct_fetch loads the words as
// stored (KOct: the code word and the params' one or two words), k_oct_make (the same row,
// c, h) turns them into the eight values.
const K_OCT: bool = KG % 8u == 0u && (KB == 1u || KB == 2u || KB == 4u);

struct KOct {
    w: u32,
    p: vec2<u32>,
}

fn k_oct_fetch(row: u32, c: u32, h: u32) -> KOct {
    let gi = ((row / KG) * AP.hkv + h) * DIM + c;
    let bit0 = (row % KG) * KB;
    var r: KOct;
    r.w = kseg[KP.codes + gi * KGW + (bit0 >> 5u)];
    if (ATT_KPARAMS_F16 == 1u) {
        r.p.x = kseg[KP.params + gi];
    } else {
        r.p = vec2<u32>(kseg[KP.params + 2u * gi], kseg[KP.params + 2u * gi + 1u]);
    }
    return r;
}

fn k_oct_make(r: KOct, row: u32, c: u32, h: u32) -> array<vec4<f32>, 2> {
    var pr = bitcast<vec2<f32>>(r.p);
    if (ATT_KPARAMS_F16 == 1u) {
        pr = unpack2x16float(r.p.x);
    }
    let w = r.w >> (((row % KG) * KB) & 31u);
    var x: array<vec4<f32>, 2>;
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        x[j / 4u][j % 4u] = kivi_make((w >> (j * KB)) & K_MASK, pr.x, pr.y);
    }
    return x;
}
