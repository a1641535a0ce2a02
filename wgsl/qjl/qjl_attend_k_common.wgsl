// QJL's key-side attention pieces (read wgsl/qjl/attend_k.wgsl for the mapping), shared by its
// key hook and TurboQuant-Prod's (wgsl/turboquant_prod/attend_k.wgsl): concatenated before
// either. Specialized on ATT_KQJL_M, ATT_KQJL_C (the bits of c = √(π/2)/m) and ATT_KQJL_LUT
// (1: scores by a nibble table, 0: by masked sums; the codec picks from the device's
// workgroup-storage limit, src/codecs/qjl/codec.rs `sketch_lut_fits`).
//
// The prepared query at qp[off ..) (vec4 = the 4 vectors), KQ_PREP_W entries:
// - masked sums (ATT_KQJL_LUT = 0): qp[off + i] = c·(S q)_i, i < m;
// - nibble table (ATT_KQJL_LUT = 1): for each group g of 4 sketch rows and each nibble
//   v = σ_{4g} | σ_{4g+1}<<1 | σ_{4g+2}<<2 | σ_{4g+3}<<3, qp[off + 16g + v] =
//   Σ_{b<4} (bit b of v ? +1 : −1)·c·(S q)_{4g+b}, so that ⟨c·S q, 2σ − 1⟩ of a lane's slice is
//   one table entry per 4 sign bits; c·S q itself is staged at qp[off + 4m + i] (m entries).

const KQ_M: u32 = ATT_KQJL_M;
const KQ_LUT: bool = ATT_KQJL_LUT == 1u;
const KQ_PREP_W: u32 = select(ATT_KQJL_M, 5u * ATT_KQJL_M, KQ_LUT);
const KQ_SW: u32 = ATT_KQJL_M / 32u;          // words per sign row
const KQ_CPL: u32 = ATT_KQJL_M / 8u;          // coordinates per lane (a multiple of 4)
const KQ_LW: u32 = (KQ_CPL + 31u) / 32u;      // a lane's 32-bit pieces per row
const KQ_PW: u32 = min(KQ_CPL, 32u);          // bits of a full piece
const KQ_NPW: u32 = KQ_PW / 4u;               // nibbles of a full piece

// The prepared query of the sketch Sᵀ [≥ D][m] at word `tab` of ktab (src/cpu/common/sketch.rs
// gpu_sketch_table; q zero past D: its first D rows) at qp[off ..). Invocation i sums row i of
// S in index order, consecutive invocations reading consecutive words. Every invocation calls
// it (it holds a barrier).
fn kqjl_prepare(lid: u32, tab: u32, off: u32) {
    let c = bitcast<f32>(ATT_KQJL_C);
    let raw = off + select(0u, 4u * KQ_M, KQ_LUT);
    for (var i = lid; i < KQ_M; i += WORKGROUP_SIZE) {
        var a = vec4<f32>(0.0);
        for (var d = 0u; d < DIM; d++) {
            a += bitcast<f32>(ktab[tab + d * KQ_M + i]) * qs[d];
        }
        qp[raw + i] = a * c;
    }
    if (KQ_LUT) {
        workgroupBarrier();
        for (var e = lid; e < 4u * KQ_M; e += WORKGROUP_SIZE) {
            let g = raw + 4u * (e >> 4u);
            var t = vec4<f32>(0.0);
            // @unroll 4
            for (var b = 0u; b < 4u; b++) {
                let x = qp[g + b];
                t += select(-x, x, ((e >> b) & 1u) != 0u);
            }
            qp[off + e] = t;
        }
    }
}

// The lane's CPL sign bits of a sign row at word `wb`, piece k (bits 32k .. of its slice; a
// piece may straddle two words when CPL does not divide 32, e.g. m = 96: CPL = 12, lane 2 owns
// bits 24..35; the last may be short, m = 384: CPL = 48 = 32 + 16; bits past CPL are garbage).
fn kqjl_piece(wb: u32, cg: u32, k: u32) -> u32 {
    let b0 = cg * KQ_CPL + 32u * k; // the piece's first sketch row
    let sh = b0 & 31u;
    let w = wb + (b0 >> 5u);
    var bits = kseg[w] >> sh;
    if (sh != 0u && sh + min(KQ_CPL - 32u * k, 32u) > 32u) {
        bits |= kseg[w + 1u] << (32u - sh);
    }
    return bits;
}

// The lane's ⟨c·S q, 2σ_j − 1⟩ of its 8 tokens (not × n_j), the prepared query at qp[off ..),
// the sign rows at word `signs` of the key segment.
fn kqjl_signed(row: u32, last: u32, cg: u32, h: u32, signs: u32, off: u32) -> array<vec4<f32>, 8> {
    var acc: array<vec4<f32>, 8>;
    if (KQ_LUT) {
        // The lane's first table: its slice starts at sketch row cg·CPL, group cg·CPL/4.
        let t0 = off + 4u * cg * KQ_CPL;
        // @unroll 8
        for (var j = 0u; j < 8u; j++) {
            let r = min(row + j, last);
            let wb = signs + (r * AP.hkv + h) * KQ_SW;
            var s = vec4<f32>(0.0);
            // @unroll 2
            for (var k = 0u; k < KQ_LW; k++) {
                let bits = kqjl_piece(wb, cg, k);
                // @unroll 8
                for (var n = 0u; n < KQ_NPW; n++) {
                    let g = 8u * k + n; // the lane's group
                    if (4u * g < KQ_CPL) {
                        s += qp[t0 + 16u * g + ((bits >> (4u * n)) & 15u)];
                    }
                }
            }
            acc[j] = s;
        }
        return acc;
    }
    let e0 = off + cg * KQ_CPL;
    var all = vec4<f32>(0.0);
    // @unroll 64
    for (var i = 0u; i < KQ_CPL; i++) {
        all += qp[e0 + i];
    }
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        let r = min(row + j, last);
        let wb = signs + (r * AP.hkv + h) * KQ_SW;
        var pos = vec4<f32>(0.0);
        // @unroll 2
        for (var k = 0u; k < KQ_LW; k++) {
            let e = e0 + 32u * k;
            let bits = kqjl_piece(wb, cg, k);
            // @unroll 32
            for (var i = 0u; i < KQ_PW; i++) {
                let on = ((bits >> i) & 1u) != 0u && 32u * k + i < KQ_CPL;
                pos += select(vec4<f32>(0.0), qp[e + i], on);
            }
        }
        acc[j] = 2.0 * pos - all;
    }
    return acc;
}
