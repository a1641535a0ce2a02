// Attention over a compressed cache: the shared core (../shared/spec/attention.md). CPU
// reference: src/cpu/attend.rs. The core owns tiling, masks, the online softmax in base 2,
// grouped-query sharing, the split into partials and the residual window (f16 rows in a ring);
// a key codec and a value codec plug in through hooks, each in its own file, composed before
// this one (src/attention/kernel.rs):
//
//   key codec  (wgsl/<codec>/attend_k.wgsl)   const K_PREP: bool; const K_PREP_W: u32;
//              its uniform at binding 1 (struct of its own); kseg, ktab (declared here)
//              fn k_prepare(lid: u32, h: u32)          reads qs, writes qp (when K_PREP)
//              fn k_score(row: u32, last: u32, cg: u32, h: u32) -> array<vec4<f32>, 8>
//                  (rows past `last` are past the key side's Q: read row `last` instead)
//   value codec (wgsl/<codec>/attend_v.wgsl)  const V_W: u32; const V_CPL: u32;
//              const V_SPACE_OUT: bool (its space is the output space: V_W = D, lanes as the
//              ring's, identity finish: the ring's rows then join its accumulator);
//              struct VState (its accumulator: a function variable of the core, passed by
//              pointer, so that it lives in registers);
//              fn v_reset(vs: ptr<function, VState>); fn v_scale(vs, c: vec4<f32>);
//              fn v_out(vs, i: u32) -> vec4<f32>; fn v_add(vs, i: u32, x: vec4<f32>)
//              (adds x to output channel cg·V_CPL + i: V_SPACE_OUT codecs only)
//              fn v_accum(vs, row: u32, last: u32, cg: u32, h: u32, p: array<vec4<f32>, 8>)
//                  (rows past `last` are outside the split: read row `last` instead, p is 0)
//              fn v_prepare(lid: u32, h: u32)  once per workgroup before the tile loop (every
//                  invocation; a barrier follows): e.g. a codebook into workgroup memory
//              fn v_finish(lid: u32, h: u32)   fin[0..V_W] (normalized) → fin[0..D], in place
//              its uniform at binding 2; vseg, vtab (declared here)
// and the entry file (attend_subgroup.wgsl / attend_workgroup.wgsl): const ENTRY_SCRATCH;
//              fn rs_cg, slice_max, slice_ref_max, slice_sum, gather8 (cross-lane steps,
//              below);
//              const TG_SHUFFLE (a slice is one subgroup) and fn tg_sum (the sum over a
//              slice's 4 token groups, lanes of equal cg; called only where TG_SHUFFLE).
//
// **Lanes.** A workgroup of WORKGROUP_SIZE = 32·SLICES invocations serves one KV head h, up to
// four query vectors (query row × grouped head: vec4 lanes of every accumulator) and one split
// of tokens; slice s (32 lanes) takes the split's 32-token tiles s, s + SLICES, ... with its own
// running softmax state, merged with the other slices once, at the end. In a tile, lane
// (cg = lane & 7, tg = lane >> 3) owns tokens 8·tg .. 8·tg + 7 and the cg-th eighth of the
// codec's channels (or whatever slice of its stored form the codec assigns to cg): k_score
// returns that lane's partial scores of its 8 tokens for the 4 vectors; the core sums them
// over the 8 cg lanes (rs_cg: lane cg then holds token 8·tg + cg), masks, takes the tile's
// max over the slice, turns scores into weights p = 2^(s − m), hands each lane the weights of
// its 8 tokens (gather8) and v_accum adds p·v̂ for its slice of the value space.
// `row` is the segment row of the lane's first token (pos − tok0). Cross-lane steps are the
// entry file's (attend_subgroup.wgsl: shuffles; attend_workgroup.wgsl: workgroup memory);
// every invocation calls them the same number of times (uniform trip counts).
//
// @binding(0) A:        AttendParams (uniform; wgsl/attend/attend_params.wgsl)
// @binding(1) KP:       the key codec's uniform     @binding(2) VP: the value codec's uniform
// @binding(3) q:        array<f32> [Tq][Hq][D]
// @binding(4) partials: array<f32> [Tq·qg vectors of each KV head...][n_parts][PW]: per query
//                       vector (row, head) and slot: m, l (base 2), o[W]
//                       (or, when AP.direct = 1, out: array<f32> [Tq][Hq][D])
// @binding(5) kseg, @binding(6) ktab:  the key codec's segment and tables
// @binding(7) vseg, @binding(8) vtab:  the value codec's segment and tables
// @binding(9) ringk, @binding(10) ringv: f16 rows [ring_cap_k / _v][row_words], token pos in
//                       row pos % ring_cap_k (_v)
//
// Dispatch: hkv · (n_split_c + n_split_r) · vblocks workgroups; index ((h · splits) + split) ·
// vblocks + vb (split < n_split_c: a codec split, values from the value codec; else a ring
// split, values from the ring, written to the slots after the codec ones: they are in the
// output space, not the codec's).

