// Attention hooks of QJL keys (wgsl/attend/attend_core.wgsl; the contract:
// ../shared/spec/qjl.md "Kernels"): streams `signs` (word KP.signs, [tokens][H][m/32]) and
// `norms` (word KP.norms, [tokens][ceil(H/2)] f16) of the key segment; table (ktab): the
// sketch S [m][D] f32. CPU twin: src/cpu/qjl/attend_k.rs.
//
// k_prepare (once per workgroup): the 4 scaled query vectors sketched, qp[i] = c·(S q)_i with
// c = √(π/2)/m folded in (invocation i sums row i in index order). k_score: lane cg owns
// sketch coordinates cg·CPL .. cg·CPL + CPL − 1 (CPL = m/8, a multiple of 4); per token its
// CPL sign bits are read in pieces of ≤ 32 bits (a piece may straddle two words), and ⟨c·S q, 2σ − 1⟩ = 2·Σ_{σ_i=1} qp_i − Σ qp_i
// is a masked sum over the word's bits (select, no per-bit branch) minus the lane's constant
// Σ qp_i; × n_j once per token. Specialized on ATT_KQJL_M and ATT_KQJL_C (the bits of c).

// Keep in sync with the default `Codec::attend_uniform` (the streams' first words).
struct KQjlParams {
    signs: u32,
    norms: u32,
    _p0: u32,
    _p1: u32,
}
@group(0) @binding(1) var<uniform> KP: KQjlParams;

const KQ_M: u32 = ATT_KQJL_M;
const KQ_SW: u32 = ATT_KQJL_M / 32u;          // words per sign row
const KQ_CPL: u32 = ATT_KQJL_M / 8u;          // coordinates per lane
const KQ_LW: u32 = (KQ_CPL + 31u) / 32u;      // a lane's 32-bit pieces per row
const KQ_PW: u32 = min(KQ_CPL, 32u);          // bits of a full piece

const K_PREP: bool = true;
const K_PREP_W: u32 = ATT_KQJL_M;

fn k_prepare(lid: u32, h: u32) {
    let c = bitcast<f32>(ATT_KQJL_C);
    for (var i = lid; i < KQ_M; i += WORKGROUP_SIZE) {
        let base = i * DIM;
        var a = vec4<f32>(0.0);
        for (var d = 0u; d < DIM; d++) {
            a += bitcast<f32>(ktab[base + d]) * qs[d];
        }
        qp[i] = a * c;
    }
}

fn k_score(row: u32, last: u32, cg: u32, h: u32) -> array<vec4<f32>, 8> {
    var acc: array<vec4<f32>, 8>;
    let e0 = cg * KQ_CPL;
    var all = vec4<f32>(0.0);
    // @unroll 64
    for (var i = 0u; i < KQ_CPL; i++) {
        all += qp[e0 + i];
    }
    let nwn = (A.hkv + 1u) / 2u;
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        let r = min(row + j, last);
        let n = unpack2x16float(kseg[KP.norms + r * nwn + (h >> 1u)])[h & 1u];
        let wb = KP.signs + (r * A.hkv + h) * KQ_SW;
        var pos = vec4<f32>(0.0);
        // @unroll 2
        for (var k = 0u; k < KQ_LW; k++) {
            // A lane's piece may straddle two words (CPL not a divisor of 32, e.g. m = 96:
            // CPL = 12, lane 2 owns bits 24..35) and the last piece may be short (m = 384:
            // CPL = 48 = 32 + 16): the high word fills the piece, bits past CPL are masked.
            let e = e0 + 32u * k;
            let off = e & 31u;
            let w = wb + (e >> 5u);
            var bits = kseg[w] >> off;
            if (off != 0u && off + min(KQ_CPL - 32u * k, 32u) > 32u) {
                bits |= kseg[w + 1u] << (32u - off);
            }
            // @unroll 32
            for (var i = 0u; i < KQ_PW; i++) {
                let on = ((bits >> i) & 1u) != 0u && 32u * k + i < KQ_CPL;
                pos += select(vec4<f32>(0.0), qp[e + i], on);
            }
        }
        acc[j] = n * (2.0 * pos - all);
    }
    return acc;
}
