// Attention hooks of VecInfer, key side (wgsl/attend/attend_core.wgsl; the contract:
// ../shared/spec/vecinfer.md "Attention"): streams `codes` (word KP.codes, [tokens][H][KVI_RW]:
// one packed row of n_sub = P/d_s indices of log2 C bits per token and head, bitpack.md) of
// the key segment; tables (ktab, f32 bits): λ [H][D], then the key codebooks [H][C][d_s].
// CPU twin: src/cpu/vecinfer/attend_k.rs. No key is ever reconstructed.
//
// k_prepare (once per workgroup): q̃ = H_P·(q ⊙ λ_h)/√P of the 4 scaled query vectors into qp
// (zero-padded from D to P; butterflies by pairs, a barrier per pass), then the LUT
// [n_sub][C] of every vector (vec4 = the 4 vectors: each query vector, i.e. each query head of
// the group, has its own), LUT[s][c] = Σ_i q̃[s·d_s + i]·cb_h[c][i], into workgroup memory.
// k_score: lane cg sums the entries of sub-vectors cg, cg + 8, ... of its 8 tokens (the core
// adds the 8 lanes): score = Σ_s LUT[s][index_s].
//
// The LUT is f32 (16 bytes per entry) where it fits the device's workgroup storage, else f16
// (ATT_KVI_LUT16 = 1: 8 bytes per entry, each of the 4 vectors' entry rounded to the nearest
// f16). The f16 LUT's error: each entry carries a relative error ≤ 2⁻¹¹, so a score (already
// scaled by scale·log2 e) is off by at most 2⁻¹¹·Σ_s |LUT[s][index_s]|; the spec bounds the
// output at 1e-3 relative L2 per row for this variant (1e-4 for the f32 one). An entry beyond
// f16's range (|x| > 65504, a score of that size) is not representable: the codec picks f16 only
// when f32 does not fit (src/codecs/vecinfer/codec.rs).
// Where not even the f16 LUT fits (ATT_KVI_CB = 1, e.g. bits=2 at D = 128: 64 KiB), k_prepare
// stages the head's codebook [C][d_s] (f32) instead and k_score computes each sub-vector's
// Σ_i q̃[s·d_s + i]·cb_h[c][i] per token: the f32 LUT's entry, same products in the same order,
// d_s vec4 multiply-adds instead of one lookup.
// Specialized on ATT_KVI_P, ATT_KVI_LOG2P, ATT_KVI_DS, ATT_KVI_BITS (log2 C), ATT_KVI_LUT16,
// ATT_KVI_CB, ATT_KVI_C (the bits of c = f32(1/√P)).

// Keep in sync with `VecInferCodec::attend_uniform` in src/codecs/vecinfer/codec.rs.
struct KViParams {
    codes: u32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
}
@group(0) @binding(1) var<uniform> KP: KViParams;

const KVI_P: u32 = ATT_KVI_P;
const KVI_DS: u32 = ATT_KVI_DS;
const KVI_B: u32 = ATT_KVI_BITS;
const KVI_C: u32 = 1u << ATT_KVI_BITS;
const KVI_NSUB: u32 = ATT_KVI_P / ATT_KVI_DS;
const KVI_RW: u32 = (KVI_NSUB * KVI_B + 31u) / 32u;   // words per index row
const KVI_SPL: u32 = (KVI_NSUB + 7u) / 8u;            // sub-vectors per lane
const KVI_N: u32 = KVI_NSUB * KVI_C;                  // LUT entries
const KVI_LUT16: bool = ATT_KVI_LUT16 == 1u;
const KVI_CB: bool = ATT_KVI_CB == 1u;

const K_PREP: bool = true;
const K_PREP_W: u32 = KVI_P;

