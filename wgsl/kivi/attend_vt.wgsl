// Tile hooks of KIVI, value side (wgsl/attend/attend_decode_tc.wgsl). Codes per token along
// channels: a row is VRW words, group g's codes start at word g·VGW (the host requires
// G·b to be a multiple of 32, G a multiple of 16 dividing D, b ∈ {1, 2, 4, 8}), so word j
// holds channels j·32/b ... v̂ = scale·code + lo: the kernel folds scale into the softmax
// weight and adds Σ p·lo per group once.

const VT_CODES: bool = true;
const VT_B: u32 = VB;
const VT_NG: u32 = VNG;
const VT_G: u32 = VG;
const VT_RW: u32 = VRW;

fn vt_word(row: u32, j: u32, h: u32) -> u32 {
    return vseg[VP.codes + (row * AP.hkv + h) * VRW + j];
}

fn vt_pair(row: u32, g: u32, h: u32) -> vec2<f32> {
    return kivi_v_pair((row * AP.hkv + h) * VNG + g);
}

fn vt_row(row: u32) -> u32 {
    return 0u;
}
