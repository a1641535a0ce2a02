// Uniform block of the attention kernels. Keep in sync with AttendParams in
// src/attention/gpu.rs and msl/attend/attend_core.metal.
struct AttendParams {
    tq: u32,
    hq: u32,
    hkv: u32,
    dim: u32,
    qgroup: u32,        // Hq / Hkv (<= 8)
    q_pos0: u32,        // position of query row 0 = T - Tq
    window: u32,        // 0: no sliding window
    sinks: u32,
    scale: f32,
    chunk_tokens: u32,
    n_chunks: u32,      // chunks in this dispatch
    chunk_base: u32,    // global index of this dispatch's first chunk
    nc_total: u32,      // chunks over all dispatches of this call
    region_start: u32,  // absolute position of the region's first token
    region_end: u32,
    seg_offset: u32,    // row (token) index of region_start inside the codec's buffers
    ring_tokens: u32,   // f16 codec: ring capacity (0: rows are linear)
    kbits: u32,
    kgroup: u32,
    kgroup_words: u32,
    vbits: u32,
    vgroup: u32,
    vgroup_words: u32,
    vrow_words: u32,
    vn_groups: u32,
    row_words: u32,     // f16 codec: words per token row (H*D halves)
    _pad0: u32,
    _pad1: u32,
}