// The LUT [n_sub][C] in one of its two precisions, or the codebook [C][d_s] (the others a
// single entry).
var<workgroup> kvi_lut: array<vec4<f32>, select(KVI_N, 1u, KVI_LUT16 || KVI_CB)>;
var<workgroup> kvi_lut16: array<vec2<u32>, select(1u, KVI_N, KVI_LUT16)>;
var<workgroup> kvi_cb: array<f32, select(1u, KVI_C * KVI_DS, KVI_CB)>;

fn k_prepare(lid: u32, h: u32) {
    for (var i = lid; i < KVI_P; i += WORKGROUP_SIZE) {
        var x = vec4<f32>(0.0);
        if (i < DIM) {
            x = qs[i] * bitcast<f32>(ktab[h * DIM + i]);
        }
        qp[i] = x;
    }
    workgroupBarrier();
    for (var p = 0u; p < ATT_KVI_LOG2P; p++) {
        let hh = 1u << p;
        for (var q = lid; q < KVI_P / 2u; q += WORKGROUP_SIZE) {
            let i = ((q >> p) << (p + 1u)) | (q & (hh - 1u));
            let a = qp[i];
            let b = qp[i + hh];
            qp[i] = a + b;
            qp[i + hh] = a - b;
        }
        workgroupBarrier();
    }
    let c = bitcast<f32>(ATT_KVI_C);
    for (var i = lid; i < KVI_P; i += WORKGROUP_SIZE) {
        qp[i] *= c;
    }
    workgroupBarrier();
    let cb0 = AP.hkv * DIM + h * KVI_C * KVI_DS;
    if (KVI_CB) {
        for (var e = lid; e < KVI_C * KVI_DS; e += WORKGROUP_SIZE) {
            kvi_cb[e] = bitcast<f32>(ktab[cb0 + e]);
        }
        return;
    }
    for (var e = lid; e < KVI_N; e += WORKGROUP_SIZE) {
        let s = e / KVI_C;
        let cw = cb0 + (e % KVI_C) * KVI_DS;
        var x = vec4<f32>(0.0);
        for (var i = 0u; i < KVI_DS; i++) {
            x += qp[s * KVI_DS + i] * bitcast<f32>(ktab[cw + i]);
        }
        if (KVI_LUT16) {
            kvi_lut16[e] = vec2<u32>(pack2x16float(x.xy), pack2x16float(x.zw));
        } else {
            kvi_lut[e] = x;
        }
    }
}

// LUT entry e of the 4 vectors.
fn kvi_entry(e: u32) -> vec4<f32> {
    if (KVI_LUT16) {
        let w = kvi_lut16[e];
        return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
    }
    return kvi_lut[e];
}

// The 4 vectors' score of index c at sub-vector s: the LUT's entry, or (KVI_CB) the same sum
// from the codebook.
fn kvi_score(s: u32, c: u32) -> vec4<f32> {
    if (KVI_CB) {
        var x = vec4<f32>(0.0);
        // @unroll 8
        for (var i = 0u; i < KVI_DS; i++) {
            x += qp[s * KVI_DS + i] * kvi_cb[c * KVI_DS + i];
        }
        return x;
    }
    return kvi_entry(s * KVI_C + c);
}

fn k_score(row: u32, last: u32, cg: u32, h: u32) -> array<vec4<f32>, 8> {
    var acc: array<vec4<f32>, 8>;
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        let base = KP.codes + (min(row + j, last) * AP.hkv + h) * KVI_RW;
        var a = vec4<f32>(0.0);
        // @unroll 8
        for (var m = 0u; m < KVI_SPL; m++) {
            let s = cg + 8u * m;
            if (s < KVI_NSUB) {
                let at = s * KVI_B;
                let w = base + (at >> 5u);
                var hi = 0u;
                if ((at & 31u) + KVI_B > 32u) {
                    hi = kseg[w + 1u];
                }
                a += kvi_score(s, bits_code(kseg[w], hi, at & 31u, KVI_B));
            }
        }
        acc[j] = a;
    }
    return acc;
}
