// evict_score: the eviction score of every appended (token, KV head) (../shared/spec/qfilters.md,
// "Scoring and eviction"), on the key as appended (its f16 row): Q-Filters ⟨k, u_h⟩
// (SCORE_NORM = 0) or key norm −‖k‖ (SCORE_NORM = 1); StreamingLLM scores nothing. CPU
// reference: src/cpu/policy/evict_score.rs. Shared by the subgroup (evict_score_subgroup.wgsl)
// and workgroup-memory (evict_score.wgsl) variants, which differ only in the final sum.
//
// @binding(0) P:       ScoreParams (uniform)                    keep in sync with src/policy/kernels.rs
// @binding(1) rows:    array<u32> [row0 + n][row_words]         f16 pairs, element e of a row
//                                                              in half e & 1 of word e >> 1
// @binding(2) filters: array<f32> [H][D]                        (SCORE_NORM = 1: one unused word)
// @binding(3) scores:  array<f32> [n][H]                        output
//
// Dispatch: one workgroup per (token, head) v = t·H + h, split over (x, y); lane i sums
// channels i, i + WORKGROUP_SIZE, ... in order, then the lanes' sums are added (f32: the order
// differs from the CPU's channel order, within the spec's f32 summation bound).

struct ScoreParams {
    n: u32,         // tokens
    heads: u32,     // KV heads H
    dim: u32,       // head width D
    row_words: u32, // u32 words of one f16 row (H·D / 2, rounded up)
    row0: u32,      // row of token 0 in `rows`
    _p0: u32,
    _p1: u32,
    _p2: u32,
}

@group(0) @binding(0) var<uniform> P: ScoreParams;
@group(0) @binding(1) var<storage, read> rows: array<u32>;
@group(0) @binding(2) var<storage, read> filters: array<f32>;
@group(0) @binding(3) var<storage, read_write> scores: array<f32>;

// This lane's part of the score's sum for token t, head h.
fn score_part(t: u32, h: u32, lid: u32) -> f32 {
    var a = 0.0;
    for (var c = lid; c < P.dim; c += WORKGROUP_SIZE) {
        let e = h * P.dim + c;
        let k = unpack2x16float(rows[(P.row0 + t) * P.row_words + (e >> 1u)])[e & 1u];
        if (SCORE_NORM == 1u) {
            a += k * k;
        } else {
            a += k * filters[e];
        }
    }
    return a;
}

// The score from the whole sum.
fn score_finish(s: f32) -> f32 {
    if (SCORE_NORM == 1u) {
        return -sqrt(s);
    }
    return s;
}
