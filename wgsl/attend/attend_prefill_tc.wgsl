enable f16;
enable wgpu_cooperative_matrix;
diagnostic(off, derivative_uniformity);
// attend_prefill_tc: the prefill kernel's GEMM form on cooperative matrices (tensor cores:
// wgpu's EXPERIMENTAL_COOPERATIVE_MATRIX, 16×16×16 f16 operands with an f32 accumulator, the
// only configuration this kernel uses; the host builds it only where the adapter lists it and
// every subgroup is 32 wide). Composed like attend_prefill.wgsl: after the core
// (wgsl/attend/attend_core.wgsl: bindings, uniform, `visible`, PW), the codecs' hooks, of
// which it uses only the element and four-element readers (see attend_prefill.wgsl), and the
// prefill kernels' tile staging (wgsl/attend/attend_stage.wgsl).
//
// **Mapping.** A workgroup of 4 subgroups × 32 serves one KV head h, TC_QB = 64 query vectors
// and one split (dispatch index ((h · splits) + split) · vblocks + vb, as the other kernels).
// Subgroup sg owns vectors vb·64 + 16·sg .. + 15: their scaled queries as B-matrices Qᵀ (f16,
// loaded once) and their output as TC_NO C-matrices (f32) live in its registers. Per tile of
// TC_TT tokens (32; 16 where D > 128, for workgroup storage) every invocation decodes its share
// of the tile's keys and values (pf_tile: on whole tiles the codec's eight elements per read
// where it offers them, else four tokens of a channel or four channels of a token at a time;
// the ring's f16 rows one by one; rows past the split read its
// last row, channels past D or the width repeat its last: masked, met by a zero query, or
// never written) into workgroup memory as f16 (a codec's stored f16 rows loaded a tile
// ahead, right after the tile before was staged: PF_PRE_K, PF_PRE_V); then
//   Sᵀ (TC_TT × 16, per subgroup) = K̂·Qᵀ    3 × TC_KD MMAs per 16 tokens (2 × TC_KD where
//                                            K_F16_EXACT), stored column-major as S (f32):
//     the queries, held through the whole loop, are the B operands and the keys, loaded
//     fresh from workgroup memory, the A operands (with the queries as A, NVIDIA's driver
//     copied every A-matrix's 4 registers into MMA order again before each product: 8 moves
//     a product, ~380 of the ~850 instructions of a KIVI tile's score step on the H100)
//   softmax: lane pair (sl, sl ^ 1) owns a vector, TC_TT / 2 tokens each: masks, the tile's
//     max; weights p = 2^(s − m) against a reference max m that moves only when the tile's
//     max exceeds it by more than TC_TAU (then the vector's output is rescaled: rare, and
//     done for the whole workgroup when any vector needs it, through workgroup memory, since a
//     C-matrix has no element access); p ≤ 2^TC_TAU stays in f16 range
//   O += P·V̂                                 2 × TC_NO MMAs per 16 tokens.
// **Precision.** Scores are q_hi·k_hi + 2^-11·(q_lo·k_hi + q_hi·k_lo) (q_hi·k_lo left out where
// the key codec's values are exact in f16, K_F16_EXACT: then k_lo is 0) (tc_split: x_hi is x
// with its mantissa cut to f16's 10 bits, x_lo = 2^11·(x − x_hi) in f16, scaled so that it is
// no f16 subnormal; cut with bit operations, since the H200's compiler folded f32(f16(x)) back
// to x and left every remainder 0; two accumulators, so two independent MMA chains), and the
// weights enter as P_hi·V̂ + P_lo·V̂, both into the output's accumulator (tc_split_w: p_lo =
// p − p_hi unscaled, so that no scaling step sits between the two products; a remainder below
// 2^-14 is an f16 subnormal, absolute error ≤ 2^-25 against weights that sum to at least 1):
// the rounding of q·scale·log2(e), k̂ and p to f16 no longer shows (one f16 product each was
// off by 2.0e-3 per row on SmolLM2's layer 5, above the bound). Only v̂ is rounded to f16
// (exact for f16 rows and the ring): spec/attention.md's f16-product bound (1e-3 relative L2
// per row).
//
// Workgroup memory is four arrays, each a whole number of 16-byte units, so that every
// region a cooperative matrix is loaded from or stored to starts 32-byte aligned whatever
// order the driver lays the arrays out in (a 4-byte atomic declared on its own shifted the
// matrices' view of the arrays against the plain accesses' on the H200):
//   tch (f16): [K̂_hi: TC_DP rows of TC_KS (TC_TT tokens), channel-major][K̂_lo: likewise]
//              [V̂: TC_TT rows of TC_VS (TC_WP channels)]
//              [P_hi: TC_QB rows of TC_KS (TC_TT tokens)][P_lo: likewise]
//              (before the tile loop its first TC_OP elements stage the queries, in
//              TC_QH slices of TC_QS channels, rows TC_QSP apart)
//   Every f16 row is 8 elements longer than its content (TC_PAD, unless ATT_TC_PAD is off:
//   measuring only), so that the 8 rows of a matrix's 8×8 quarter start on 8 different
//   16-byte bank groups instead of 2 or 1; row strides stay multiples of 16 bytes.
//   tcs (f32): [S: TC_QB × TC_TT (then staging of O and of rescales)][factors: TC_QB]
//   tcflag: a rescale flag (atomic, padded to 16 bytes).
//   tcqrow (u32): the q offsets of the workgroup's TC_QB vectors' rows (the prologue only).
// The record (m, l, o) of every (vector, split) goes to the partials (always: the merge
// kernel finishes). Workgroup storage: 2·(TC_OPL + TC_QB·TC_KS) + 4·(TC_QB·TC_TT + 2·TC_QB) + 16
// bytes (plan::tensor_workgroup_bytes).

