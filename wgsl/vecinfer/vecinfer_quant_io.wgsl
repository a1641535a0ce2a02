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
//   3. argmin: groups of VI_GL (8) lanes, one sub-vector per group per round; lane l of a
//      group scans centroids l, l + 8, … (ascending, strict <: the lower index wins a tie),
//      x_i = vx[s·d_s + i]·c computed as the reference does, distance Σ (x_i − cb_i)² in index
//      order; the group's 8 candidates reduced by (distance, index) order (the variants'
//      vi_group_min), lane 0 writing the index to vidx;
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

// Step 3, one lane: the best (distance, index) of centroids lane_g, lane_g + 8, … for
// sub-vector sv. (Not named `gl`: naga's GLSL writer renames it `gl_1`, a reserved prefix.)
fn vi_lane_min(sv: u32, lane_g: u32) -> vec2<u32> {
    var x: array<f32, VI_DS>;
    for (var i = 0u; i < VDS; i++) {
        x[i] = vx[sv * VDS + i] * P.inv_sqrt_p;
    }
    var best = bitcast<f32>(0x7f800000u); // +inf
    var arg = 0u;
    for (var c = lane_g; c < VC; c += VI_GL) {
        var d = 0.0;
        for (var i = 0u; i < VDS; i++) {
            let e = x[i] - vcb[c * VDS + i];
            d += e * e;
        }
        if (d < best) { // @vi-tie
            best = d;
            arg = c;
        }
    }
    return vec2<u32>(bitcast<u32>(best), arg);
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
