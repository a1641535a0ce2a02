// Attention hooks of QJL keys (wgsl/attend/attend_core.wgsl; the contract:
// ../shared/spec/qjl.md "Kernels"): streams `signs` (word KP.signs, [tokens][H][m/32]) and
// `norms` (word KP.norms, [tokens][ceil(H/2)] f16) of the key segment; table (ktab): the
// sketch as Sᵀ [D][m] f32 (gpu_sketch_table). CPU twin: src/cpu/qjl/attend_k.rs.
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

const K_PREP: bool = true;
const K_PREP_W: u32 = KQ_PREP_W;

// The pieces: qjl_attend_k_common.wgsl (concatenated before this file).

fn k_prepare(lid: u32, h: u32) {
    kqjl_prepare(lid, 0u, 0u);
}

fn k_score(row: u32, last: u32, cg: u32, h: u32) -> array<vec4<f32>, 8> {
    var acc = kqjl_signed(row, last, cg, h, KP.signs, 0u);
    let nwn = (AP.hkv + 1u) / 2u;
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        let r = min(row + j, last);
        acc[j] *= unpack2x16float(kseg[KP.norms + r * nwn + (h >> 1u)])[h & 1u];
    }
    return acc;
}