// kvpack: array indices in bounds by construction
// (src/gpu/checks.rs: every index into tch, tcs, tcflag, tcqrow and the function arrays is a
// constant or made of the local invocation index, loop counters and constants, below the
// array's constant length; on a device whose driver bounds-checks storage buffers the kernel
// is built without naga's clamps, which cost it ~20 % at 32k on an H200. The emulated form
// (src/gpu/coop_emulation.rs) strips comments, this line with them, and keeps the clamps.)

// (TcA, TcB, TcC and tc_split: wgsl/attend/attend_tc_common.wgsl)

const TC_QB: u32 = 64u;
const TC_DP: u32 = (DIM + 15u) / 16u * 16u;
const TC_W: u32 = max(V_W, DIM);
const TC_WP: u32 = (TC_W + 15u) / 16u * 16u;
const TC_TT: u32 = select(32u, 16u, TC_DP > 128u);
const TC_TB: u32 = TC_TT / 16u;   // token blocks of a tile
const TC_LT: u32 = TC_TT / 2u;    // tokens of a lane in the softmax
const TC_KD: u32 = TC_DP / 16u;
const TC_NO: u32 = TC_WP / 16u;
const TC_TAU: f32 = 8.0;
// The scale of the low parts (2^11) and its inverse.
const TC_ILO: f32 = 1.0 / 2048.0;
// Measuring only (KVPACK_TC_NOLOAD, src/attention/gpu.rs): 1, tiles of synthetic values
// instead of the codecs' reads (the kernel's floor without memory traffic); phase floors of
// that floor (wrong results; each leaves one more step out, for its share of the time): 2,
// no score step (the softmax reads S as it lies); 3, no softmax (P·V̂ reads P as it lies).
const TC_NOLOAD: bool = ATT_TC_NOLOAD >= 1u;
// Measuring only (KVPACK_TC_FIXED, src/attention/gpu.rs; wrong results): the kernel's cost
// apart from its tiles. 1: every workgroup returns at once (the launch and the merge remain);
// 2: no tile loop (the queries' staging and the record's writing remain as well).
const TC_NO_WORK: bool = ATT_TC_FIXED == 1u;
const TC_NO_TILES: bool = ATT_TC_FIXED == 2u;
const TC_NO_SCORES: bool = ATT_TC_NOLOAD == 2u;
const TC_NO_SOFTMAX: bool = ATT_TC_NOLOAD == 3u;
// The keys' low part: staged and multiplied unless the key codec's values are exact in f16
// (K_F16_EXACT: the f16 codec; the ring's rows always are), where it would be all zeros.
// Measuring only (KVPACK_TC_SPLIT, src/attention/gpu.rs; wrong by up to the f16 rounding): 0,
// the kernel; 1, the queries as f16 alone (rounded to nearest; no low part held or
// multiplied: two products per block); 2, the keys as f16 alone (two products).
const TC_QLO: bool = ATT_TC_SPLIT != 1u;
// Which sides of a whole tile the tile loop loads a tile ahead, and where (KVPACK_TC_PREF,
// src/attention/gpu.rs; measuring, but for 0): 0, the default: the sides read as stored f16
// rows (k_row8 / v_row8: nothing to make but f16 stores), right after the current tile's
// staging, so that their loads are in flight through its scores, softmax and P·V̂ (f16 rows,
// 64 rows at 32k on an H100: 922 → 874 µs; KIVI's octs, which make their values from codes,
// were 2.5-7.5 % slower so, at 255 registers instead of 240: BENCHMARKS.md, "Tier 3 prefill:
// the next tile's words in flight"); 1, both sides' readers (k_oct_fetch or k_row8, v_oct_fetch or
// v_row8) likewise; 2, both, before the current tile's P·V̂; 3, neither (each tile's words
// loaded at its staging); 4, the keys only; 5, the values only.
const TC_PREF_AT: u32 = select(1u, 2u, ATT_TC_PREF == 2u);
const PF_PRE_K: bool = select(ATT_TC_PREF == 1u || ATT_TC_PREF == 2u || ATT_TC_PREF == 4u, K_ROW8, ATT_TC_PREF == 0u) && (K_OCT || K_ROW8);
const PF_PRE_V: bool = select(ATT_TC_PREF == 1u || ATT_TC_PREF == 2u || ATT_TC_PREF == 5u, V_ROW8, ATT_TC_PREF == 0u) && (V_OCT || V_ROW8);
const TC_KLO: bool = ATT_TC_SPLIT != 2u && !K_F16_EXACT;
// Measuring (KVPACK_TC_BAR, src/attention/gpu.rs): the tile loop's barriers. 0, the kernel:
// the rescale flag read by workgroupUniformLoad (a barrier before the load and one after it);
// 1, the flag of each tile's parity read after one barrier (reset a tile later, after the
// next tile's staging barrier); 2, 1 without the barrier between the score step and the
// softmax (a race by the memory model: each subgroup reads only the rows it stored, so only
// its own lanes' order matters); 3, 2 without the barrier after P·V̂ (a race: the next
// staging overwrites the values other subgroups may still read). 2 and 3 measure what those
// barriers cost.
const TC_FLAG1: bool = ATT_TC_BAR >= 1u;
const TC_NO_SBAR: bool = ATT_TC_BAR >= 2u;
const TC_NO_PVBAR: bool = ATT_TC_BAR >= 3u;

