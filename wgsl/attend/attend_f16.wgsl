// Attention codec: f16 rows (the uncompressed baseline cache, and KIVI's residual window).
// Token rows of H*D halves, two per u32 (channel 2i in the low half). A ring (KIVI's residual)
// keeps token pos in row pos % ring_tokens; linear storage (ring_tokens = 0) in row
// pos - region_start + seg_offset.
//
// @binding(3) krows: array<u32> [rows][row_words]
// @binding(4) vrows: array<u32> [rows][row_words]

@group(0) @binding(3) var<storage, read> krows: array<u32>;
@group(0) @binding(4) var<storage, read> vrows: array<u32>;

// Rows are read straight from the buffers: no stage.
const CODEC_STAGES: bool = false;
fn codec_stage(t0: u32, n: u32, h: u32, lid: u32) {}

fn f16_row(pos: u32) -> u32 {
    if (A.ring_tokens != 0u) {
        return pos % A.ring_tokens;
    }
    return pos - A.region_start + A.seg_offset;
}

fn codec_key(pos: u32, h: u32, d: u32) -> f32 {
    let e = h * DIM + d;
    return unpack2x16float(krows[f16_row(pos) * A.row_words + (e >> 1u)])[e & 1u];
}

fn codec_value(pos: u32, h: u32, d: u32) -> f32 {
    let e = h * DIM + d;
    return unpack2x16float(vrows[f16_row(pos) * A.row_words + (e >> 1u)])[e & 1u];
}
