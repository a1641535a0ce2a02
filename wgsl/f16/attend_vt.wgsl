// Tile hooks of the f16 codec, value side (wgsl/attend/attend_decode_tc.wgsl): rows of H·D
// f16 read by the kernel itself; one "group" as wide as any row, scale 1, offset 0.

const VT_CODES: bool = false;
const VT_B: u32 = 8u;
const VT_NG: u32 = 1u;
const VT_G: u32 = 65536u;
const VT_RW: u32 = 1u;

fn vt_word(row: u32, j: u32, h: u32) -> u32 {
    return 0u;
}

fn vt_pair(row: u32, g: u32, h: u32) -> vec2<f32> {
    return vec2<f32>(1.0, 0.0);
}

fn vt_row(row: u32) -> u32 {
    return VP.rows + row * AP.row_words;
}
