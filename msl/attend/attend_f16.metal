// attend_f16: attention partials over f16 rows (the uncompressed baseline cache, and KIVI's
// residual window). Twin of wgsl/attend/attend_f16.wgsl with the core of
// msl/attend/attend_core.metal (bindings 0..2 and the dispatch are described there).
// Token rows of H*D halves, two per uint (channel 2i in the low half). A ring (KIVI's
// residual) keeps token pos in row pos % ring_tokens; linear storage (ring_tokens = 0) in row
// pos - region_start + seg_offset.
//
// [[buffer(3)]] krows: uint [rows][row_words]
// [[buffer(4)]] vrows: uint [rows][row_words]

struct AttendCodec {
    device const uint* krows;
    device const uint* vrows;
    static constexpr bool kStages = false; // rows are read straight from the buffers
};

struct AttendStage {
    uint unused;
};

static void codec_stage(thread const AttendCodec&, constant AttendParams&, threadgroup AttendStage&,
                        uint, uint, uint, uint) {}

static inline uint attend_f16_row(constant AttendParams& A, uint pos) {
    if (A.ring_tokens != 0u) {
        return pos % A.ring_tokens;
    }
    return pos - A.region_start + A.seg_offset;
}

static float codec_key(thread const AttendCodec& c, constant AttendParams& A,
                       threadgroup const AttendStage&, uint pos, uint h, uint d) {
    const uint e = h * A.dim + d;
    const uint w = c.krows[attend_f16_row(A, pos) * A.row_words + (e >> 1u)];
    return attend_half_to_float((e & 1u) == 1u ? (w >> 16u) : w);
}

static float codec_value(thread const AttendCodec& c, constant AttendParams& A,
                         threadgroup const AttendStage&, uint pos, uint h, uint d) {
    const uint e = h * A.dim + d;
    const uint w = c.vrows[attend_f16_row(A, pos) * A.row_words + (e >> 1u)];
    return attend_half_to_float((e & 1u) == 1u ? (w >> 16u) : w);
}

static_assert(WORKGROUP_SIZE == 128, "the attention core runs 4 SIMD groups of 32");

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void attend_f16(constant AttendParams& A [[buffer(0)]],
                       device const float* q [[buffer(1)]],
                       device float* partials [[buffer(2)]],
                       device const uint* krows [[buffer(3)]],
                       device const uint* vrows [[buffer(4)]],
                       uint3 wg [[threadgroup_position_in_grid]],
                       uint3 nwg [[threadgroups_per_grid]],
                       uint lid [[thread_index_in_threadgroup]],
                       uint slice [[simdgroup_index_in_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]]) {
    threadgroup AttendShared sh;
    threadgroup AttendStage st;
    AttendCodec codec;
    codec.krows = krows;
    codec.vrows = vrows;
    attend_main(A, q, partials, codec, sh, st, lid, slice, lane, wg.y * nwg.x + wg.x);
}
