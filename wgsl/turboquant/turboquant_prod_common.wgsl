// turboquant_prod_quant's steps shared by its two WGSL variants (../shared/spec/turboquant.md
// "TurboQuant-Prod"). CPU twin: quantize_prod_vector in src/cpu/turboquant/turboquant_quant.rs;
// MSL twin: msl/turboquant/turboquant_prod_quant.metal.
//
// Dispatch: one workgroup of WORKGROUP_SIZE (64) per item = group · ceil(H / 2) + pair, a group
// being PQ_TT consecutive tokens (tokens past the dispatch's count: nothing read or stored):
// per token, head 2·pair, then head 2·pair + 1 (absent for an odd H: zeros, nothing stored).
// Steps 1–3 run per vector (2·PQ_TT of them, one after the other) in workgroup memory
// (tq_shared_vector.wgsl, specialized with TQ_BITS = b − 1 and TQ_STAGES = 1), each residual
// kept in pq_r; step 4 then runs once for all of them, so that each sketch word read serves
// 2·PQ_TT vectors:
//   1. x loaded, n by invocation 0 in index order; u = x / n, kept in pq_u; signs, butterflies,
//      × c, the stage-1 codes (exactly TurboQuant-MSE's steps), stored as one packed row;
//   2. ŷ₁ = the centroids of the codes, butterflies, then × c, × s_i: û₁ = inverse-rotate(ŷ₁)
//      in the CPU reference's order; r = u − û₁ (P values) into tq_x;
//   3. ρ = ‖r‖ by invocation 0 in index order;
//   4. pass it of ceil(m / 64): invocation lid owns sketch row j = 64·it + lid and sums
//      S[j][i]·r_i over i < P in index order for every vector (a row past m reads row m − 1
//      and sets no bit); σ_j = [(S r)_j ≥ 0] ORed into vector v's sign row (the rows of the
//      2·PQ_TT vectors are consecutive in wgsl/common/sign_words.wgsl's row: v's row j at bit
//      v·m + j) by subgroupBallot or atomicOr;
//   5. the sign words stored; invocation 0 writes each token's pair of f16 n and of ρ as one
//      word each.
// Specialization: TQ_P, TQ_LOG2P, TQ_BITS (b − 1), TQ_STAGES (1), PQ_M (m, a multiple of 32),
// PQ_TT (tokens per workgroup: src/codecs/turboquant/plans.rs prod_tokens_per_workgroup).

const PQ_SW: u32 = PQ_M / 32u;
const PQ_IT: u32 = (PQ_M + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE; // passes over the rows
const PQ_TT: u32 = PQ_TOKENS_PER_WG;
const PQ_SL: u32 = 2u * PQ_TT; // vectors per workgroup
const SGN_SW: u32 = PQ_SL * PQ_SW; // their sign rows, one after the other

var<workgroup> pq_u: array<f32, TP>;
var<workgroup> pq_r: array<f32, PQ_SL * TP>; // [vector][P] residuals

// Steps 1–3 for head h of absolute token s; the stage-1 row stored at word `row0` of codes.
// Leaves r in tq_x (after a barrier); returns (n, ρ).
fn pq_residual(s: u32, h: u32, hs: u32, live: bool, row0: u32, lid: u32) -> vec2<f32> {
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

// The workgroup's token t (of PQ_TT) of item group g: (token of the dispatch clamped below its
// count, whether it is one).
fn pq_token(g: u32, t: u32) -> vec2<u32> {
    let tok = g * PQ_TT + t;
    return vec2<u32>(min(tok, P.count - 1u), u32(tok < P.count));
}

// The codebook loaded and the sign rows cleared, then steps 1–3 of every vector of the
// workgroup (group g, head pair `pair`), each residual into pq_r (barriers follow each);
// returns per token (n, ρ) of both heads as (n₀, n₁, ρ₀, ρ₁) (ρ 0 for an absent head).
fn pq_residuals(g: u32, pair: u32, lid: u32) -> array<vec4<f32>, PQ_TT> {
    tq_load_codebook(lid);
    sgn_clear(lid);
    var nr: array<vec4<f32>, PQ_TT>;
    for (var t = 0u; t < PQ_TT; t++) {
        let tk = pq_token(g, t);
        let row = P.seg_token + tk.x;
        for (var v = 0u; v < 2u; v++) {
            let h = 2u * pair + v;
            let live = h < P.heads && tk.y == 1u;
            let hs = min(h, P.heads - 1u);
            let x = pq_residual(P.src_start + tk.x, h, hs, live, (row * P.heads + hs) * TRW, lid);
            // @unroll 16
            for (var k = 0u; k < WPL; k++) {
                let e = lid + k * WORKGROUP_SIZE;
                if (e < TP) {
                    pq_r[(2u * t + v) * TP + e] = tq_x[e];
                }
            }
            nr[t][v] = x.x;
            nr[t][2u + v] = select(0.0, x.y, live); // an absent head's ρ stays 0
            workgroupBarrier(); // the next vector reuses tq_x, tq_c and pq_u
        }
    }
    return nr;
}

// (S r_v)_j for every vector v of the workgroup (residuals in pq_r), each summed in index
// order: one sketch word per i for all of them.
fn pq_row_dots(j: u32) -> array<f32, PQ_SL> {
    // Sᵀ [P][m] (gpu_sketch_table): consecutive j, consecutive words.
    let base = P.cb_offset + 2u * TN + min(j, PQ_M - 1u);
    var a: array<f32, PQ_SL>;
    for (var i = 0u; i < TP; i++) {
        let s = bitcast<f32>(tables[base + i * PQ_M]);
        // @unroll 8
        for (var v = 0u; v < PQ_SL; v++) {
            a[v] += s * pq_r[v * TP + i];
        }
    }
    return a;
}

// Step 5 (after a barrier): every vector's sign words, and per token the pair's n and ρ.
fn pq_store(g: u32, pair: u32, nr: array<vec4<f32>, PQ_TT>, lid: u32) {
    for (var w = lid; w < SGN_SW; w += WORKGROUP_SIZE) {
        let vec = w / PQ_SW;
        let tk = pq_token(g, vec / 2u);
        let h = 2u * pair + vec % 2u;
        if (h < P.heads && tk.y == 1u) {
            signs[((P.seg_token + tk.x) * P.heads + h) * PQ_SW + w % PQ_SW] = sgn_word(w);
        }
    }
    if (lid == 0u) {
        for (var t = 0u; t < PQ_TT; t++) {
            let tk = pq_token(g, t);
            if (tk.y == 1u) {
                let at = (P.seg_token + tk.x) * P.norm_words + pair;
                norms[at] = tq_f16_bits(nr[t].x) | (tq_f16_bits(nr[t].y) << 16u);
                rhos[at] = tq_f16_bits(nr[t].z) | (tq_f16_bits(nr[t].w) << 16u);
            }
        }
    }
}
