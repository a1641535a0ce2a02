// qjl_encode's declarations shared by its two WGSL variants (../shared/spec/qjl.md, "Stored
// per key" and "Kernels"): the uniform, the bindings, the staged tiles in workgroup memory and
// the register-tiled dot products. CPU twin: src/cpu/qjl/qjl_encode.rs; MSL twin:
// msl/qjl/qjl_encode.metal.
//
// The sketch products of many keys are a matrix product S·X ([m][D]·[D][tokens]), so the
// kernel is tiled like one: a workgroup of WORKGROUP_SIZE (128) invocations owns a tile of QT
// (32) tokens of one head pair: item = tile · ceil(H / 2) + pair; head 2·pair, then head
// 2·pair + 1 (absent for an odd H: zeros, nothing stored). Per head and per block of QRB =
// 32·QRI rows (QRI = min(4, m / 32)): the chunks of QDC (16) channels of S (transposed,
// padded against bank conflicts) and of the tile's keys (f16 → f32, zeros past D and past the
// dispatch's tokens) are staged in workgroup memory; invocation lid = 32·tg + rg holds the
// products of rows rg + 32·i (i < QRI) with tokens QTL·tg + j (j < QTL = 8) in registers, each
// summed over d in index order (the reference's order). Row rg + 32·i of the block is bit rg of
// the block's sign word i: the variants OR the bits into the tile's words in workgroup memory
// (subgroup variant: one subgroupBallot per (i, j), any width 8..128; workgroup variant: one
// atomicOr per set bit), then the words of rows < m are stored (rows of the last block past m
// read row m − 1 and are never stored). The tile's first QT invocations sum their token's
// squares while the first block is staged (index order) and store the pair's f16 norms as one
// word (pack2x16float: the spec allows 1 ulp).
// Specialized on QJL_DIM (D) and QJL_M (m, a multiple of 32).
//
// S is read once per tile and head instead of once per key: 32× fewer sketch reads, and the
// products run at 32 FMAs per 6 workgroup loads (4 of S, 2 vec4 of keys).
//
// Bindings: 0 P; 1 ring [ring_tokens][in_row_words]; 2 incoming [n][in_row_words];
// 3 signs [tokens][H][m/32] (segment); 4 norms [tokens][ceil(H/2)] (segment);
// 5 tables: Sᵀ [D][m] f32 bits (src/cpu/common/sketch.rs gpu_sketch_table).

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
const QT: u32 = 32u; // tokens per tile
const QTL: u32 = 8u; // tokens per invocation: QT / (WORKGROUP_SIZE / 32)
const QRI: u32 = min(4u, QSW); // rows per invocation per block = sign words per block
const QRB: u32 = 32u * QRI; // rows per block
const QNB: u32 = (QM + QRB - 1u) / QRB; // row blocks
const QDC: u32 = 16u; // channels per staged chunk
const QNC: u32 = (QD + QDC - 1u) / QDC; // chunks
const QSP: u32 = QRB + 1u; // padded row stride of the staged sketch chunk
const QACC: u32 = QRI * QTL; // products per invocation

var<workgroup> qs: array<f32, QDC * QSP>; // sketch chunk, [dc][row of the block]
var<workgroup> qx: array<vec4<f32>, QDC * QT / 4u>; // key chunk, [dc][token of the tile]
var<workgroup> qw: array<atomic<u32>, QT * QRI>; // the block's sign words, [token][i]

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

// Channels [c·QDC, c·QDC + QDC) of block rb's sketch rows into qs (zeros past D; rows past m
// read row m − 1), and of head h's keys of the tile's tokens from t0 into qx.
fn qjl_stage(t0: u32, h: u32, live: bool, rb: u32, c: u32, lid: u32) {
    for (var e = lid; e < QRB * QDC; e += WORKGROUP_SIZE) {
        // Consecutive invocations: consecutive sketch rows of one channel (Sᵀ: one load).
        let r = e % QRB;
        let d = c * QDC + e / QRB;
        let row = min(rb * QRB + r, QM - 1u); // @qjl-row
        var v = 0.0;
        if (d < QD) {
            v = bitcast<f32>(tables[d * QM + row]);
        }
        qs[(e / QRB) * QSP + r] = v;
    }
    for (var e = lid; e < QT * QDC; e += WORKGROUP_SIZE) {
        let t = e / QDC;
        let d = c * QDC + e % QDC;
        var v = 0.0;
        if (live && d < QD && t0 + t < P.count) {
            v = qjl_input(P.src_start + t0 + t, h * QD + d);
        }
        let k = (e % QDC) * QT + t;
        qx[k >> 2u][k & 3u] = v;
    }
}

// Block rb of head h: acc[i·QTL + j] = (S x)_r for row r = rb·QRB + rg + 32·i and tile token
// QTL·tg + j, summed over d in index order. In the first block the tile's first QT
// invocations add their token's squares to *ss (index order). Starts with a barrier.
fn qjl_block(t0: u32, h: u32, live: bool, rb: u32, lid: u32, ss: ptr<function, f32>) -> array<f32, QACC> {
    let rg = lid % 32u;
    let tg = lid / 32u;
    var acc: array<f32, QACC>;
    for (var c = 0u; c < QNC; c++) {
        workgroupBarrier(); // the previous chunk (or block's words) is read
        qjl_stage(t0, h, live, rb, c, lid);
        workgroupBarrier();
        // @unroll 16
        for (var dc = 0u; dc < QDC; dc++) {
            let xa = qx[(dc * QT + tg * QTL) >> 2u]; // tokens QTL·tg .. QTL·tg + 7
            let xb = qx[((dc * QT + tg * QTL) >> 2u) + 1u];
            let xs = array<f32, QTL>(xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w);
            // @unroll 4
            for (var i = 0u; i < QRI; i++) {
                let s = qs[dc * QSP + rg + 32u * i];
                // @unroll 8
                for (var j = 0u; j < QTL; j++) {
                    acc[i * QTL + j] += s * xs[j];
                }
            }
        }
        if (rb == 0u && lid < QT) {
            for (var dc = 0u; dc < QDC; dc++) {
                let k = dc * QT + lid;
                let v = qx[k >> 2u][k & 3u];
                *ss += v * v;
            }
        }
    }
    return acc;
}

// Clears the block's sign words (between barriers: before qjl_block, after the last store).
fn qjl_clear(lid: u32) {
    for (var e = lid; e < QT * QRI; e += WORKGROUP_SIZE) {
        atomicStore(&qw[e], 0u);
    }
}

// Stores block rb's sign words of head h (after a barrier): only rows < m, tokens of the
// dispatch and a present head.
fn qjl_store(t0: u32, h: u32, live: bool, rb: u32, lid: u32) {
    for (var e = lid; e < QT * QRI; e += WORKGROUP_SIZE) {
        let t = e / QRI;
        let w = rb * QRI + e % QRI;
        let x = atomicLoad(&qw[e]);
        if (live && w < QSW && t0 + t < P.count) { // @qjl-tail
            signs[((P.seg_token + t0 + t) * P.heads + h) * QSW + w] = x;
        }
    }
}

// The pair's norms of tile token lid (< QT) as one word.
fn qjl_store_norms(t0: u32, pair: u32, nn: vec2<f32>, lid: u32) {
    if (lid < QT && t0 + lid < P.count) {
        norms[(P.seg_token + t0 + lid) * P.norm_words + pair] = pack2x16float(nn);
    }
}
