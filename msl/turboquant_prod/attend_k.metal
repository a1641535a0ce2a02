// Attention hooks of TurboQuant-Prod keys (msl/attend/attend_core.metal). Twin of
// wgsl/turboquant_prod/attend_k.wgsl (read it: TurboQuant's rotated query and QJL's S q, the
// MSE score plus n·ρ·⟨c·S q, 2σ − 1⟩); the pieces: msl/turboquant/tq_attend_k_common.metal and
// msl/qjl/qjl_attend_k_common.metal. The stage-1 centroids are read from this side's constant
// buffer (KP.cb). CPU twin: prepare_prod_query / score_prod in src/cpu/turboquant/attend_k.rs.

// Keep in sync with `ProdCodec::attend_uniform` in src/codecs/turboquant/prod.rs.
struct KProdParams {
    uint codes;
    uint signs;
    uint norms;
    uint rhos;
    float cb[KTQ_N]; // stage-1 centroids
};
typedef KProdParams KParams;
#define KPR_SQ (8u * KTQ_CPL)
#define K_PREP true
#define K_PREP_W (KPR_SQ + KQ_PREP_W)

template <typename Sh>
static inline void k_prepare(constant AttendParams& A, constant KParams& KP, device const uint* kseg,
                             device const uint* ktab, threadgroup Sh& S, uint lid, uint h) {
    ktq_prepare(ktab, S, lid, h);
    kqjl_prepare(ktab, S, lid, A.hkv * KTQ_SW + 2u * KTQ_N, KPR_SQ);
}

template <typename Sh>
static inline void k_score(constant AttendParams& A, constant KParams& KP, device const uint* kseg,
                           threadgroup const Sh& S, uint row, uint last, uint cg, uint h, thread float4* acc) {
    ktq_score(A, kseg, S, KP.cb, KP.codes, KP.norms, row, last, cg, h, acc);
    float4 cor[8];
    kqjl_signed(A, kseg, S, KP.signs, KPR_SQ, row, last, cg, h, cor);
    const uint nwn = (A.hkv + 1u) / 2u;
    for (uint j = 0u; j < 8u; ++j) {
        const uint r = min(row + j, last);
        const float n = tq_norm_of(kseg[KP.norms + r * nwn + (h >> 1u)], h);
        const float rho = tq_norm_of(kseg[KP.rhos + r * nwn + (h >> 1u)], h);
        acc[j] += (n * rho) * cor[j]; // @prod-correction
    }
}
