// Attention hooks of the f16 codec, value side (wgsl/attend/attend_core.wgsl): rows of H·D
// f16, stream `rows` of the value segment at word VP.rows, accumulated in the core's f16
// accumulator (the output space: no finish). CPU twin: src/cpu/f16/attend.rs.

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

fn v_reset() {
    ring_reset();
}

fn v_scale(c: vec4<f32>) {
    ring_scale(c);
}

fn v_out(i: u32) -> vec4<f32> {
    return ro[i];
}

fn v_accum(row: u32, last: u32, cg: u32, h: u32, p: array<vec4<f32>, 8>) {
    var w: array<u32, 8>;
    for (var j = 0u; j < 8u; j++) {
        w[j] = VP.rows + min(row + j, last) * A.row_words;
    }
    f16_accum(true, w, cg, h, p);
}

fn v_finish(lid: u32, h: u32) {}