// Row strides of tch (f16 elements): keys' and weights' rows (tokens), values' rows
// (channels).
const TC_PAD: u32 = 8u * ATT_TC_PAD;
const TC_KS: u32 = TC_TT + TC_PAD;
const TC_VS: u32 = TC_WP + TC_PAD;
// Regions of tch (f16 elements) and of tcs.
const TC_OKL: u32 = TC_DP * TC_KS;
const TC_OV: u32 = 2u * TC_DP * TC_KS;
const TC_OP: u32 = TC_OV + TC_TT * TC_VS;
const TC_OPL: u32 = TC_OP + TC_QB * TC_KS;
const TC_OR: u32 = TC_QB * TC_TT;
// Query staging: TC_QH slices of TC_QS channels in rows TC_QSP apart (64 · TC_QSP ≤ TC_OP),
// TC_QKD k-steps each.
const TC_QH: u32 = select(1u, 2u, TC_QB * (TC_DP + TC_PAD) > TC_OP);
const TC_QS: u32 = TC_DP / TC_QH;
const TC_QSP: u32 = TC_QS + TC_PAD;
const TC_QKD: u32 = TC_QS / 16u;
const TC_QE: u32 = TC_QB * TC_QS / WORKGROUP_SIZE;

var<workgroup> tch: array<f16, TC_OPL + TC_QB * TC_KS>;
var<workgroup> tcs: array<f32, TC_OR + TC_QB>;
var<workgroup> tcflag: array<atomic<u32>, 4>;
// The word in q where each of the workgroup's vectors' rows starts (TC_NOQ past the call):
// one division by the GQA group per vector, not one per staged element (with one per
// element, the prologue was ~6,000 instructions a warp on the H100, most of them the
// divisions' reciprocal sequences).
var<workgroup> tcqrow: array<u32, TC_QB>;
const TC_NOQ: u32 = 0xffffffffu;

// The staging's tile (wgsl/attend/attend_stage.wgsl) and its stores: keys channel-major as
// hi and lo parts (tc_split), values token-major.
const PF_TT: u32 = TC_TT;
const PF_DP: u32 = TC_DP;
const PF_WP: u32 = TC_WP;
const PF_NOLOAD: bool = TC_NOLOAD;

fn tc_put_key(at: u32, x: f32) {
    if (!TC_KLO) {
        tch[at] = f16(x);
        return;
    }
    let p = tc_split(x);
    tch[at] = p.x;
    tch[TC_OKL + at] = p.y;
}

