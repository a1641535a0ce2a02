// Attention hooks of KIVI, value side (wgsl/attend/attend_core.wgsl): packed codes per token
// along channels (layout: src/codecs/kivi/layout.rs), streams `codes` (word VP.codes) and
// `params` (word VP.params) of the value segment. CPU twin: src/cpu/kivi/attend_v.rs.
//
// A lane accumulates the channels cg·V_CPL .. of its 8 tokens. Where those channels lie in one
// value group and their codes are whole words or one word's part (b ∈ {1, 2, 4, 8}), the
// group's (scale, lo) is folded into the softmax weight once per token: with x = 1 + code/2^b,
// p·v̂ = (p·a)·x + p·β (a = scale·2^b, β = lo − a), the p·β of the lane's group summed apart
// and added once at the end (v_out). Otherwise each element is reconstructed (slower, same
// values). Specialized on ATT_VBITS, ATT_VGROUP, ATT_VPARAMS_F16.

// Keep in sync with `KiviUniform` in src/codecs/kivi/codec.rs.
struct VKiviParams {
    codes: u32,
    params: u32,
    _p0: u32,
    _p1: u32,
}
@group(0) @binding(2) var<uniform> VP: VKiviParams;

const V_W: u32 = ATT_DIM;
const V_CPL: u32 = (ATT_DIM + 7u) / 8u;
const V_SPACE_OUT: bool = true;
const VB: u32 = ATT_VBITS;
const VG: u32 = ATT_VGROUP;
const VPW: u32 = 2u - ATT_VPARAMS_F16;
const VGW: u32 = (VG * VB + 31u) / 32u;
const VNG: u32 = (ATT_DIM + VG - 1u) / VG;
const VRW: u32 = (ATT_DIM / VG) * VGW + ((ATT_DIM % VG) * VB + 31u) / 32u;
const V_MASK: u32 = (1u << VB) - 1u;
const V_POW2: bool = VB == 1u || VB == 2u || VB == 4u || VB == 8u;
// The lane's bits: whole words (V_WORDS of them), or a part of one word.
const V_LANE_BITS: u32 = V_CPL * VB;
const V_WHOLE: bool = V_POW2 && VG % V_CPL == 0u && V_LANE_BITS % 32u == 0u;
const V_PART: bool = V_POW2 && VG % V_CPL == 0u && 32u % V_LANE_BITS == 0u;
const V_FAST: bool = V_WHOLE || V_PART;
const V_WORDS: u32 = max(V_LANE_BITS / 32u, 1u);
// Codes per word.
const V_PER_WORD: u32 = 32u / VB;

// The lane's accumulator: p·a·x per channel, and the p·β of its group (added in v_out).
struct VState {
    o: array<vec4<f32>, V_CPL>,
    bias: vec4<f32>,
}

fn kivi_v_pair(gi: u32) -> vec2<f32> {
    if (ATT_VPARAMS_F16 == 1u) {
        return unpack2x16float(vseg[VP.params + gi]);
    }
    let w = VP.params + 2u * gi;
    return vec2<f32>(bitcast<f32>(vseg[w]), bitcast<f32>(vseg[w + 1u]));
}

fn kivi_vx(w: u32, at: u32) -> f32 {
    if (DEC_ONE_WG) {
        return bits_unit_or(w, at, VB, dec_one);
    }
    return bits_unit(w, at, VB);
}

// Measuring only (DEC_PAIRS, attend_core.wgsl): where a lane's codes are whole words and b ≥ 2,
// two channels (i, i + 16/b) of a word at a time as c·2^-24 (bits_pair_tiny).
const V_PAIRS: bool = DEC_PAIRS && V_WHOLE && VB >= 2u;
const V_TINY: f32 = 16777216.0; // 2^24
const V_HALF_WORD: u32 = V_PER_WORD / 2u;

fn kivi_v_code(base: u32, i: u32) -> u32 {
    let start = i * VB;
    let w = base + (start >> 5u);
    let off = start & 31u;
    var hi = 0u;
    if (off + VB > 32u) {
        hi = vseg[w + 1u];
    }
    return bits_code(vseg[w], hi, off, VB);
}

fn v_reset(vs: ptr<function, VState>) {
    // @unroll 32
    for (var i = 0u; i < V_CPL; i++) {
        (*vs).o[i] = vec4<f32>(0.0);
    }
    (*vs).bias = vec4<f32>(0.0);
}

fn v_scale(vs: ptr<function, VState>, c: vec4<f32>) {
    // @unroll 32
    for (var i = 0u; i < V_CPL; i++) {
        (*vs).o[i] *= c;
    }
    (*vs).bias *= c;
}

fn v_out(vs: ptr<function, VState>, i: u32) -> vec4<f32> {
    return (*vs).o[i] + (*vs).bias;
}

fn v_add(vs: ptr<function, VState>, i: u32, x: vec4<f32>) {
    (*vs).o[i] += x;
}