@group(0) @binding(0) var<uniform> AP: AttendParams;
@group(0) @binding(3) var<storage, read> q: array<f32>;
@group(0) @binding(4) var<storage, read_write> partials: array<f32>;
@group(0) @binding(5) var<storage, read> kseg: array<u32>;
@group(0) @binding(6) var<storage, read> ktab: array<u32>;
@group(0) @binding(7) var<storage, read> vseg: array<u32>;
@group(0) @binding(8) var<storage, read> vtab: array<u32>;
@group(0) @binding(9) var<storage, read> ringk: array<u32>;
@group(0) @binding(10) var<storage, read> ringv: array<u32>;
// The same four buffers again as 16-byte words (read-only aliases: the host binds each buffer
// twice), for the f16 rows' 16-byte loads (F16_V4).
@group(0) @binding(11) var<storage, read> kseg4: array<vec4<u32>>;
@group(0) @binding(12) var<storage, read> vseg4: array<vec4<u32>>;
@group(0) @binding(13) var<storage, read> ringk4: array<vec4<u32>>;
@group(0) @binding(14) var<storage, read> ringv4: array<vec4<u32>>;

const DIM: u32 = ATT_DIM;
// Whether the cache has a ring (src/attention/plan.rs CacheShape::ring): without one its
// paths are compiled out.
const RING: bool = ATT_RING == 1u;
// Measuring only (KVPACK_DEC_VARIANT, src/attention/gpu.rs): 1, the ring's rows (keys, and
// values where the ring's) read one row per trip of a loop instead of eight rows unrolled, so
// that their loads are not all in flight at once: the ring's paths, which run in at most the
// last split of a head, name the kernel's highest registers (BENCHMARKS.md, "The machine
// code"). The loop rotates the lane's 8-entry arrays so that every index stays constant.
// On the H200 it cut KIVI-4's registers from 245 to 168 and was 14 % slower at 32k (105 against
// 92 µs; BENCHMARKS.md): kept as a variant, not the default.
const DEC_ROLLED: bool = ATT_DEC_VARIANT == 1u;
// The online softmax's reference max m moves only when one of a tile's scores passes it by
// more than DEC_TAU (base 2; the entry file's slice_ref_max): the weights p = 2^(s − m) then
// stay ≤ 2^DEC_TAU (f32 sums of them lose nothing), and a tile whose scores stay below
// m + DEC_TAU skips the slice's max (five shuffle rounds) and the rescale. The result is the
// softmax's to f32 rounding for any m (the spec's online form: m is the running maximum up to
// the slack). Measuring only: 2, the running maximum taken exactly in every tile (the kernel
// before 2026-12-06).
const DEC_TAU: f32 = 8.0;
const DEC_EXACT_MAX: bool = ATT_DEC_VARIANT == 2u;
// How the codecs' decode hooks turn a code into a float (KIVI's fast paths,
// wgsl/kivi/attend_k.wgsl, attend_v.wgsl): 1 + c/2^b with the bits of 1.0 read once from
// workgroup memory (dec_one) instead of a literal, so that the driver keeps them in a register
// and merges the mask and the OR into one three-input logic instruction: two instructions per
// code instead of three (H100, 2026-12-07: LOP3 545 → 291 in KIVI-4's kernel, decode at 128k
// 245 → 221 µs; BENCHMARKS.md). Measuring only: 3, the literal (the kernel before); 4, two codes
// per shift and mask as f16 subnormals (bits_pair_tiny: c·2^-24, exact where the device keeps
// f16 subnormals), the 2^24 folded into the query's and the weight's scale (H100: 226 µs at
// 128k, no better than the default).
const DEC_ONE_WG: bool = ATT_DEC_VARIANT != 3u;
const DEC_PAIRS: bool = ATT_DEC_VARIANT == 4u;
// The bits of 1.0: read from workgroup memory in attend_main (or, variant 3, the literal).
var<private> dec_one: u32 = 0x3f800000u;
var<workgroup> dec_one_wg: u32;