fn pf_put_kquad(u: u32, x: vec4<f32>) {
    let at = (u / PF_TQ) * TC_KS + 4u * (u % PF_TQ);
    // @unroll 4
    for (var j = 0u; j < 4u; j++) {
        tc_put_key(at + j, x[j]);
    }
}

fn pf_put_k(e: u32, x: f32) {
    tc_put_key((e / TC_TT) * TC_KS + e % TC_TT, x);
}

fn pf_put_vquad(u: u32, x: vec4<f32>) {
    let at = TC_OV + (u / PF_VW4) * TC_VS + 4u * (u % PF_VW4);
    // @unroll 4
    for (var j = 0u; j < 4u; j++) {
        tch[at + j] = f16(x[j]);
    }
}

fn pf_put_v(e: u32, x: f32) {
    tch[TC_OV + (e / TC_WP) * TC_VS + e % TC_WP] = f16(x);
}

// The f16 rows' eight-channel readers (K_ROW8 / V_ROW8, declared by codecs that store f16
// rows: wgsl/attend/attend_stage.wgsl's header) for pf_tile's whole tiles, and their stores:
// eight keys or values stored as f16 (naga rejects a bitcast of a u32 to two f16, so they pass
// through f32, exactly).
fn pf_put_krow8(t: u32, c: u32, w: vec4<u32>) {
    // @unroll 4
    for (var j = 0u; j < 4u; j++) {
        let x = unpack2x16float(w[j]);
        let at = (c + 2u * j) * TC_KS + t;
        tc_put_key(at, x.x);
        tc_put_key(at + TC_KS, x.y);
    }
}

fn pf_put_vrow8(t: u32, c: u32, w: vec4<u32>) {
    let at = TC_OV + t * TC_VS + c;
    // @unroll 4
    for (var j = 0u; j < 4u; j++) {
        let x = unpack2x16float(w[j]);
        tch[at + 2u * j] = f16(x.x);
        tch[at + 2u * j + 1u] = f16(x.y);
    }
}

