// QJL's key-side attention pieces (read wgsl/qjl/attend_k.wgsl for the mapping), shared by its
// key hook and TurboQuant-Prod's (wgsl/turboquant/attend_k_prod.wgsl): concatenated before
// either. Specialized on ATT_KQJL_M and ATT_KQJL_C (the bits of c = √(π/2)/m).

const KQ_M: u32 = ATT_KQJL_M;
const KQ_SW: u32 = ATT_KQJL_M / 32u;          // words per sign row
const KQ_CPL: u32 = ATT_KQJL_M / 8u;          // coordinates per lane
const KQ_LW: u32 = (KQ_CPL + 31u) / 32u;      // a lane's 32-bit pieces per row
const KQ_PW: u32 = min(KQ_CPL, 32u);          // bits of a full piece

// qp[off + i] = c·(S q)_i for the sketch S [m][stride] at word `tab` of ktab (q zero past D:
// the first D columns of each row).
fn kqjl_prepare(lid: u32, tab: u32, stride: u32, off: u32) {
    let c = bitcast<f32>(ATT_KQJL_C);
    for (var i = lid; i < KQ_M; i += WORKGROUP_SIZE) {
        let base = tab + i * stride;
        var a = vec4<f32>(0.0);
        for (var d = 0u; d < DIM; d++) {
            a += bitcast<f32>(ktab[base + d]) * qs[d];
        }
        qp[off + i] = a * c;
    }
}

// The lane's ⟨c·S q, 2σ_j − 1⟩ of its 8 tokens (not × n_j), the prepared sketch at qp[off ..),
// the sign rows at word `signs` of the key segment.
fn kqjl_signed(row: u32, last: u32, cg: u32, h: u32, signs: u32, off: u32) -> array<vec4<f32>, 8> {
    var acc: array<vec4<f32>, 8>;
    let e0 = off + cg * KQ_CPL;
    var all = vec4<f32>(0.0);
    // @unroll 64
    for (var i = 0u; i < KQ_CPL; i++) {
        all += qp[e0 + i];
    }
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        let r = min(row + j, last);
        let wb = signs + (r * A.hkv + h) * KQ_SW;
        var pos = vec4<f32>(0.0);
        // @unroll 2
        for (var k = 0u; k < KQ_LW; k++) {
            // A lane's piece may straddle two words (CPL not a divisor of 32, e.g. m = 96:
            // CPL = 12, lane 2 owns bits 24..35) and the last piece may be short (m = 384:
            // CPL = 48 = 32 + 16): the high word fills the piece, bits past CPL are masked.
            let e = e0 + 32u * k;
            let b0 = cg * KQ_CPL + 32u * k; // the piece's first sketch row
            let sh = b0 & 31u;
            let w = wb + (b0 >> 5u);
            var bits = kseg[w] >> sh;
            if (sh != 0u && sh + min(KQ_CPL - 32u * k, 32u) > 32u) {
                bits |= kseg[w + 1u] << (32u - sh);
            }
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