// Whether a score x (the 4 vectors') passes the reference max m by more than DEC_TAU.
fn ref_moves(x: vec4<f32>, m: vec4<f32>) -> bool {
    return any(x > m + DEC_TAU);
}
// Whether the cache evicts tokens (a layer under an eviction policy: fixed for its life). Without
// it a key's position is its slot and the positions code is compiled out.
const POS: bool = ATT_POS == 1u;
const SLICES: u32 = WORKGROUP_SIZE / 32u;
const TILE: u32 = 32u;
// Finite "minus infinity": 2^(NEG − m) is 0 and NEG stays finite under fast math.
const NEG: f32 = -1.0e30;
// Ring lanes own R_CPL channels each (the residual is stored in the output space, D wide).
const R_CPL: u32 = (DIM + 7u) / 8u;
// Whether the 8 lanes' slices cover D exactly (D a multiple of 8: no lane reads past D).
const R_EXACT: bool = R_CPL * 8u == DIM;

// Channel i of lane cg's slice, clamped to D − 1 (a constant offset from the slice's first
// channel where R_EXACT: addresses then fold into the loads).
fn lane_channel(cg: u32, i: u32) -> u32 {
    if (R_EXACT) {
        return cg * R_CPL + i;
    }
    return min(cg * R_CPL + i, DIM - 1u);
}
// Partial record: m, l, then max(V_W, D) floats.
const PW: u32 = max(V_W, DIM) + 2u;

// [8·R_CPL] scaled queries (vec4 = the 4 vectors), zero past D so that a lane's channel slice
// never needs a bounds test.
var<workgroup> qs: array<vec4<f32>, 8u * R_CPL>;
var<workgroup> qp: array<vec4<f32>, select(1u, K_PREP_W, K_PREP)>; // the key codec's form of them
// After the tile loop: the slices' outputs (TG_SHUFFLE: one region of max(V_W, D) per slice,
// then their sum in region 0; else their sum); during it, the entry file's scratch.
var<workgroup> wsm: array<vec4<f32>, max(select(1u, SLICES, TG_SHUFFLE) * max(V_W, DIM), ENTRY_SCRATCH)>;
var<workgroup> fin: array<f32, max(V_W, DIM)>;            // one vector through v_finish
var<workgroup> msm: array<vec4<f32>, SLICES>;
var<workgroup> lsm: array<vec4<f32>, SLICES>;


// f16 rows (the residual ring; the f16 codec's segments): a lane reads channels
// cg·R_CPL .. cg·R_CPL + R_CPL − 1 of head h of a row whose first word is w, from the ring
// (seg = false) or from the key / value segment (seg = true; a constant at every call site).
// Where D and R_CPL are even the lane's channels are whole words (F16_PAIRS: one load per two
// channels); otherwise one load per channel. Channels past D read channel D − 1 (their query
// is 0; their output is never written). Everything is accumulated element by element into
// its destination: a temporary array of the lane's channels would cost R_CPL vec4 registers.
const F16_PAIRS: bool = DIM % 2u == 0u && R_CPL % 2u == 0u;
const R_HALF: u32 = R_CPL / 2u;
// Where a lane's channels are whole 16-byte words (D a multiple of 64: R_CPL a multiple of 8,
// and a row's first word, a stream's and h·D/2 multiples of 4 words) they are read R_CPL / 8
// 16-byte loads at a time: the driver checks each load's bounds (robustBufferAccess2), and
// 4-byte loads are never merged.
const F16_V4: bool = R_CPL % 8u == 0u && R_EXACT;
const R_QUADS: u32 = R_CPL / 8u;