// Eight-channel units of a tile (K_ROW8 / V_ROW8). Keys: lane groups of PF_TT invocations,
// invocation lid owning token lid % PF_TT and PF_KR8 adjacent units of its group's channels
// (its loads cover whole 32-byte sectors of its row; the group's stores of one channel fall
// on adjacent f16). Values: units token-major, adjacent invocations on adjacent units of a
// row (a subgroup's loads cover whole rows).
const PF_KC8: u32 = PF_DP / 8u;
const PF_KG8: u32 = max(WORKGROUP_SIZE / PF_TT, 1u);
const PF_KR8: u32 = (PF_KC8 + PF_KG8 - 1u) / PF_KG8;
const PF_VC8: u32 = PF_WP / 8u;
const PF_VR8: u32 = (PF_TT * PF_VC8 + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE;

// The stored words of a tile's keys inside the codec's rows through k_row8 (channel units past
// D read the last unit: they meet a zero query), and their stores.
fn pf_krows8_fetch(lid: u32, t0: u32, h: u32) -> array<vec4<u32>, PF_KR8> {
    var r: array<vec4<u32>, PF_KR8>;
    let row = t0 + lid % PF_TT - AP.tok0;
    // @unroll 8
    for (var k = 0u; k < PF_KR8; k++) {
        let g = (lid / PF_TT) * PF_KR8 + k;
        if (lid < PF_KG8 * PF_TT && g < PF_KC8) {
            r[k] = k_row8(row, min(8u * g, max(DIM, 8u) - 8u), h);
        }
    }
    return r;
}

fn pf_krows8_put(lid: u32, r: array<vec4<u32>, PF_KR8>) {
    // @unroll 8
    for (var k = 0u; k < PF_KR8; k++) {
        let g = (lid / PF_TT) * PF_KR8 + k;
        if (lid < PF_KG8 * PF_TT && g < PF_KC8) {
            pf_put_krow8(lid % PF_TT, 8u * g, r[k]);
        }
    }
}

// The stored words of a tile's values from the codec through v_row8 (rows clamped to `vl`;
// channel units past the value space read its last unit: output channels never written), and
// their stores.
fn pf_vrows8_fetch(lid: u32, t0: u32, vl: u32, h: u32) -> array<vec4<u32>, PF_VR8> {
    var r: array<vec4<u32>, PF_VR8>;
    // @unroll 8
    for (var k = 0u; k < PF_VR8; k++) {
        let u = lid + k * WORKGROUP_SIZE;
        if (u < PF_TT * PF_VC8) {
            let c = 8u * (u % PF_VC8);
            r[k] = v_row8(min(t0 + u / PF_VC8 - AP.tok0, vl), min(c, max(V_W, 8u) - 8u), h);
        }
    }
    return r;
}

fn pf_vrows8_put(lid: u32, r: array<vec4<u32>, PF_VR8>) {
    // @unroll 8
    for (var k = 0u; k < PF_VR8; k++) {
        let u = lid + k * WORKGROUP_SIZE;
        if (u < PF_TT * PF_VC8) {
            pf_put_vrow8(u / PF_VC8, 8u * (u % PF_VC8), r[k]);
        }
    }
}

// A whole tile's stored words (pf_fetch), for the readers that load apart from their use:
// k_oct_fetch or k_row8, v_oct_fetch or v_row8 (the arrays of the side's other reader, and of
// a side not loaded ahead, stay unused).
struct PfRaw {
    ko: array<KOct, PF_KO>,
    kr: array<vec4<u32>, PF_KR8>,
    vo: array<VOct, PF_VOK>,
    vr: array<vec4<u32>, PF_VR8>,
}

// Whether tile t0 is whole: its keys and values all come from the codec (below min(qk, qv)),
// read without a check per element (pf_tile).
fn pf_whole(t0: u32, vring: bool) -> bool {
    return !PF_NOLOAD && (K_QUAD || K_OCT || K_ROW8) && !vring && t0 + PF_TT <= min(AP.qk, AP.qv);
}

// The stored words of the sides of whole tile t0 that are loaded a tile ahead (PF_PRE_K,
// PF_PRE_V; values' rows clamped to `vl`).
fn pf_fetch(lid: u32, t0: u32, vl: u32, h: u32) -> PfRaw {
    var r: PfRaw;
    if (PF_PRE_K && K_ROW8) {
        r.kr = pf_krows8_fetch(lid, t0, h);
    } else if (PF_PRE_K) {
        r.ko = pf_koct_fetch(lid, t0, h);
    }
    if (PF_PRE_V && V_ROW8) {
        r.vr = pf_vrows8_fetch(lid, t0, vl, h);
    } else if (PF_PRE_V) {
        r.vo = pf_voct_fetch(lid, t0, vl, h);
    }
    return r;
}

// The keys and the values of tile t0 (split end s1) of KV head h (the staging of
// wgsl/attend/attend_stage.wgsl, and the f16 rows' readers above); `r`: the words of the
// sides loaded a tile ahead (pf_fetch) where the tile is whole. A whole tile (pf_whole: every
// tile of a codec split but its last at most) stages both sides in one branch-free block, so
// that the values' loads can be issued before the keys' stores, not after them (pf_keys and
// pf_values each end in their own branch); every other tile through pf_keys and pf_values.
fn pf_tile(lid: u32, t0: u32, s1: u32, h: u32, vring: bool, r: PfRaw) {
    if (pf_whole(t0, vring)) {
        let vl = min(s1, AP.qv) - 1u - AP.tok0;
        if (PF_PRE_K && K_ROW8) {
            pf_krows8_put(lid, r.kr);
        } else if (PF_PRE_K) {
            pf_koct_put(lid, t0, h, r.ko);
        } else if (K_ROW8) {
            pf_krows8_put(lid, pf_krows8_fetch(lid, t0, h));
        } else if (K_OCT) {
            pf_koct_whole(lid, t0, h);
        } else {
            pf_kquads_whole(lid, t0, h);
        }
        if (PF_PRE_V && V_ROW8) {
            pf_vrows8_put(lid, r.vr);
        } else if (PF_PRE_V) {
            pf_voct_put(lid, t0, vl, h, r.vo);
        } else if (V_ROW8) {
            pf_vrows8_put(lid, pf_vrows8_fetch(lid, t0, vl, h));
        } else if (V_OCT) {
            pf_voct_whole(lid, t0, vl, h);
        } else {
            pf_vquads(lid, t0, vl, h);
        }
        return;
    }
    pf_keys(lid, t0, s1, h);
    pf_values(lid, t0, s1, h, vring);
}

// The weight p as the f16 pair (hi, p − hi): hi as tc_split's, the remainder unscaled (P_lo·V̂
// then adds into the output's accumulator as it is).
fn tc_split_w(x: f32) -> vec2<f16> {
    let hi = bitcast<f32>(bitcast<u32>(x) & 0xffffe000u);
    return vec2<f16>(f16(hi), f16(x - hi));
}

// Slice `r` of the workgroup's queries as this invocation stages them (scaled by
// scale·log2(e); 0 past D and for vectors past the call), every load issued before any is
// used (with a branch around each, each load's latency was waited for in turn).
fn tc_load_q(lid: u32, r: u32) -> array<f32, TC_QE> {
    var x: array<f32, TC_QE>;
    // @unroll 64
    for (var k = 0u; k < TC_QE; k++) {
        let e = lid + k * WORKGROUP_SIZE;
        let row = e / TC_QS;
        let c = r * TC_QS + e - row * TC_QS;
        let at = tcqrow[row];
        let ok = at != TC_NOQ && c < DIM;
        x[k] = select(0.0, q[select(0u, at + c, ok)] * AP.scale_log2, ok);
    }
    return x;
}

// Stages the queries `x` (tc_load_q): their f16 part (lo = false) or the f16 rounding of what
// that part leaves (lo = true), rows of TC_QS channels TC_QSP apart at the start of tch.
fn tc_stage_q(lid: u32, x: array<f32, TC_QE>, lo: bool) {
    // @unroll 64
    for (var k = 0u; k < TC_QE; k++) {
        let e = lid + k * WORKGROUP_SIZE;
        let row = e / TC_QS;
        let p = tc_split(x[k]);
        tch[row * TC_QSP + e - row * TC_QS] = select(select(p.x, p.y, lo), f16(x[k]), !TC_QLO);
    }
}

// Rescales row r (0..15) of every output matrix of subgroup sg by the factor of vector
// 16·sg + r (tcs[TC_OR + ·]), through the subgroup's rows of `tcs` (called uniformly by the
// whole workgroup: it has barriers).
fn tc_rescale(o: ptr<function, array<TcC, TC_NO>>, sg: u32, sl: u32) {
    let base = sg * 16u * TC_TT;
    let rr = sl / 2u;
    let f = tcs[TC_OR + sg * 16u + rr];
    // @unroll 16
    for (var j = 0u; j < TC_NO; j++) {
        coopStoreT((*o)[j], &tcs[base], TC_TT);
        workgroupBarrier();
        // @unroll 8
        for (var i = 0u; i < 8u; i++) {
            let a = base + rr * TC_TT + (sl % 2u) * 8u + i;
            tcs[a] = tcs[a] * f;
        }
        workgroupBarrier();
        (*o)[j] = coopLoadT<TcC>(&tcs[base], TC_TT);
        workgroupBarrier();
    }
}

// 5. O += P·V̂ for subgroup sg's 16 vectors (P_hi, then P_lo, into the same accumulator):
// each block's weights are loaded once for all output blocks; then a barrier (the next tile's
// staging overwrites the tile).
fn tc_pv(o: ptr<function, array<TcC, TC_NO>>, sg: u32) {
    // @unroll 2
    for (var kb = 0u; kb < TC_TB; kb++) {
        let pa = coopLoadT<TcA>(&tch[TC_OP + sg * 16u * TC_KS + kb * 16u], TC_KS);
        let pl = coopLoadT<TcA>(&tch[TC_OPL + sg * 16u * TC_KS + kb * 16u], TC_KS);
        // @unroll 16
        for (var j = 0u; j < TC_NO; j++) {
            let vm = coopLoadT<TcB>(&tch[TC_OV + kb * 16u * TC_VS + j * 16u], TC_VS);
            (*o)[j] = coopMultiplyAdd(pl, vm, coopMultiplyAdd(pa, vm, (*o)[j]));
        }
    }
    if (!TC_NO_PVBAR) {
        workgroupBarrier();
    }
}

fn tc_main(lid: u32, wid: u32, sg: u32, sl: u32) {
    let w = split_work(wid);
    if (!w.live || TC_NO_WORK) {
        return; // uniform: depends on the workgroup only
    }
    let h = w.h;
    let vb = w.vb;
    let vring = w.ring;
    let s0 = w.s0;
    let s1 = w.s1;
    let part = w.part;
    let width = select(V_W, DIM, vring);
    // 1. The queries' B-matrices Qᵀ (hi and lo parts), slice by slice through tch, from the
    //    rows' offsets in q.
    for (var i = lid; i < TC_QB; i += WORKGROUP_SIZE) {
        let v = vb * TC_QB + i;
        let at = ((v / AP.qg) * AP.hq + h * AP.qg + v % AP.qg) * DIM;
        tcqrow[i] = select(TC_NOQ, at, v < AP.vec_total);
    }
    if (lid == 0u) {
        atomicStore(&tcflag[0], 0u);
        atomicStore(&tcflag[1], 0u);
    }
    workgroupBarrier();
    var qh: array<TcB, TC_KD>;
    var ql: array<TcB, TC_KD>;
    // @unroll 2
    for (var r = 0u; r < TC_QH; r++) {
        let x = tc_load_q(lid, r);
        tc_stage_q(lid, x, false);
        workgroupBarrier();
        // @unroll 16
        for (var k = 0u; k < TC_QKD; k++) {
            qh[r * TC_QKD + k] = coopLoad<TcB>(&tch[sg * 16u * TC_QSP + k * 16u], TC_QSP);
        }
        workgroupBarrier();
        if (TC_QLO) {
            tc_stage_q(lid, x, true);
            workgroupBarrier();
            // @unroll 16
            for (var k = 0u; k < TC_QKD; k++) {
                ql[r * TC_QKD + k] = coopLoad<TcB>(&tch[sg * 16u * TC_QSP + k * 16u], TC_QSP);
            }
            workgroupBarrier();
        }
    }
    // The vector of this lane pair and its state (both lanes keep m; l is per lane).
    let rs = sl / 2u;
    let row = sg * 16u + rs;
    let half = sl % 2u;
    let v = vb * TC_QB + row;
    let live = v < AP.vec_total;
    let pv = AP.q_pos0 + min(v, AP.vec_total - 1u) / AP.qg;
    var o: array<TcC, TC_NO>;
    // @unroll 16
    for (var j = 0u; j < TC_NO; j++) {
        o[j] = TcC();
    }
    var m = NEG;
    var l = 0.0;
    let kl = AP.qk - 1u - AP.tok0; // the last key row of the codec (when qk > tok0)
    let vl = min(s1, AP.qv) - 1u - AP.tok0;
    // The words of a whole tile's sides loaded a tile ahead of their staging (PF_PRE_K,
    // PF_PRE_V).
    let pref = (PF_PRE_K || PF_PRE_V) && !TC_NO_TILES;
    var raw: PfRaw;
    if (pref && pf_whole(s0, vring)) {
        raw = pf_fetch(lid, s0, vl, h);
    }
    // The tile loop. A tile whose weights need the output rescaled (rare: tc_rescale) leaves
    // the inner loop before its P·V̂, which then runs after the rescale, outside it: with the
    // rescale inside the loop, NVIDIA's driver copied the 64 registers of `o` twice per tile
    // (at the branch's join and the loop's end, 128 moves per tile and subgroup on the H100).
    var t0 = select(s0, s1, TC_NO_TILES);
    loop {
        for (; t0 < s1; t0 += TC_TT) {
            // The flag of this tile's parity (TC_FLAG1; else always flag 0).
            let fp = select(0u, ((t0 - s0) / TC_TT) % 2u, TC_FLAG1);
            if (!TC_FLAG1 && lid == 0u) {
                atomicStore(&tcflag[0], 0u); // every invocation read the last tile's flag
            }
            // 2. The tile's keys (hi and lo parts) and values, in f16
            //    (wgsl/attend/attend_stage.wgsl): from the words loaded a step before, or read
            //    now.
            pf_tile(lid, t0, s1, h, vring, raw);
            workgroupBarrier();
            if (TC_FLAG1 && lid == 0u) {
                // Every invocation read the last tile's flag before this barrier; the next
                // tile's is set only after its own staging barrier.
                atomicStore(&tcflag[1u - fp], 0u);
            }
            let next = t0 + TC_TT;
            if (pref && TC_PREF_AT == 1u && next < s1 && pf_whole(next, vring)) {
                raw = pf_fetch(lid, next, vl, h);
            }
            // 3. Scores of the subgroup's 16 vectors × TC_TT tokens.
            if (!TC_NO_SCORES) {
                // @unroll 2
                for (var tb = 0u; tb < TC_TB; tb++) {
                    var s = TcC();
                    var sl2 = TcC();
                    // @unroll 16
                    for (var k = 0u; k < TC_KD; k++) {
                        let at = k * 16u * TC_KS + tb * 16u;
                        let kh = coopLoad<TcA>(&tch[at], TC_KS);
                        s = coopMultiplyAdd(kh, qh[k], s);
                        if (TC_QLO) {
                            sl2 = coopMultiplyAdd(kh, ql[k], sl2);
                        }
                        if (TC_KLO) {
                            let klo = coopLoad<TcA>(&tch[TC_OKL + at], TC_KS);
                            sl2 = coopMultiplyAdd(klo, qh[k], sl2);
                        }
                    }
                    coopStore(tc_axpy(s, sl2, TC_ILO), &tcs[sg * 16u * TC_TT + tb * 16u], TC_TT);
                }
            }
            if (!TC_NO_SBAR) {
                workgroupBarrier();
            }
            // 4. Masks, the tile's max, weights (lane pair: TC_LT tokens each, in an order rotated
            //    by the vector's row, so that the subgroup's reads of S at step j fall in 32
            //    different banks (rows TC_TT words apart), and its writes of P in 32 unpadded
            //    (rows TC_TT / 2 words apart) or at most 2 ways deep padded (TC_KS / 2 words)).
            if (!TC_NO_SOFTMAX) {
                var sv: array<f32, 16>;
                var mt = NEG;
                // A tile the vector sees whole (positions t0 .. + TC_TT − 1 all before the
                // split's end, at most pv and inside the window: every tile but those at the
                // causal diagonal or the window's edge) reads its scores without a check per
                // token.
                let whole = live && !POS && t0 + TC_TT <= s1 && t0 + TC_TT - 1u <= pv
                    && (AP.window == 0u || t0 + AP.window > pv);
                if (whole) {
                    // @unroll 16
                    for (var j = 0u; j < TC_LT; j++) {
                        sv[j] = tcs[row * TC_TT + half * TC_LT + (j + rs) % TC_LT];
                        mt = max(mt, sv[j]);
                    }
                } else {
                    // @unroll 16
                    for (var j = 0u; j < TC_LT; j++) {
                        let t = half * TC_LT + (j + rs) % TC_LT;
                        let pos = t0 + t;
                        let ok = live && pos < s1 && visible(key_pos(pos, h), pv);
                        sv[j] = select(NEG, tcs[row * TC_TT + t], ok);
                        mt = max(mt, sv[j]);
                    }
                }
                mt = max(mt, subgroupShuffleXor(mt, 1u));
                var corr = 1.0;
                if (mt > m + TC_TAU) {
                    corr = exp2(m - mt);
                    if (m > NEG) {
                        atomicOr(&tcflag[fp], 1u);
                    }
                    m = mt;
                }
                l *= corr;
                // @unroll 16
                for (var j = 0u; j < TC_LT; j++) {
                    let p = select(0.0, exp2(sv[j] - m), sv[j] > NEG);
                    l += p;
                    let ps = tc_split_w(p);
                    let t = half * TC_LT + (j + rs) % TC_LT;
                    tch[TC_OP + row * TC_KS + t] = ps.x;
                    tch[TC_OPL + row * TC_KS + t] = ps.y;
                }
                if (half == 0u) {
                    tcs[TC_OR + row] = corr;
                }
            }
            // (a barrier: S, P, the factors and the flag are complete for everyone)
            var rescale: bool;
            if (TC_FLAG1) {
                workgroupBarrier();
                // The same for every invocation: flag fp is reset only after the next
                // tile's staging barrier.
                rescale = atomicLoad(&tcflag[fp]) != 0u;
            } else {
                rescale = workgroupUniformLoad(&tcflag[0]) != 0u;
            }
            if (rescale) {
                break; // to the rescale, then this tile's P·V̂
            }
            if (pref && TC_PREF_AT == 2u && next < s1 && pf_whole(next, vring)) {
                raw = pf_fetch(lid, next, vl, h);
            }
            tc_pv(&o, sg);
        }
        if (t0 >= s1) {
            break;
        }
        tc_rescale(&o, sg, sl);
        let next = t0 + TC_TT;
        if (pref && TC_PREF_AT == 2u && next < s1 && pf_whole(next, vring)) {
            raw = pf_fetch(lid, next, vl, h);
        }
        tc_pv(&o, sg);
        t0 = next;
    }
    // 6. The record of (vector, split): m, l (the lane pair's sum), o through workgroup memory.
    l += subgroupShuffleXor(l, 1u);
    let b = ((h * AP.vec_total + min(v, AP.vec_total - 1u)) * AP.n_parts + part) * PW;
    if (live && half == 0u) {
        partials[b] = m;
        partials[b + 1u] = l;
    }
    let base = sg * 16u * TC_TT;
    // @unroll 16
    for (var j = 0u; j < TC_NO; j++) {
        coopStoreT(o[j], &tcs[base], TC_TT);
        workgroupBarrier();
        // @unroll 8
        for (var i = 0u; i < 8u; i++) {
            let c = j * 16u + half * 8u + i;
            if (live && c < width) {
                partials[b + 2u + c] = tcs[base + (sl / 2u) * TC_TT + half * 8u + i];
            }
        }
        workgroupBarrier();
    }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) sl: u32,
) {
    tc_main(lid, linear_workgroup(wg, nwg), sg, sl);
}