fn v_accum(vs: ptr<function, VState>, row: u32, last: u32, cg: u32, h: u32, p: array<vec4<f32>, 8>) {
    let c0 = cg * V_CPL;
    if (V_FAST) {
        let g = c0 / VG; // the lane's one group
        let bit0 = (c0 - g * VG) * VB;
        // @unroll 8 vrow
        for (var j = 0u; j < 8u; j++) {
            let rb = min(row + j, last) * AP.hkv + h;
            let pr = kivi_v_pair(rb * VNG + min(g, VNG - 1u));
            let w = VP.codes + rb * VRW + g * VGW + (bit0 >> 5u);
            let a = select(pr.x * f32(1u << VB), pr.x * V_TINY, V_PAIRS);
            let wa = p[j] * a;
            (*vs).bias += p[j] * select(pr.y - a, pr.y, V_PAIRS);
            if (V_PAIRS) {
                // v̂ = scale·c + lo = (scale·2^24)·(c·2^-24) + lo.
                // @unroll 8
                for (var k = 0u; k < V_WORDS; k++) {
                    let word = vseg[w + k];
                    // @unroll 16
                    for (var i = 0u; i < V_HALF_WORD; i++) {
                        let x = bits_pair_tiny(word, i, VB);
                        (*vs).o[min(k * V_PER_WORD + i, V_CPL - 1u)] += wa * x.x;
                        (*vs).o[min(k * V_PER_WORD + i + V_HALF_WORD, V_CPL - 1u)] += wa * x.y;
                    }
                }
            } else if (V_WHOLE) {
                // @unroll 8
                for (var k = 0u; k < V_WORDS; k++) {
                    let word = vseg[w + k];
                    // @unroll 32
                    for (var i = 0u; i < V_PER_WORD; i++) {
                        // (the clamp only matters in configurations where this branch is dead)
                        (*vs).o[min(k * V_PER_WORD + i, V_CPL - 1u)] += wa * kivi_vx(word, i * VB);
                    }
                }
            } else {
                let word = vseg[w] >> (bit0 & 31u);
                // @unroll 32
                for (var i = 0u; i < V_CPL; i++) {
                    (*vs).o[i] += wa * kivi_vx(word, i * VB);
                }
            }
        }
        return;
    }
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        let rb = min(row + j, last) * AP.hkv + h;
        // @unroll 32
        for (var i = 0u; i < V_CPL; i++) {
            let c = min(c0 + i, ATT_DIM - 1u);
            let g = c / VG;
            let pr = kivi_v_pair(rb * VNG + g);
            let code = kivi_v_code(VP.codes + rb * VRW + g * VGW, c - g * VG);
            (*vs).o[i] += p[j] * kivi_reconstruct(code, pr.x, pr.y);
        }
    }
}

fn v_prepare(lid: u32, h: u32) {}

// v̂ of channel c of segment row `row` (clamped to `last`) of head h (the prefill kernel).
fn v_value(row: u32, last: u32, c: u32, h: u32) -> f32 {
    let rb = min(row, last) * AP.hkv + h;
    let g = c / VG;
    let pr = kivi_v_pair(rb * VNG + g);
    return kivi_reconstruct(kivi_v_code(VP.codes + rb * VRW + g * VGW, c - g * VG), pr.x, pr.y);
}

fn v_finish(lid: u32, h: u32) {}

// v̂ of channels c .. c + 3 of row `row` of head h (the prefill kernel's value tiles, where
// V_QUAD: c a multiple of 4, c + 3 < D, row within the segment). The four lie in one group and
// their codes in one word (G a multiple of 4, b ∈ {1, 2, 4, 8}): one load of the codes and one
// of the params for the four, the same values as v_value's.
const V_QUAD: bool = VG % 4u == 0u && V_POW2;

fn v_quad(row: u32, c: u32, h: u32) -> vec4<f32> {
    let rb = row * AP.hkv + h;
    let g = c / VG;
    let pr = kivi_v_pair(rb * VNG + g);
    let bit0 = (c - g * VG) * VB;
    let w = vseg[VP.codes + rb * VRW + g * VGW + (bit0 >> 5u)] >> (bit0 & 31u);
    var x: vec4<f32>;
    // @unroll 4
    for (var j = 0u; j < 4u; j++) {
        x[j] = kivi_reconstruct((w >> (j * VB)) & V_MASK, pr.x, pr.y);
    }
    return x;
}

// v̂ of channels c .. c + 7 of row `row` of head h (the tensor-core prefill kernel's value
// tiles, where V_OCT: c a multiple of 8, c + 7 < D, row within the segment): one group, one
// word of codes (G a multiple of 8, b ∈ {1, 2, 4}; D a multiple of 8), v_value's values, as
// two quads. In two steps, as k_oct (attend_k.wgsl): v_oct_fetch loads the words as stored
// (VOct), v_oct_make (the same row, c, h) turns them into the eight values.
const V_OCT: bool = VG % 8u == 0u && (VB == 1u || VB == 2u || VB == 4u) && DIM % 8u == 0u;

struct VOct {
    w: u32,
    p: vec2<u32>,
}

fn v_oct_fetch(row: u32, c: u32, h: u32) -> VOct {
    let rb = row * AP.hkv + h;
    let g = c / VG;
    let gi = rb * VNG + g;
    let bit0 = (c - g * VG) * VB;
    var r: VOct;
    r.w = vseg[VP.codes + rb * VRW + g * VGW + (bit0 >> 5u)];
    if (ATT_VPARAMS_F16 == 1u) {
        r.p.x = vseg[VP.params + gi];
    } else {
        r.p = vec2<u32>(vseg[VP.params + 2u * gi], vseg[VP.params + 2u * gi + 1u]);
    }
    return r;
}

fn v_oct_make(r: VOct, row: u32, c: u32, h: u32) -> array<vec4<f32>, 2> {
    var pr = bitcast<vec2<f32>>(r.p);
    if (ATT_VPARAMS_F16 == 1u) {
        pr = unpack2x16float(r.p.x);
    }
    let w = r.w >> (((c % VG) * VB) & 31u);
    var x: array<vec4<f32>, 2>;
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        x[j / 4u][j % 4u] = kivi_make((w >> (j * VB)) & V_MASK, pr.x, pr.y);
    }
    return x;
}