fn f16_quad(seg: bool, keys: bool, at: u32) -> vec4<u32> {
    if (keys) {
        if (seg) {
            return kseg4[at];
        }
        return ringk4[at];
    }
    if (seg) {
        return vseg4[at];
    }
    return ringv4[at];
}

// The 16-byte word holding the first of the lane's channels of head h in the row at word w
// (F16_V4).
fn f16_quad0(w: u32, cg: u32, h: u32) -> u32 {
    return (w + ((h * DIM + cg * R_CPL) >> 1u)) >> 2u;
}

fn f16_word(seg: bool, keys: bool, at: u32) -> u32 {
    // Branches, not `select` (which would load from both buffers).
    if (keys) {
        if (seg) {
            return kseg[at];
        }
        return ringk[at];
    }
    if (seg) {
        return vseg[at];
    }
    return ringv[at];
}

// Channels i, i + 1 of the lane's slice (F16_PAIRS), or channel i twice.
fn f16_pair(seg: bool, keys: bool, w: u32, cg: u32, h: u32, i: u32) -> vec2<f32> {
    let e = h * DIM + lane_channel(cg, i);
    let x = unpack2x16float(f16_word(seg, keys, w + (e >> 1u)));
    if (F16_PAIRS) {
        return x;
    }
    return vec2<f32>(x[e & 1u]);
}

// The lane's part of the 4 vectors' scores of one row (qs holds the scaled queries).
fn f16_dot(seg: bool, w: u32, cg: u32, h: u32) -> vec4<f32> {
    let c0 = cg * R_CPL;
    var a = vec4<f32>(0.0);
    if (F16_V4) {
        let a0 = f16_quad0(w, cg, h);
        // @unroll 4 f16dot
        for (var k = 0u; k < R_QUADS; k++) {
            let u = f16_quad(seg, true, a0 + k);
            // @unroll 4
            for (var e = 0u; e < 4u; e++) {
                let x = unpack2x16float(u[e]);
                let i = c0 + 8u * k + 2u * e;
                if (seg) {
                    a += qs[i] * x.x + qs[i + 1u] * x.y;
                } else {
                    a += qs[i] * x.x;
                    a += qs[i + 1u] * x.y;
                }
            }
        }
    } else if (F16_PAIRS) {
        // @unroll 16 f16dot
        for (var i = 0u; i < R_HALF; i++) {
            let x = f16_pair(seg, true, w, cg, h, 2u * i);
            if (seg) {
                // The f16 codec's rows: the two products summed first (a multiply, a
                // multiply-add and an add per pair). The two-multiply-add form below made the
                // H200's driver compile the f16 kernel to 168 registers instead of 233, and
                // it was 13-15 % slower at 32k-128k (benches/results/h200-2026-12-04-sass/).
                a += qs[c0 + 2u * i] * x.x + qs[c0 + 2u * i + 1u] * x.y;
            } else {
                // The ring's rows (KIVI and the other codecs' kernels): two multiply-adds,
                // 224 instructions fewer per ring tile; the KIVI kernels were 3-6 % faster at
                // 1k-32k and 0.5-1.4 % at 128k.
                a += qs[c0 + 2u * i] * x.x;
                a += qs[c0 + 2u * i + 1u] * x.y;
            }
        }
    } else {
        // @unroll 32 f16dot
        for (var i = 0u; i < R_CPL; i++) {
            a += qs[c0 + i] * f16_pair(seg, true, w, cg, h, i).x; // qs is 0 past D
        }
    }
    return a;
}

