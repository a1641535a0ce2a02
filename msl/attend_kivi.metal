// attend_kivi: attention partials over a KIVI region, packed codes reconstructed in registers
// (layout: src/kivi/layout.rs): k̂ = f32(q·scale) + lo per (block, head, channel) group, v̂
// likewise per (token, head, channel group). Twin of wgsl/common/attend_codec_kivi.wgsl with
// the core of msl/common/attend.metal (bindings 0..2 and the dispatch are described there).
// Region rows are segment rows: row = pos - region_start + seg_offset.
// Specialization: PARAMS_F16 (msl/common/kivi.metal).
//
// [[buffer(3)]] kcodes:  uint [blocks][Hkv][D][kgroup_words]
// [[buffer(4)]] kparams: uint [blocks][Hkv][D][1 or 2]
// [[buffer(5)]] vcodes:  uint [tokens][Hkv][vrow_words]
// [[buffer(6)]] vparams: uint [tokens][Hkv][vn_groups][1 or 2]

struct AttendCodec {
    device const uint* kcodes;
    device const uint* kparams;
    device const uint* vcodes;
    device const uint* vparams;
};

static float codec_key(thread const AttendCodec& c, constant AttendParams& A, uint pos, uint h, uint d) {
    const uint r = pos - A.region_start + A.seg_offset;
    const uint gi = ((r / A.kgroup) * A.hkv + h) * A.dim + d;
    const uint code = kivi_get_code(c.kcodes, gi * A.kgroup_words, r % A.kgroup, A.kbits);
    const float2 pr = kivi_load_pair(c.kparams, gi);
    return kivi_reconstruct(code, pr.x, pr.y);
}

static float codec_value(thread const AttendCodec& c, constant AttendParams& A, uint pos, uint h, uint d) {
    const uint r = pos - A.region_start + A.seg_offset;
    const uint jg = d / A.vgroup;
    const uint row = r * A.hkv + h;
    const uint code = kivi_get_code(c.vcodes, row * A.vrow_words + jg * A.vgroup_words,
                                    d - jg * A.vgroup, A.vbits);
    const float2 pr = kivi_load_pair(c.vparams, row * A.vn_groups + jg);
    return kivi_reconstruct(code, pr.x, pr.y);
}

static_assert(WORKGROUP_SIZE == 128, "the attention core runs 4 SIMD groups of 32");

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void attend_kivi(constant AttendParams& A [[buffer(0)]],
                        device const float* q [[buffer(1)]],
                        device float* partials [[buffer(2)]],
                        device const uint* kcodes [[buffer(3)]],
                        device const uint* kparams [[buffer(4)]],
                        device const uint* vcodes [[buffer(5)]],
                        device const uint* vparams [[buffer(6)]],
                        uint3 wg [[threadgroup_position_in_grid]],
                        uint3 nwg [[threadgroups_per_grid]],
                        uint lid [[thread_index_in_threadgroup]],
                        uint slice [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
    threadgroup AttendShared sh;
    AttendCodec codec;
    codec.kcodes = kcodes;
    codec.kparams = kparams;
    codec.vcodes = vcodes;
    codec.vparams = vparams;
    attend_main(A, q, partials, codec, sh, lid, slice, lane, wg.y * nwg.x + wg.x);
}
