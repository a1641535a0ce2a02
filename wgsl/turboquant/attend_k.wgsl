// Attention hooks of TurboQuant, key side (wgsl/attend/attend_core.wgsl; the contract:
// ../shared/spec/turboquant.md "Attention on TurboQuant codes"): streams `codes` (word KP.codes,
// [tokens][H][S][row_words]) and `norms` (word KP.norms, [tokens][ceil(H/2)] f16) of the key
// segment, layout src/codecs/turboquant/layout.rs; tables (ktab): signs, then codebooks.
// CPU twin: src/cpu/turboquant/attend_k.rs.
//
// k_prepare (once per workgroup): the stage centroids into workgroup memory; the 4 scaled
// query vectors rotated with the KV head's key signs, q′ = c·H_P·(s ⊙ q) (zero-padded from D to
// P; butterflies by pairs, a barrier per pass) into qp. k_score: a lane owns coordinates
// cg·CPL .. cg·CPL + CPL − 1 of the rotated space (CPL = P/8); per token its codes are one
// window of CPL·b bits, loaded once (whole words where CPL·b is a multiple of 32, else
// funnel-shifted from the row), every code then sits at a constant bit of the window: no
// per-element index math. score_j = n_j·Σ_c q′_c·ŷ_jc (RVQ: ŷ = ĉ₁ + ĉ₂): one workgroup-memory
// lookup and one multiply-add per code and 4 vectors, the norm applied once per token.
// Specialized on ATT_KTQ_P, ATT_KTQ_LOG2P, ATT_KTQ_BITS, ATT_KTQ_STAGES, ATT_KTQ_C (the bits
// of c = f32(1/√P)).

// Keep in sync with `TurboQuantCodec::attend_uniform` in src/codecs/turboquant/codec.rs (the
// words after these four hold the codebooks for the MSL twin).
struct KTqParams {
    codes: u32,
    norms: u32,
    _p0: u32,
    _p1: u32,
}
@group(0) @binding(1) var<uniform> KP: KTqParams;

const K_PREP: bool = true;
const K_PREP_W: u32 = 8u * KTQ_CPL;

// The pieces: tq_attend_k_common.wgsl (concatenated before this file).

fn k_prepare(lid: u32, h: u32) {
    ktq_prepare(lid, h);
}

fn k_score(row: u32, last: u32, cg: u32, h: u32) -> array<vec4<f32>, 8> {
    return ktq_score(row, last, cg, h, KP.codes, KP.norms);
}