// One ring row (first word w) of a lane's tokens, weighted by pj, into the value codec's
// accumulator (V_SPACE_OUT: v_add) or `ro`.
fn ring_row_accum(vs: ptr<function, VState>, ro: ptr<function, array<vec4<f32>, R_CPL>>, w: u32, cg: u32, h: u32, pj: vec4<f32>) {
    if (F16_V4) {
        let a0 = f16_quad0(w, cg, h);
        // @unroll 4
        for (var k = 0u; k < R_QUADS; k++) {
            let u = f16_quad(false, false, a0 + k);
            // @unroll 4
            for (var e = 0u; e < 4u; e++) {
                let x = unpack2x16float(u[e]);
                let i = 8u * k + 2u * e;
                if (V_SPACE_OUT) {
                    v_add(vs, i, pj * x.x);
                    v_add(vs, i + 1u, pj * x.y);
                } else {
                    (*ro)[i] += pj * x.x;
                    (*ro)[i + 1u] += pj * x.y;
                }
            }
        }
    } else if (F16_PAIRS) {
        // @unroll 16
        for (var i = 0u; i < R_HALF; i++) {
            let x = f16_pair(false, false, w, cg, h, 2u * i);
            if (V_SPACE_OUT) {
                v_add(vs, 2u * i, pj * x.x);
                v_add(vs, 2u * i + 1u, pj * x.y);
            } else {
                (*ro)[2u * i] += pj * x.x;
                (*ro)[2u * i + 1u] += pj * x.y;
            }
        }
    } else {
        // @unroll 32
        for (var i = 0u; i < R_CPL; i++) {
            let x = pj * f16_pair(false, false, w, cg, h, i).x;
            if (V_SPACE_OUT) {
                v_add(vs, i, x);
            } else {
                (*ro)[i] += x;
            }
        }
    }
}

// The ring's rows of a lane's 8 tokens, weighted by p, into the value codec's accumulator
// (V_SPACE_OUT: v_add) or `ro`.
fn ring_accum(vs: ptr<function, VState>, ro: ptr<function, array<vec4<f32>, R_CPL>>, w0: array<u32, 8>, cg: u32, h: u32, p: array<vec4<f32>, 8>) {
    if (DEC_ROLLED) {
        var wr = w0;
        var pr = p;
        for (var j = 0u; j < 8u; j++) {
            ring_row_accum(vs, ro, wr[0], cg, h, pr[0]);
            wr = array<u32, 8>(wr[1], wr[2], wr[3], wr[4], wr[5], wr[6], wr[7], wr[0]);
            pr = array<vec4<f32>, 8>(pr[1], pr[2], pr[3], pr[4], pr[5], pr[6], pr[7], pr[0]);
        }
        return;
    }
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        ring_row_accum(vs, ro, w0[j], cg, h, p[j]);
    }
}

// The first words of the rows of tokens pos0 .. pos0 + 7 in a ring of `cap` rows, clamped to
// [first, last] (the ring's tokens in the split): a token outside has weight 0 and its slot
// may hold anything (an older token, or nothing ever written).
fn ring_rows(pos0: u32, first: u32, last: u32, cap: u32) -> array<u32, 8> {
    var w: array<u32, 8>;
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        w[j] = (clamp(pos0 + j, first, last) % cap) * AP.row_words;
    }
    return w;
}


// The absolute position of the token in cache slot `slot` of KV head h (spec/attention.md,
// "Which keys a query sees"; CPU: `Positions` in src/cpu/attend.rs): the slot itself, unless
// the cache evicted tokens (POS): then the key segment's positions stream
// (kseg[pos_off + slot·hkv + h], slots below pos_rows: segment 0, whose tok0 is 0) or, above
// them (tokens appended since the last eviction, the residual window), slot + evicted.
fn key_pos(slot: u32, h: u32) -> u32 {
    if (POS) {
        if (slot < AP.pos_rows) {
            return kseg[AP.pos_off + slot * AP.hkv + h];
        }
        return slot + AP.evicted;
    }
    return slot;
}

fn visible(pos: u32, p: u32) -> bool {
    if (pos > p) {
        return false;
    }
    return AP.window == 0u || pos + AP.window > p || pos < AP.sinks;
}

// What one workgroup of a partials dispatch serves (dispatch index ((h · splits) + split) ·
// vblocks + vb, see the header): KV head h, vector block vb, split `split` over tokens
// [s0, s1), partial slot `part`; `ring`: a split past the codec splits (values from the ring; on
// the tensor-core decode kernel, keys from the ring). `live` is false past the dispatch's
// workgroups (uniform: the workgroup returns).
struct SplitWork {
    live: bool,
    h: u32,
    split: u32,
    vb: u32,
    ring: bool,
    s0: u32,
    s1: u32,
    part: u32,
}

