// Tile hooks of KIVI, key side (wgsl/attend/attend_decode_tc.wgsl: the tensor-core decode
// kernel). Codes per channel along tokens (src/codecs/kivi/layout.rs): a tile of TD_TT tokens
// lies in one key block (the host requires G to be a multiple of 32 and b ∈ {1, 2, 4, 8}, with
// TD_TT·b a multiple of 32), so a channel's codes of the tile are TD_TT·b/32 whole words.
// k̂ = scale·code + lo: the kernel folds scale into the query and Σ q·lo into the score.

const KT_CODES: bool = true;
const KT_B: u32 = KB;

fn kt_word(row0: u32, c: u32, j: u32, h: u32) -> u32 {
    let gi = ((row0 / KG) * AP.hkv + h) * DIM + c;
    return kseg[KP.codes + gi * KGW + ((row0 % KG) * KB) / 32u + j];
}

fn kt_pair(row0: u32, c: u32, h: u32) -> vec2<f32> {
    return kivi_k_pair(((row0 / KG) * AP.hkv + h) * DIM + c);
}

fn kt_row(row: u32) -> u32 {
    return 0u;
}
