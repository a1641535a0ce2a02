// Attention hooks of the f16 codec, value side (wgsl/attend/attend_core.wgsl): rows of H·D
// f16, stream `rows` of the value segment at word VP.rows, accumulated by the core's f16
// reader (the output space: no finish; the ring's rows join them). CPU twin: src/cpu/f16/attend.rs.

// Keep in sync with `F16Uniform` in src/codecs/f16/mod.rs.
struct VF16Params {
    rows: u32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
}
@group(0) @binding(2) var<uniform> VP: VF16Params;

const V_W: u32 = ATT_DIM;
const V_CPL: u32 = (ATT_DIM + 7u) / 8u;
const V_SPACE_OUT: bool = true;

struct VState {
    o: array<vec4<f32>, V_CPL>,
}

fn v_reset(vs: ptr<function, VState>) {
    // @unroll 32
    for (var i = 0u; i < V_CPL; i++) {
        (*vs).o[i] = vec4<f32>(0.0);
    }
}

fn v_scale(vs: ptr<function, VState>, c: vec4<f32>) {
    // @unroll 32
    for (var i = 0u; i < V_CPL; i++) {
        (*vs).o[i] *= c;
    }
}

fn v_out(vs: ptr<function, VState>, i: u32) -> vec4<f32> {
    return (*vs).o[i];
}

fn v_add(vs: ptr<function, VState>, i: u32, x: vec4<f32>) {
    (*vs).o[i] += x;
}

fn v_accum(vs: ptr<function, VState>, row: u32, last: u32, cg: u32, h: u32, p: array<vec4<f32>, 8>) {
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        let w = VP.rows + min(row + j, last) * AP.row_words;
        if (F16_V4) {
            let a0 = f16_quad0(w, cg, h);
            // @unroll 4
            for (var k = 0u; k < R_QUADS; k++) {
                let u = f16_quad(true, false, a0 + k);
                // @unroll 4
                for (var e = 0u; e < 4u; e++) {
                    let x = unpack2x16float(u[e]);
                    (*vs).o[8u * k + 2u * e] += p[j] * x.x;
                    (*vs).o[8u * k + 2u * e + 1u] += p[j] * x.y;
                }
            }
        } else if (F16_PAIRS) {
            // @unroll 16
            for (var i = 0u; i < R_HALF; i++) {
                let x = f16_pair(true, false, w, cg, h, 2u * i);
                (*vs).o[2u * i] += p[j] * x.x;
                (*vs).o[2u * i + 1u] += p[j] * x.y;
            }
        } else {
            // @unroll 32
            for (var i = 0u; i < V_CPL; i++) {
                (*vs).o[i] += p[j] * f16_pair(true, false, w, cg, h, i).x;
            }
        }
    }
}

fn v_prepare(lid: u32, h: u32) {}

// Channel c of segment row `row` (clamped to `last`) of head h (the prefill kernel).
fn v_value(row: u32, last: u32, c: u32, h: u32) -> f32 {
    let e = h * DIM + c;
    return unpack2x16float(vseg[VP.rows + min(row, last) * AP.row_words + (e >> 1u)])[e & 1u];
}

fn v_finish(lid: u32, h: u32) {}

// Channels c .. c + 3 of row `row` of head h, two words (the prefill kernel's value tiles,
// where V_QUAD: c a multiple of 4, c + 3 < D, row within the segment; D even, so the first
// channel starts a word).
const V_QUAD: bool = DIM % 2u == 0u;

fn v_quad(row: u32, c: u32, h: u32) -> vec4<f32> {
    let w = VP.rows + row * AP.row_words + ((h * DIM + c) >> 1u);
    return vec4<f32>(unpack2x16float(vseg[w]), unpack2x16float(vseg[w + 1u]));
}

// Channels c .. c + 7 of row `row` of head h as they are stored, eight f16 in one 16-byte
// load (the tensor-core prefill kernel's value tiles, where V_ROW8: c a multiple of 8,
// c + 7 < V_W, row within the segment; aligned as k_row8 in attend_k.wgsl).
const V_ROW8: bool = DIM % 8u == 0u;

fn v_row8(row: u32, c: u32, h: u32) -> vec4<u32> {
    return vseg4[(VP.rows + row * AP.row_words + ((h * DIM + c) >> 1u)) >> 2u];
}