fn split_work(wid: u32) -> SplitWork {
    var w: SplitWork;
    let per_h = AP.vblocks * (AP.n_split_c + AP.n_split_r);
    w.live = wid < AP.hkv * per_h;
    if (!w.live) {
        return w;
    }
    w.h = wid / per_h;
    w.split = (wid % per_h) / AP.vblocks;
    w.vb = wid % AP.vblocks;
    w.ring = w.split >= AP.n_split_c;
    if (w.ring) {
        w.s0 = AP.r0 + (w.split - AP.n_split_c) * AP.split_r;
        w.s1 = min(w.s0 + AP.split_r, AP.tok_end);
        w.part = AP.part_r + w.split - AP.n_split_c;
    } else {
        w.s0 = AP.tok0 + w.split * AP.split_c;
        w.s1 = min(w.s0 + AP.split_c, AP.c_end);
        w.part = AP.part_c + w.split;
    }
    return w;
}

fn attend_main(lid: u32, wid: u32, sgl: u32) {
    let w = split_work(wid);
    if (!w.live) {
        return; // uniform: depends on the workgroup only
    }
    let h = w.h;
    let vb = w.vb;
    let vring = w.ring;
    let s0 = w.s0;
    let s1 = w.s1;
    let part = w.part;
    let slice = lid / 32u;
    let lane = lid % 32u;
    let cg = lane & 7u;
    let tg = lane >> 3u;

    // The 4 query vectors, scaled by scale·log2(e); vectors past the call: zeros, never output.
    var live = vec4<bool>(false);
    var pv = vec4<u32>(0u);
    // @unroll 4
    for (var i = 0u; i < 4u; i++) {
        let v = vb * 4u + i;
        live[i] = v < AP.vec_total;
        pv[i] = AP.q_pos0 + min(v, AP.vec_total - 1u) / AP.qg;
    }
    for (var c = lid; c < 8u * R_CPL; c += WORKGROUP_SIZE) {
        var x = vec4<f32>(0.0);
        // @unroll 4
        for (var i = 0u; i < 4u; i++) {
            let v = vb * 4u + i;
            if (v < AP.vec_total && c < DIM) {
                let head = h * AP.qg + v % AP.qg;
                x[i] = q[((v / AP.qg) * AP.hq + head) * DIM + c] * AP.scale_log2;
            }
        }
        qs[c] = x;
    }
    v_prepare(lid, h);
    if (DEC_ONE_WG && lid == 0u) {
        dec_one_wg = 0x3f800000u;
    }
    workgroupBarrier();
    if (DEC_ONE_WG) {
        dec_one = dec_one_wg;
    }
    if (K_PREP) {
        k_prepare(lid, h);
        workgroupBarrier();
    }

    var m = vec4<f32>(NEG);
    var l = vec4<f32>(0.0);
    // The value codec's accumulator and, for a ring split of a codec in a space of its own,
    // the ring's (function variables: registers).
    var vs: VState;
    var ro: array<vec4<f32>, R_CPL>;
    v_reset(&vs);
    let ntiles = (s1 - s0 + TILE - 1u) / TILE;
    let trips = (ntiles + SLICES - 1u) / SLICES;
    for (var it = 0u; it < trips; it++) {
        // Trips past the split's tiles (only so that every slice calls the cross-lane steps
        // equally often) see no token: everything below is masked.
        let t0 = s0 + (it * SLICES + slice) * TILE;
        let lt0 = t0 + 8u * tg;
        // 1. Scores of the lane's 8 tokens: keys from the codec below qk, from the ring above
        // (a lane straddling qk computes both and picks per token).
        // Ring rows are read only for tokens in [qk, T) (clamped below T: a slot past the
        // window may hold anything; a side without a window binds a placeholder).
        // A token group wholly past the split (a trip past its tiles) reads nothing: its rows
        // may lie past the segment's buffer (the next segment's tokens are below qk too).
        var acc: array<vec4<f32>, 8>;
        let past = lt0 >= s1;
        let nk = select(u32(clamp(i32(AP.qk) - i32(lt0), 0, 8)), 0u, past);
        if (nk > 0u) {
            acc = k_score(lt0 - AP.tok0, AP.qk - 1u - AP.tok0, cg, h);
        }
        if (RING && !past && nk < 8u && lt0 + nk < AP.t_total) {
            // Row by row into acc (a second array of 8 scores would cost 32 registers).
            let last = AP.t_total - 1u;
            if (DEC_ROLLED) {
                for (var j = 0u; j < 8u; j++) {
                    let w = (clamp(lt0 + j, AP.qk, last) % AP.ring_cap_k) * AP.row_words;
                    let d = select(acc[0], f16_dot(false, w, cg, h), j >= nk);
                    acc = array<vec4<f32>, 8>(acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7], d);
                }
            } else {
                // @unroll 8
                for (var j = 0u; j < 8u; j++) {
                    let w = (clamp(lt0 + j, AP.qk, last) % AP.ring_cap_k) * AP.row_words;
                    acc[j] = select(acc[j], f16_dot(false, w, cg, h), j >= nk);
                }
            }
        }
        let sc = rs_cg(acc, lid, sgl);
        // 2. Masks: lane holds token t0 + lane.
        let pos = t0 + lane;
        let kp = key_pos(pos, h);
        var vis = vec4<bool>(false);
        // @unroll 4
        for (var i = 0u; i < 4u; i++) {
            vis[i] = live[i] && pos < s1 && visible(kp, pv[i]);
        }
        let s = select(vec4<f32>(NEG), sc, vis);
        // 3. Online softmax (base 2) against the reference max m (slice_ref_max: it moves only
        // when a score passes it by more than DEC_TAU); l is per lane, reduced once at the end.
        var m_new = m;
        if (DEC_EXACT_MAX) {
            m_new = max(m, slice_max(s, lid, sgl));
        } else {
            m_new = slice_ref_max(s, m, lid, sgl);
        }
        let p = select(vec4<f32>(0.0), exp2(s - m_new), vis);
        if (any(m_new != m)) { // uniform per slice: m and m_new are the slice's
            let corr = exp2(m - m_new);
            l *= corr;
            if (vring && !V_SPACE_OUT) {
                // @unroll 32
                for (var i = 0u; i < R_CPL; i++) {
                    ro[i] *= corr;
                }
            } else {
                v_scale(&vs, corr);
            }
        }
        l += p;
        m = m_new;
        // 4. Values: each lane gets the weights of its 8 tokens. Values from the codec below
        // qv, from the ring above: a ring split (a codec whose space is not the output space:
        // splits are cut at qv), or per lane (a lane's weights gathered twice, masked to each
        // side: two arrays of 8 weights alive at once would cost 32 more registers).
        let nv = u32(clamp(i32(AP.qv) - i32(lt0), 0, 8));
        if (RING && vring) {
            let rows = ring_rows(lt0, AP.qv, s1 - 1u, AP.ring_cap_v);
            ring_accum(&vs, &ro, rows, cg, h, gather8(p, lid, sgl));
        } else if (!V_SPACE_OUT) {
            v_accum(&vs, lt0 - AP.tok0, min(s1, AP.qv) - 1u - AP.tok0, cg, h, gather8(p, lid, sgl));
        } else {
            // Uniform per slice: every lane's token pos against qv (gather8 is a cross-lane step).
            let below = pos < AP.qv;
            let pc = gather8(select(vec4<f32>(0.0), p, below), lid, sgl);
            if (nv > 0u) {
                v_accum(&vs, lt0 - AP.tok0, min(s1, AP.qv) - 1u - AP.tok0, cg, h, pc);
            }
            if (RING && AP.qv < s1) { // uniform: a cross-lane step follows
                let pr = gather8(select(p, vec4<f32>(0.0), below), lid, sgl);
                // Only rows of ring tokens [qv, s1) are read (another slot may hold anything).
                if (lt0 + nv < s1) {
                    let rows = ring_rows(lt0, AP.qv, s1 - 1u, AP.ring_cap_v);
                    ring_accum(&vs, &ro, rows, cg, h, pr);
                }
            }
        }
    }

    // 5. The slices' (m, l, o) merged through workgroup memory. Where a slice is one subgroup
    // (TG_SHUFFLE), all at once: m is the same in all lanes of a slice, its 4 token groups'
    // accumulators are summed by shuffles (tg_sum) and every slice writes its sums, unscaled, to
    // a region of its own, lane (cg, tg) the channels i ≡ tg (mod 4) of its eighth; after one
    // barrier invocation c adds channel c of every region, scaled by 2^(m_s − M), in slice
    // order, into region 0 (only it reads that word: no barrier after). Otherwise in turns, one
    // per token group of each slice.
    l = slice_sum(l, lid, sgl);
    if (lane == 0u) {
        msm[slice] = m;
        lsm[slice] = l;
    }
    let width = select(V_W, DIM, vring);
    let wide = max(V_W, DIM);
    if (TG_SHUFFLE) {
        if (vring && !V_SPACE_OUT) {
            // @unroll 32
            for (var i = 0u; i < R_CPL; i++) {
                let x = tg_sum(ro[i]);
                let c = cg * R_CPL + i;
                if (i % 4u == tg && c < DIM) {
                    wsm[slice * wide + c] = x;
                }
            }
        } else {
            // @unroll 32
            for (var i = 0u; i < V_CPL; i++) {
                let x = tg_sum(v_out(&vs, i));
                let c = cg * V_CPL + i;
                if (i % 4u == tg && c < V_W) {
                    wsm[slice * wide + c] = x;
                }
            }
        }
    } else {
        for (var c = lid; c < wide; c += WORKGROUP_SIZE) {
            wsm[c] = vec4<f32>(0.0);
        }
    }
    workgroupBarrier();
    var mm = msm[0];
    for (var s = 1u; s < SLICES; s++) {
        mm = max(mm, msm[s]);
    }
    var ll = vec4<f32>(0.0);
    for (var s = 0u; s < SLICES; s++) {
        ll += lsm[s] * exp2(msm[s] - mm);
    }
    if (TG_SHUFFLE) {
        for (var c = lid; c < width; c += WORKGROUP_SIZE) {
            var o = vec4<f32>(0.0);
            for (var s = 0u; s < SLICES; s++) {
                o += wsm[s * wide + c] * exp2(msm[s] - mm);
            }
            wsm[c] = o;
        }
    }
    let f = exp2(m - mm);
    for (var turn = 0u; turn < select(4u * SLICES, 0u, TG_SHUFFLE); turn++) {
        if (turn == slice * 4u + tg) {
            if (vring && !V_SPACE_OUT) {
                // @unroll 32
                for (var i = 0u; i < R_CPL; i++) {
                    let c = cg * R_CPL + i;
                    if (c < DIM) {
                        wsm[c] += ro[i] * f;
                    }
                }
            } else {
                // @unroll 32
                for (var i = 0u; i < V_CPL; i++) {
                    let c = cg * V_CPL + i;
                    if (c < V_W) {
                        wsm[c] += v_out(&vs, i) * f;
                    }
                }
            }
        }
        workgroupBarrier();
    }

    // 6. One vector's output directly (a single split: no merge), or the partial records.
    if (AP.direct == 1u) {
        // @unroll 4
        for (var i = 0u; i < 4u; i++) {
            let v = vb * 4u + i;
            let inv = select(0.0, 1.0 / ll[i], ll[i] > 0.0);
            for (var c = lid; c < width; c += WORKGROUP_SIZE) {
                fin[c] = wsm[c][i] * inv;
            }
            workgroupBarrier();
            if (!vring) {
                v_finish(lid, h);
            }
            if (v < AP.vec_total) {
                let o = ((v / AP.qg) * AP.hq + h * AP.qg + v % AP.qg) * DIM;
                for (var c = lid; c < DIM; c += WORKGROUP_SIZE) {
                    partials[o + c] = fin[c];
                }
            }
            workgroupBarrier();
        }
        return;
    }
    // @unroll 4
    for (var i = 0u; i < 4u; i++) {
        let v = vb * 4u + i;
        if (v < AP.vec_total) {
            let b = ((h * AP.vec_total + v) * AP.n_parts + part) * PW;
            if (lid == 0u) {
                partials[b] = mm[i];
                partials[b + 1u] = ll[i];
            }
            for (var c = lid; c < width; c += WORKGROUP_SIZE) {
                partials[b + 2u + c] = wsm[c][i];
            }
        }
    }
}
