// Attention hooks of TurboQuant, value side (msl/attend/attend_core.metal). Twin of
// wgsl/turboquant/attend_v.wgsl (read it: values in the rotated space, the norm folded into
// the weight, v_finish's inverse rotation); CPU twin src/cpu/turboquant/attend_v.rs. The
// centroids are read from this side's constant buffer (VP.cb). Specialized on ATT_VTQ_P,
// ATT_VTQ_LOG2P, ATT_VTQ_BITS, ATT_VTQ_STAGES, ATT_VTQ_C.

#define VTQ_P ATT_VTQ_P
#define VTQ_B ATT_VTQ_BITS
#define VTQ_S ATT_VTQ_STAGES
#define VTQ_N (1u << ATT_VTQ_BITS)
#define VTQ_RW ((VTQ_P * VTQ_B + 31u) / 32u)
#define VTQ_SW ((VTQ_P + 31u) / 32u)
#define V_W ATT_VTQ_P
#define V_CPL (ATT_VTQ_P / 8u > 1u ? ATT_VTQ_P / 8u : 1u)
#define V_SPACE_OUT false
#define VTQ_LB (V_CPL * VTQ_B)
#define VTQ_ALIGNED (VTQ_LB % 32u == 0u)
#define VTQ_NW ((VTQ_LB + 31u) / 32u)
#define VTQ_WIN (8u * VTQ_S * VTQ_NW)

// Keep in sync with `TurboQuantCodec::attend_uniform` in src/codecs/turboquant/codec.rs.
struct VTqParams {
    uint codes;
    uint norms;
    uint p0;
    uint p1;
    float cb[VTQ_S * VTQ_N]; // centroids [stage][2^b]
};
typedef VTqParams VParams;

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

static inline void v_accum(constant AttendParams& A, constant VParams& VP, device const uint* vseg,
                           device const uint* vtab, thread VState& s, uint row, uint last, uint cg, uint h,
                           thread const float4* p) {
    float4 wt[8];
    uint win[VTQ_WIN];
    const uint bit0 = cg * VTQ_LB;
    const uint w0 = bit0 >> 5u;
    const uint sh = bit0 & 31u;
    const uint nwn = (A.hkv + 1u) / 2u;
    for (uint j = 0u; j < 8u; ++j) {
        const uint r = min(row + j, last);
        wt[j] = p[j] * tq_norm_of(vseg[VP.norms + r * nwn + (h >> 1u)], h);
        const uint rb = VP.codes + (r * A.hkv + h) * VTQ_S * VTQ_RW;
        for (uint st = 0u; st < VTQ_S; ++st) {
            const uint base = rb + st * VTQ_RW;
            for (uint m = 0u; m < VTQ_NW; ++m) {
                uint word;
                if (VTQ_ALIGNED) {
                    word = vseg[base + w0 + m];
                } else {
                    const uint lo = vseg[base + min(w0 + m, VTQ_RW - 1u)];
                    const uint hi = vseg[base + min(w0 + m + 1u, VTQ_RW - 1u)];
                    word = tq_funnel(lo, hi, sh);
                }
                win[(j * VTQ_S + st) * VTQ_NW + m] = word;
            }
        }
    }
    for (uint i = 0u; i < V_CPL; ++i) {
        const uint at = i * VTQ_B;
        const uint m = at >> 5u;
        float4 o = s.o[i];
        for (uint j = 0u; j < 8u; ++j) {
            float y = 0.0f;
            for (uint st = 0u; st < VTQ_S; ++st) {
                const uint wi = (j * VTQ_S + st) * VTQ_NW + m;
                const uint code = tq_window_code(win[wi], win[min(wi + 1u, VTQ_WIN - 1u)], at & 31u, VTQ_B);
                y += VP.cb[st * VTQ_N + code];
            }
            o += wt[j] * y;
        }
        s.o[i] = o;
    }
}

template <typename Sh>
static inline void v_finish(constant AttendParams& A, constant VParams& VP, device const uint* vtab,
                            threadgroup Sh& S, uint lid, uint h) {
    for (uint p = 0u; p < ATT_VTQ_LOG2P; ++p) {
        const uint hh = 1u << p;
        for (uint q = lid; q < VTQ_P / 2u; q += WORKGROUP_SIZE) {
            const uint i = ((q >> p) << (p + 1u)) | (q & (hh - 1u));
            const float a = S.fin[i];
            const float b = S.fin[i + hh];
            S.fin[i] = a + b;
            S.fin[i + hh] = a - b;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    const float c = as_type<float>(uint(ATT_VTQ_C));
    for (uint i = lid; i < VTQ_P; i += WORKGROUP_SIZE) {
        const uint s = ((vtab[h * VTQ_SW + (i >> 5u)] >> (i & 31u)) & 1u) << 31u;
        S.fin[i] = as_type<float>(as_type<uint>(S.fin[i] * c) ^ s);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
}

// Twin of wgsl/turboquant/attend_v.wgsl's v_value (the prefill kernel's element reader).
static inline float v_value(constant AttendParams& A, constant VParams& VP, device const uint* vseg,
                            device const uint* vtab, uint row, uint last, uint c, uint h) {
    const uint r = min(row, last);
    const float n = tq_norm_of(vseg[VP.norms + r * ((A.hkv + 1u) / 2u) + (h >> 1u)], h);
    const uint at = c * VTQ_B;
    const uint off = at & 31u;
    float y = 0.0f;
    for (uint st = 0u; st < VTQ_S; ++st) {
        const uint w = VP.codes + ((r * A.hkv + h) * VTQ_S + st) * VTQ_RW + (at >> 5u);
        const uint hi = off + VTQ_B > 32u ? vseg[w + 1u] : 0u;
        y += VP.cb[st * VTQ_N + bits_code(vseg[w], hi, off, VTQ_B)];
    }
    return n * y;
}
