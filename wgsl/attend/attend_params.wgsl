// Uniform block of the attention kernels (one per dispatch). Keep in sync with AttendParams in
// src/attention/plan.rs and msl/attend/attend_core.metal.
//
// A dispatch covers the tokens [tok0, tok_end) of the cache; both sides' stored words of those
// tokens are in their segment `seg` (first token seg_tok0 = tok0) up to the side's Q (qk for
// keys, qv for values) and in the side's residual ring above it. Its work is cut into splits:
// `n_split_c` codec splits over [tok0, c_end) (values from the value codec, c_end = min(qv,
// tok_end)), then `n_split_r` ring splits over [r0, tok_end) (values from the ring, r0 =
// max(qv, tok0)); keys of any token come from the key codec below qk, from the ring above.
struct AttendParams {
    tq: u32,            // query rows
    hq: u32,            // query heads
    hkv: u32,           // KV heads
    qg: u32,            // Hq / Hkv
    q_pos0: u32,        // position of query row 0 = T - Tq
    window: u32,        // 0: no sliding window
    sinks: u32,
    scale_log2: f32,    // score scale × log2(e): softmax in base 2
    vec_total: u32,     // query vectors = Tq × qg
    vblocks: u32,       // workgroups per (KV head, split) = ceil(vec_total / 4)
    tok0: u32,
    tok_end: u32,
    qk: u32,            // keys quantized below this position
    qv: u32,            // values quantized below this position
    c_end: u32,
    r0: u32,
    n_split_c: u32,
    split_c: u32,       // tokens per codec split (a multiple of 32)
    n_split_r: u32,
    split_r: u32,       // tokens per ring split (a multiple of 32)
    part_c: u32,        // partial slot of this dispatch's first codec split
    part_r: u32,        // partial slot of this dispatch's first ring split
    n_parts: u32,       // partial slots per query vector (all dispatches of the call)
    n_parts_c: u32,     // of which in the value codec's space (the first ones)
    ring_cap_k: u32,    // rows of the key side's residual ring (1 when there is none)
    ring_cap_v: u32,    // rows of the value side's
    row_words: u32,     // u32 words of one f16 row (H·D halves)
    direct: u32,        // 1: one split per vector: write the normalized output, no merge
    t_total: u32,       // tokens in the cache (T)
    // A cache that evicted tokens (ATT_POS = 1, wgsl/attend/attend_core.wgsl `key_pos`): the
    // key segment's positions stream starts at word pos_off ([pos_rows][hkv] u32 absolute
    // positions of slots [0, pos_rows), segment 0 only: 0 rows in the other segments' dispatches);
    // slot s ≥ pos_rows sits at s + evicted. q_pos0 then counts the evicted tokens too.
    pos_off: u32,
    pos_rows: u32,
    evicted: u32,
}
