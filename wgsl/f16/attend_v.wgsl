// Attention hooks of the f16 codec, value side (wgsl/attend/attend_core.wgsl): rows of H·D
// f16, stream `rows` of the value segment at word VP.rows, accumulated by the core's f16
// reader into `vo` (the output space: no finish; the ring's rows join them). CPU twin: src/cpu/f16/attend.rs.

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

var<private> vo: array<vec4<f32>, V_CPL>;

fn v_reset() {
    for (var i = 0u; i < V_CPL; i++) {
        vo[i] = vec4<f32>(0.0);
    }
}

fn v_scale(c: vec4<f32>) {
    for (var i = 0u; i < V_CPL; i++) {
        vo[i] *= c;
    }
}

fn v_out(i: u32) -> vec4<f32> {
    return vo[i];
}

fn v_accum(row: u32, last: u32, cg: u32, h: u32, p: array<vec4<f32>, 8>) {
    var w: array<u32, 8>;
    for (var j = 0u; j < 8u; j++) {
        w[j] = VP.rows + min(row + j, last) * A.row_words;
    }
    f16_accum(true, w, cg, h, p);
}

fn v_finish(lid: u32, h: u32) {}
