// Tile hooks of the f16 codec, key side (wgsl/attend/attend_decode_tc.wgsl): rows of H·D f16,
// which the kernel reads itself (as the ring's); kt_row gives a segment row's first word.

const KT_CODES: bool = false;
const KT_B: u32 = 8u;

fn kt_word(row0: u32, c: u32, j: u32, h: u32) -> u32 {
    return 0u;
}

fn kt_pair(row0: u32, c: u32, h: u32) -> vec2<f32> {
    return vec2<f32>(1.0, 0.0);
}

fn kt_row(row: u32) -> u32 {
    return KP.rows + row * AP.row_words;
}
