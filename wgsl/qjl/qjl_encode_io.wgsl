// qjl_encode's declarations shared by its two WGSL variants (../shared/spec/qjl.md, "Stored
// per key" and "Kernels"): the uniform, the bindings, the key in workgroup memory (its sign
// words: wgsl/common/sign_words.wgsl), the input reader, the sketch rows' dot products and the stores. CPU twin:
// src/cpu/qjl/qjl_encode.rs; MSL twin: msl/qjl/qjl_encode.metal.
//
// Dispatch: one workgroup of WORKGROUP_SIZE (64) per item = token · ceil(H / 2) + pair: head
// 2·pair, then head 2·pair + 1 (absent for an odd H: zeros, nothing stored). Per head:
//   1. the key (f16 → f32) into qx, the sign words (sgn_w) cleared;
//   2. n = √(Σ x²) by a reduction (the variants' qjl_sum);
//   3. pass it of ceil(m / 64): invocation lid owns sketch row r = 64·it + lid and sums
//      S[r][d]·x[d] in index order (the reference's order; a row past m reads row m − 1 and
//      sets no bit); the bits σ_r = [(S x)_r ≥ 0] of the pass are ORed into sgn_w (subgroup
//      variant: one subgroupBallot per subgroup, its lanes' bits in lane order; workgroup
//      variant: one atomicOr per set bit);
//   4. the m / 32 words stored: whole words, every bit a row's (no bit past m is set).
// Lane 0 writes the pair's f16 norms as one word (pack2x16float: the spec allows 1 ulp).
// Specialized on QJL_DIM (D) and QJL_M (m, a multiple of 32).
//
// Bindings: 0 P; 1 ring [ring_tokens][in_row_words]; 2 incoming [n][in_row_words];
// 3 signs [tokens][H][m/32] (segment); 4 norms [tokens][ceil(H/2)] (segment);
// 5 tables: S [m][D] f32 bits.

// Keep in sync with QjlParams in src/codecs/qjl/plans.rs and msl/qjl/qjl_encode.metal.
struct QjlParams {
    heads: u32,
    dim: u32,
    count: u32,
    src_start: u32,
    t_old: u32,
    inc_start: u32,
    ring_tokens: u32,
    seg_token: u32,
    in_row_words: u32,
    sign_words: u32,
    norm_words: u32,
    items: u32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
    _p3: u32,
}

@group(0) @binding(0) var<uniform> P: QjlParams;
@group(0) @binding(1) var<storage, read> ring: array<u32>;
@group(0) @binding(2) var<storage, read> incoming: array<u32>;
@group(0) @binding(3) var<storage, read_write> signs: array<u32>;
@group(0) @binding(4) var<storage, read_write> norms: array<u32>;
@group(0) @binding(5) var<storage, read> tables: array<u32>;

const QD: u32 = QJL_DIM;
const QM: u32 = QJL_M;
const QSW: u32 = QJL_M / 32u;
const QIT: u32 = (QJL_M + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE; // passes over the rows

const SGN_SW: u32 = QSW; // the sign row (wgsl/common/sign_words.wgsl)

var<workgroup> qx: array<f32, QJL_DIM>;

// Element e of absolute token s's f16 row (the ring or the incoming rows).
fn qjl_input(s: u32, e: u32) -> f32 {
    var w: u32;
    if (s < P.t_old) {
        w = ring[(s % P.ring_tokens) * P.in_row_words + (e >> 1u)];
    } else {
        w = incoming[(s - P.inc_start) * P.in_row_words + (e >> 1u)];
    }
    return unpack2x16float(w)[e & 1u];
}

// Head h's key of token s into qx (zeros for an absent head); the sign words cleared.
fn qjl_load(s: u32, h: u32, live: bool, lid: u32) {
    for (var d = lid; d < QD; d += WORKGROUP_SIZE) {
        var x = 0.0;
        if (live) {
            x = qjl_input(s, h * QD + d);
        }
        qx[d] = x;
    }
    sgn_clear(lid);
}

// (S x)_r: sketch row r with the key in qx, summed in index order.
fn qjl_row_dot(r: u32) -> f32 {
    let base = min(r, QM - 1u) * QD; // @qjl-row
    var a = 0.0;
    for (var d = 0u; d < QD; d++) {
        a += bitcast<f32>(tables[base + d]) * qx[d];
    }
    return a;
}

// The sign words of (segment) token row `row` of head h (after a barrier).
fn qjl_store(row: u32, h: u32, live: bool, lid: u32) {
    for (var w = lid; w < QSW; w += WORKGROUP_SIZE) {
        let x = sgn_word(w);
        if (live) {
            signs[(row * P.heads + h) * QSW + w] = x;
        }
    }
}
