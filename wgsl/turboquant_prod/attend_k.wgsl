// Attention hooks of TurboQuant-Prod keys (wgsl/attend/attend_core.wgsl; the contract:
// ../shared/spec/turboquant.md "Attention on TurboQuant codes", Prod): streams `codes` (word
// KP.codes, [tokens][H][row_words] of b − 1 bits), `signs` ([tokens][H][m/32]), `norms` and
// `rhos` ([tokens][ceil(H/2)] f16) of the key segment, layout src/codecs/turboquant/prod.rs;
// tables (ktab): the key signs [H][ceil(P/32)], the stage-1 codebook [2][2^(b−1)], Sᵀ [P][m] f32 (gpu_sketch_table).
// CPU twin: prepare_prod_query / score_prod in src/cpu/turboquant/attend_k.rs.
//
// k_prepare: TurboQuant's rotated query q′ into qp[0 .. 8·CPL) (wgsl/turboquant/
// tq_attend_k_common.wgsl), then QJL's c·S q (q zero-padded from D to P) into qp[8·CPL ..)
// (wgsl/qjl/qjl_attend_k_common.wgsl), once per workgroup. k_score: the lane's part of the MSE
// score n_j·⟨q′, ŷ_j⟩ plus n_j·ρ_j·⟨c·S q, 2σ_j − 1⟩ over its eighth of the sketch rows.
// Specialized on ATT_KTQ_* (stage 1) and ATT_KQJL_M, ATT_KQJL_C (c = √(π/2)/m).

// Keep in sync with the default `Codec::attend_uniform` (the four streams' first words).
struct KProdParams {
    codes: u32,
    signs: u32,
    norms: u32,
    rhos: u32,
}
@group(0) @binding(1) var<uniform> KP: KProdParams;

const KPR_SQ: u32 = 8u * KTQ_CPL; // where S q starts in qp

const K_PREP: bool = true;
const K_PREP_W: u32 = KPR_SQ + KQ_PREP_W;

fn k_prepare(lid: u32, h: u32) {
    ktq_prepare(lid, h);
    kqjl_prepare(lid, AP.hkv * KTQ_SW + 2u * KTQ_N, KPR_SQ);
}

fn k_score(row: u32, last: u32, cg: u32, h: u32) -> array<vec4<f32>, 8> {
    var acc = ktq_score(row, last, cg, h, KP.codes, KP.norms);
    let cor = kqjl_signed(row, last, cg, h, KP.signs, KPR_SQ);
    let nwn = (AP.hkv + 1u) / 2u;
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        let r = min(row + j, last);
        let n = unpack2x16float(kseg[KP.norms + r * nwn + (h >> 1u)])[h & 1u];
        let rho = unpack2x16float(kseg[KP.rhos + r * nwn + (h >> 1u)])[h & 1u];
        acc[j] += (n * rho) * cor[j]; // @prod-correction
    }
    return acc;
}
