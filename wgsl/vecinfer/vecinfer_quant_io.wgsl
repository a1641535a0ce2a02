// vecinfer_quant's declarations shared by its two WGSL variants (../shared/spec/vecinfer.md,
// "Transform" and "Quantize"): the uniform, the bindings, the workgroup memory, the input
// reader, the transform, one lane's share of an argmin and the packed stores. CPU twin:
// src/cpu/vecinfer/vecinfer_quant.rs; MSL twin: msl/vecinfer/vecinfer_quant.metal.
//
// Dispatch: one workgroup of WORKGROUP_SIZE (64) per item = token block · H + head; a block
// is VI_TPW consecutive tokens of one head, so the head's codebook [C][d_s] is loaded into
// workgroup memory once per block. Per token of the block:
//   1. the vector (f16 → f32; keys: ÷ λ_i, i < D) zero-padded to P into vx;
//   2. log2 P butterfly passes over vx (strides 1, 2, … P/2), one barrier each: exactly the
//      reference's (a, b) → (a + b, a − b) pairs, so the result is the same f32 values;
//   3. argmin: groups of VI_GL (8) lanes, one sub-vector per group per round; a pass takes
//      VI_RT rounds at once: lane l of a group holds the pass's VI_RT sub-vectors in registers
//      and scans centroids l, l + 8, … (ascending, strict <: the lower index wins a tie),
//      reading each centroid from workgroup memory once for all of them (the loads, not the
//      multiply-adds, bounded the one-round form); x_i = vx[s·d_s + i]·c computed as the
//      reference does, distance Σ (x_i − cb_i)² in index order; per round, the group's 8
//      candidates reduced by (distance, index) order, lane 0 writing the index to vidx;
//   4. the row's words assembled from vidx (bitpack.md, LSB-first, codes may straddle words)
//      and stored.
// Extra memory: none outside workgroup memory (codebook, one vector, its indices): O(N)
// for N tokens, the codes themselves.
// Specialization: VI_P (P), VI_DS (d_s), VI_C (C), VI_BITS (log2 C), VI_KEYS (1 keys, 0
// values).
//
// Bindings: 0 P; 1 ring [ring_tokens][in_row_words]; 2 incoming [n][in_row_words];
// 3 codes [tokens][H][row_words] (segment); 4 tables: keys λ [H][D] then the codebooks
// [H][C][d_s] (f32 bits, from word cb_offset), values the codebooks only.

// Keep in sync with ViParams in src/codecs/vecinfer/plans.rs and
// msl/vecinfer/vecinfer_quant.metal.
struct ViParams {
    heads: u32,
    dim: u32,
    count: u32,
    src_start: u32,
    t_old: u32,
    inc_start: u32,
    ring_tokens: u32,
    seg_token: u32,
    in_row_words: u32,
    row_words: u32,
    items: u32,
    cb_offset: u32,
    inv_sqrt_p: f32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
}

@group(0) @binding(0) var<uniform> P: ViParams;
@group(0) @binding(1) var<storage, read> ring: array<u32>;
@group(0) @binding(2) var<storage, read> incoming: array<u32>;
@group(0) @binding(3) var<storage, read_write> codes: array<u32>;
@group(0) @binding(4) var<storage, read> tables: array<u32>;

const VP: u32 = VI_P;
const VDS: u32 = VI_DS;
const VC: u32 = VI_C;
const VB: u32 = VI_BITS;
const VNS: u32 = VI_P / VI_DS;                 // n_sub
const VRW: u32 = (VNS * VI_BITS + 31u) / 32u; // words per row
const VI_GL: u32 = 8u;                         // lanes per sub-vector
const VI_GROUPS: u32 = WORKGROUP_SIZE / VI_GL;
const VI_ROUNDS: u32 = (VNS + VI_GROUPS - 1u) / VI_GROUPS;
const VI_RT: u32 = min(VI_ROUNDS, 4u);         // rounds per pass (divides VI_ROUNDS: powers of 2)
const VI_PASSES: u32 = VI_ROUNDS / VI_RT;
const VI_X: u32 = VI_RT * VI_DS;               // sub-vector coordinates a lane holds

var<workgroup> vcb: array<f32, VI_C * VI_DS>;
var<workgroup> vx: array<f32, VI_P>;
var<workgroup> vidx: array<u32, VNS>;

