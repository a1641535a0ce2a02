// turboquant_prod_quant's steps shared by its two WGSL variants (../shared/spec/turboquant.md
// "TurboQuant-Prod"). CPU twin: quantize_prod_vector in src/cpu/turboquant/turboquant_quant.rs;
// MSL twin: msl/turboquant/turboquant_prod_quant.metal.
//
// Dispatch: one workgroup of WORKGROUP_SIZE (64) per item = token · ceil(H / 2) + pair: head
// 2·pair, then head 2·pair + 1 (absent for an odd H: zeros, nothing stored). Per head, the
// vector in workgroup memory (tq_shared_vector.wgsl, specialized with TQ_BITS = b − 1 and
// TQ_STAGES = 1):
//   1. x loaded, n by invocation 0 in index order; u = x / n, kept in pq_u; signs, butterflies,
//      × c, the stage-1 codes (exactly TurboQuant-MSE's steps), stored as one packed row;
//   2. ŷ₁ = the centroids of the codes, butterflies, then × c, × s_i: û₁ = inverse-rotate(ŷ₁)
//      in the CPU reference's order; r = u − û₁ (P values) into tq_x;
//   3. ρ = ‖r‖ by invocation 0 in index order;
//   4. pass it of ceil(m / 64): invocation lid owns sketch row j = 64·it + lid and sums
//      S[j][i]·r_i over i < P in index order (a row past m reads row m − 1 and sets no bit);
//      σ_j = [(S r)_j ≥ 0] ORed into the sign row (wgsl/common/sign_words.wgsl) by the variant's
//      pq_signs (subgroupBallot or atomicOr);
//   5. the m/32 sign words stored; invocation 0 writes the pair's f16 n and ρ as one word each.
// Specialization: TQ_P, TQ_LOG2P, TQ_BITS (b − 1), TQ_STAGES (1), PQ_M (m, a multiple of 32).

const PQ_SW: u32 = PQ_M / 32u;
const PQ_IT: u32 = (PQ_M + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE; // passes over the rows
const SGN_SW: u32 = PQ_SW;

var<workgroup> pq_u: array<f32, TP>;

// Steps 1–3 for head h of absolute token s; the stage-1 row stored at word `row0` of codes.
// Leaves r in tq_x (after a barrier), the sign row cleared; returns (n, ρ).
fn pq_residual(s: u32, h: u32, hs: u32, live: bool, row0: u32, lid: u32) -> vec2<f32> {
    sgn_clear(lid);
    let n = tq_load_norm_shared(s, h, live, lid);
    tq_normalize_shared(n, lid);
    // @unroll 16
    for (var k = 0u; k < WPL; k++) {
        let e = lid + k * WORKGROUP_SIZE;
        if (e < TP) {
            pq_u[e] = tq_x[e]; // u (each invocation its own coordinates)
        }
    }
    tq_signs_shared(hs, lid);
    workgroupBarrier();
    tq_butterflies_shared(lid);
    tq_codes_shared(lid);
    tq_store_rows_shared(row0, live, lid);
    // @unroll 16
    for (var k = 0u; k < WPL; k++) {
        let e = lid + k * WORKGROUP_SIZE;
        if (e < TP) {
            tq_x[e] = tq_centroid(tq_c[e], 0u);
        }
    }
    workgroupBarrier();
    tq_butterflies_shared(lid);
    // @unroll 16
    for (var k = 0u; k < WPL; k++) {
        let e = lid + k * WORKGROUP_SIZE;
        if (e < TP) {
            tq_x[e] = pq_u[e] - tq_flip(tq_x[e] * P.inv_sqrt_p, hs, e); // @pq-residual
        }
    }
    let rho = tq_norm_shared(TP, lid);
    return vec2<f32>(n, rho);
}

// (S r)_j: sketch row j with r in tq_x, summed in index order.
fn pq_row_dot(j: u32) -> f32 {
    // Sᵀ [P][m] (gpu_sketch_table): consecutive j, consecutive words.
    let base = P.cb_offset + 2u * TN + min(j, PQ_M - 1u);
    var a = 0.0;
    for (var i = 0u; i < TP; i++) {
        a += bitcast<f32>(tables[base + i * PQ_M]) * tq_x[i];
    }
    return a;
}

// Step 5's sign words of head h of (segment) token row `row` (after a barrier).
fn pq_store_signs(row: u32, h: u32, live: bool, lid: u32) {
    for (var w = lid; w < PQ_SW; w += WORKGROUP_SIZE) {
        let x = sgn_word(w);
        if (live) {
            signs[(row * P.heads + h) * PQ_SW + w] = x;
        }
    }
}
