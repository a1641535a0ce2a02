// Attention hooks of the f16 codec, key side (wgsl/attend/attend_core.wgsl): rows of H·D f16
// (two per word), stream `rows` of the key segment at word KP.rows; the core's f16 reader
// does the work. CPU twin: src/cpu/f16/attend.rs.

// Keep in sync with `F16Uniform` in src/codecs/f16/mod.rs.
struct KF16Params {
    rows: u32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
}
@group(0) @binding(1) var<uniform> KP: KF16Params;

const K_PREP: bool = false;
const K_PREP_W: u32 = 1u;
// Its keys are f16 rows: every k̂ is exact in f16 (the prefill kernels' optional hook).
const K_F16_EXACT: bool = true;

fn k_prepare(lid: u32, h: u32) {}

fn k_score(row: u32, last: u32, cg: u32, h: u32) -> array<vec4<f32>, 8> {
    var acc: array<vec4<f32>, 8>;
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        acc[j] = f16_dot(true, KP.rows + min(row + j, last) * AP.row_words, cg, h);
    }
    return acc;
}

// Channel c of segment row `row` (clamped to `last`) of head h (the prefill kernel).
fn k_value(row: u32, last: u32, c: u32, h: u32) -> f32 {
    let e = h * DIM + c;
    return unpack2x16float(kseg[KP.rows + min(row, last) * AP.row_words + (e >> 1u)])[e & 1u];
}

// Channels c .. c + 7 of segment row `row` of head h as they are stored: eight f16, two per
// word, in one 16-byte load (the tensor-core prefill kernel's key tiles, where K_ROW8: c a
// multiple of 8, c + 7 < D, row within the segment). D a multiple of 8 makes a row's words,
// h·D / 2 and c / 2 multiples of 4, and every stream starts on 16 bytes (src/store/gpu.rs).
const K_ROW8: bool = DIM % 8u == 0u;

fn k_row8(row: u32, c: u32, h: u32) -> vec4<u32> {
    return kseg4[(KP.rows + row * AP.row_words + ((h * DIM + c) >> 1u)) >> 2u];
}