// Element e of absolute token s's f16 row (the ring or the incoming rows).
fn vi_input(s: u32, e: u32) -> f32 {
    var w: u32;
    if (s < P.t_old) {
        w = ring[(s % P.ring_tokens) * P.in_row_words + (e >> 1u)];
    } else {
        w = incoming[(s - P.inc_start) * P.in_row_words + (e >> 1u)];
    }
    return unpack2x16float(w)[e & 1u];
}

// Head h's codebook into vcb.
fn vi_load_codebook(h: u32, lid: u32) {
    let base = P.cb_offset + h * VC * VDS;
    for (var i = lid; i < VC * VDS; i += WORKGROUP_SIZE) {
        vcb[i] = bitcast<f32>(tables[base + i]);
    }
}

// Steps 1 and 2: token s's vector of head h, transformed, in vx (before the × c).
fn vi_transform(s: u32, h: u32, lid: u32) {
    for (var e = lid; e < VP; e += WORKGROUP_SIZE) {
        var x = 0.0;
        if (e < P.dim) {
            x = vi_input(s, h * P.dim + e);
            if (VI_KEYS == 1u) {
                x = x / bitcast<f32>(tables[h * P.dim + e]); // @vi-lambda
            }
        }
        vx[e] = x;
    }
    workgroupBarrier();
    for (var st = 1u; st < VP; st <<= 1u) {
        for (var q = lid; q < VP / 2u; q += WORKGROUP_SIZE) {
            let i = ((q / st) * 2u * st) + (q % st);
            let a = vx[i];
            let b = vx[i + st];
            vx[i] = a + b;
            vx[i + st] = a - b;
        }
        workgroupBarrier();
    }
}

// Step 3, one lane, one pass: for the sub-vectors of rounds ps·VI_RT … (clamped to the last
// sub-vector past n_sub), the best (distance, index) of centroids lane_g, lane_g + 8, …, each
// centroid read once for all of them. (Not named `gl`: naga's GLSL writer renames it `gl_1`,
// a reserved prefix.)
fn vi_lane_mins(ps: u32, grp: u32, lane_g: u32) -> array<vec2<u32>, VI_RT> {
    var x: array<f32, VI_X>;
    // @unroll 4
    for (var r = 0u; r < VI_RT; r++) {
        let sv = min((ps * VI_RT + r) * VI_GROUPS + grp, VNS - 1u);
        // @unroll 1024
        for (var i = 0u; i < VDS; i++) {
            x[r * VDS + i] = vx[sv * VDS + i] * P.inv_sqrt_p;
        }
    }
    var best: array<f32, VI_RT>;
    var arg: array<u32, VI_RT>;
    // @unroll 4
    for (var r = 0u; r < VI_RT; r++) {
        best[r] = bitcast<f32>(0x7f800000u); // +inf
        arg[r] = 0u;
    }
    for (var c = lane_g; c < VC; c += VI_GL) {
        var cb: array<f32, VI_DS>;
        // @unroll 1024
        for (var i = 0u; i < VDS; i++) {
            cb[i] = vcb[c * VDS + i];
        }
        // @unroll 4
        for (var r = 0u; r < VI_RT; r++) {
            var d = 0.0;
            // @unroll 1024
            for (var i = 0u; i < VDS; i++) {
                let e = x[r * VDS + i] - cb[i];
                d += e * e;
            }
            if (d < best[r]) { // @vi-tie
                best[r] = d;
                arg[r] = c;
            }
        }
    }
    var out: array<vec2<u32>, VI_RT>;
    // @unroll 4
    for (var r = 0u; r < VI_RT; r++) {
        out[r] = vec2<u32>(bitcast<u32>(best[r]), arg[r]);
    }
    return out;
}

// (da, ia) beats (db, ib): a smaller distance, or the same with a lower index.
fn vi_better(da: f32, ia: u32, db: f32, ib: u32) -> bool {
    return da < db || (da == db && ia < ib);
}

// Step 4: word w of the row from vidx.
fn vi_row_word(w: u32) -> u32 {
    var out = 0u;
    let lo = 32u * w;
    let first = lo / VB;
    let last = min((lo + 31u) / VB, VNS - 1u);
    for (var i = first; i <= last; i++) {
        let at = i * VB;
        let c = vidx[min(i, VNS - 1u)];
        if (at >= lo) {
            out |= c << (at - lo);
        } else {
            out |= c >> (lo - at);
        }
    }
    return out;
}

// Step 4: the row of (segment) token `row`, head h (after a barrier).
fn vi_store(row: u32, h: u32, lid: u32) {
    for (var w = lid; w < VRW; w += WORKGROUP_SIZE) {
        codes[(row * P.heads + h) * VRW + w] = vi_row_word(w);
    }
}
