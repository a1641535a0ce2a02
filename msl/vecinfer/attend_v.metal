// Attention hooks of VecInfer, value side (msl/attend/attend_core.metal). Twin of
// wgsl/vecinfer/attend_v.wgsl (read it: values in the transformed space, the codebook read from
// the tables, v_finish's inverse Hadamard); CPU twin src/cpu/vecinfer/attend_v.rs. Specialized
// on ATT_VVI_P, ATT_VVI_LOG2P, ATT_VVI_DS, ATT_VVI_BITS, ATT_VVI_C.

#define VVI_P ATT_VVI_P
#define VVI_DS ATT_VVI_DS
#define VVI_B ATT_VVI_BITS
#define VVI_C (1u << ATT_VVI_BITS)
#define VVI_RW ((ATT_VVI_P / ATT_VVI_DS * VVI_B + 31u) / 32u)
#define V_W ATT_VVI_P
#define V_CPL (ATT_VVI_P / 8u > 1u ? ATT_VVI_P / 8u : 1u)
#define V_SPACE_OUT false

// Keep in sync with `VecInferCodec::attend_uniform` in src/codecs/vecinfer/codec.rs.
struct VViParams {
    uint codes;
    uint p0;
    uint p1;
    uint p2;
};
typedef VViParams VParams;

struct VState {
    float4 o[V_CPL];
};

static inline void v_reset(thread VState& s) {
    for (uint i = 0u; i < V_CPL; ++i) {
        s.o[i] = float4(0.0f);
    }
}

static inline void v_scale(thread VState& s, float4 c) {
    for (uint i = 0u; i < V_CPL; ++i) {
        s.o[i] *= c;
    }
}

static inline float4 v_out(thread const VState& s, uint i) {
    return s.o[i];
}

// Twin of wgsl/vecinfer/attend_v.wgsl's vvi_coord.
static inline float vvi_coord(constant AttendParams& A, constant VParams& VP, device const uint* vseg,
                              device const uint* vtab, uint r, uint x, uint h) {
    const uint at = (x / VVI_DS) * VVI_B;
    const uint w = VP.codes + (r * A.hkv + h) * VVI_RW + (at >> 5u);
    const uint hi = (at & 31u) + VVI_B > 32u ? vseg[w + 1u] : 0u;
    const uint idx = bits_code(vseg[w], hi, at & 31u, VVI_B);
    return as_type<float>(vtab[(h * VVI_C + idx) * VVI_DS + x % VVI_DS]);
}

static inline void v_accum(constant AttendParams& A, constant VParams& VP, device const uint* vseg,
                           device const uint* vtab, thread VState& s, uint row, uint last, uint cg,
                           uint h, thread const float4* p) {
    for (uint j = 0u; j < 8u; ++j) {
        const uint r = min(row + j, last);
        for (uint i = 0u; i < V_CPL; ++i) {
            const uint x = cg * V_CPL + i;
            if (x < V_W) {
                s.o[i] += p[j] * vvi_coord(A, VP, vseg, vtab, r, x, h);
            }
        }
    }
}

// Twin of wgsl/vecinfer/attend_v.wgsl's v_value (the prefill kernel's element reader).
static inline float v_value(constant AttendParams& A, constant VParams& VP, device const uint* vseg,
                            device const uint* vtab, uint row, uint last, uint c, uint h) {
    return vvi_coord(A, VP, vseg, vtab, min(row, last), c, h);
}

template <typename Sh>
static inline void v_finish(constant AttendParams& A, constant VParams& VP, device const uint* vtab,
                            threadgroup Sh& S, uint lid, uint h) {
    for (uint p = 0u; p < ATT_VVI_LOG2P; ++p) {
        const uint hh = 1u << p;
        for (uint q = lid; q < VVI_P / 2u; q += WORKGROUP_SIZE) {
            const uint i = ((q >> p) << (p + 1u)) | (q & (hh - 1u));
            const float a = S.fin[i];
            const float b = S.fin[i + hh];
            S.fin[i] = a + b;
            S.fin[i + hh] = a - b;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    const float c = as_type<float>(uint(ATT_VVI_C));
    for (uint i = lid; i < VVI_P; i += WORKGROUP_SIZE) {
        S.fin[i] *= c;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
}
