// attend_kivi: attention partials over a KIVI region, packed codes reconstructed in registers
// (layout: src/codecs/kivi/layout.rs): k̂ = f32(q·scale) + lo per (block, head, channel) group, v̂
// likewise per (token, head, channel group). Twin of wgsl/attend/attend_kivi.wgsl with
// the core of msl/attend/attend_core.metal (bindings 0..2 and the dispatch are described there).
// Region rows are segment rows: row = pos - region_start + seg_offset.
// Specialization: PARAMS_F16 (msl/kivi/kivi_common.metal), ATT_DIM, ATT_KBITS, ATT_VBITS,
// ATT_VGROUP, ATT_STAGE. ATT_STAGE = 1: `codec_stage` copies a 32-token tile's packed words
// (its slice of every channel's key stream, the block's key parameters, its value rows and
// their parameters) into threadgroup memory and the codec decodes from there, as the WGSL
// codec does; the host sets it only where such a tile lies inside one key block.
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
    static constexpr bool kStages = ATT_STAGE == 1u;
};

// Parameter words per group, value groups per row, value words per row (src/codecs/kivi/layout.rs).
#define KIVI_PW (2u - PARAMS_F16)
#define KIVI_VGW ((ATT_VGROUP * ATT_VBITS + 31u) / 32u)
#define KIVI_VNG ((ATT_DIM + ATT_VGROUP - 1u) / ATT_VGROUP)
#define KIVI_VRW ((ATT_DIM / ATT_VGROUP) * KIVI_VGW + ((ATT_DIM % ATT_VGROUP) * ATT_VBITS + 31u) / 32u)
#define KIVI_STAGED(n) (ATT_STAGE == 1u ? (n) : 1u)

// The staged tile: keys [D][KBITS] words (32 tokens of each channel's stream), key params
// [D][PW], values [TILE][VRW], value params [TILE][VNG][PW], and the tile's first position.
struct AttendStage {
    uint kst[KIVI_STAGED(ATT_DIM * ATT_KBITS)];
    uint kps[KIVI_STAGED(ATT_DIM * KIVI_PW)];
    uint vst[KIVI_STAGED(ATTEND_TILE * KIVI_VRW)];
    uint vps[KIVI_STAGED(ATTEND_TILE * KIVI_VNG * KIVI_PW)];
    uint t0;
};

// Copies tokens [t0, t0 + n) of KV head h (n <= 32, inside one key block) into the stage;
// every thread calls it, the core puts a barrier after it.
static void codec_stage(thread const AttendCodec& c, constant AttendParams& A,
                        threadgroup AttendStage& st, uint t0, uint n, uint h, uint lid) {
    const uint r0 = t0 - A.region_start + A.seg_offset;
    const uint gi0 = ((r0 / A.kgroup) * A.hkv + h) * A.dim; // group of (block, h, channel 0)
    const uint w0 = ((r0 % A.kgroup) * A.kbits) >> 5u;      // the tile's first word per stream
    if (lid == 0u) {
        st.t0 = t0;
    }
    for (uint x = lid; x < ATT_DIM * ATT_KBITS; x += ATTEND_THREADS) {
        st.kst[x] = c.kcodes[(gi0 + x / ATT_KBITS) * A.kgroup_words + w0 + x % ATT_KBITS];
    }
    for (uint x = lid; x < ATT_DIM * KIVI_PW; x += ATTEND_THREADS) {
        st.kps[x] = c.kparams[gi0 * KIVI_PW + x];
    }
    for (uint x = lid; x < n * KIVI_VRW; x += ATTEND_THREADS) {
        st.vst[x] = c.vcodes[((r0 + x / KIVI_VRW) * A.hkv + h) * KIVI_VRW + x % KIVI_VRW];
    }
    const uint vpw = KIVI_VNG * KIVI_PW;
    for (uint x = lid; x < n * vpw; x += ATTEND_THREADS) {
        st.vps[x] = c.vparams[((r0 + x / vpw) * A.hkv + h) * vpw + x % vpw];
    }
}

// Code i (b bits) of the staged stream starting at word `base`.
static inline uint kivi_staged_code(threadgroup const uint* words, uint base, uint i, uint b) {
    const uint start = i * b;
    const uint w = base + (start >> 5u);
    const uint off = start & 31u;
    uint v = words[w] >> off;
    if (off + b > 32u) {
        v |= words[w + 1u] << (32u - off);
    }
    return v & ((1u << b) - 1u);
}

static inline float2 kivi_staged_pair(threadgroup const uint* params, uint gi) {
    if (PARAMS_F16 == 1u) {
        const uint w = params[gi];
        return float2(kivi_f16_to_float(w), kivi_f16_to_float(w >> 16u));
    }
    return float2(as_type<float>(params[2u * gi]), as_type<float>(params[2u * gi + 1u]));
}

static float codec_key(thread const AttendCodec& c, constant AttendParams& A,
                       threadgroup const AttendStage& st, uint pos, uint h, uint d) {
    if (AttendCodec::kStages) {
        const uint code = kivi_staged_code(st.kst, d * ATT_KBITS, pos - st.t0, ATT_KBITS);
        const float2 pr = kivi_staged_pair(st.kps, d);
        return kivi_reconstruct(code, pr.x, pr.y);
    }
    const uint r = pos - A.region_start + A.seg_offset;
    const uint gi = ((r / A.kgroup) * A.hkv + h) * A.dim + d;
    const uint code = kivi_get_code(c.kcodes, gi * A.kgroup_words, r % A.kgroup, A.kbits);
    const float2 pr = kivi_load_pair(c.kparams, gi);
    return kivi_reconstruct(code, pr.x, pr.y);
}

static float codec_value(thread const AttendCodec& c, constant AttendParams& A,
                         threadgroup const AttendStage& st, uint pos, uint h, uint d) {
    if (AttendCodec::kStages) {
        const uint j = pos - st.t0;
        const uint jg = d / ATT_VGROUP;
        const uint code = kivi_staged_code(st.vst, j * KIVI_VRW + jg * KIVI_VGW,
                                           d - jg * ATT_VGROUP, ATT_VBITS);
        const float2 pr = kivi_staged_pair(st.vps, j * KIVI_VNG + jg);
        return kivi_reconstruct(code, pr.x, pr.y);
    }
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
    threadgroup AttendStage st;
    AttendCodec codec;
    codec.kcodes = kcodes;
    codec.kparams = kparams;
    codec.vcodes = vcodes;
    codec.vparams = vparams;
    attend_main(A, q, partials, codec, sh, st, lid, slice, lane, wg.y * nwg.x + wg.x);
}
