// turboquant_dequant: the reconstruction x̂ = n_st · inverse-rotate(ŷ) of stored TurboQuant
// vectors (../shared/spec/turboquant.md, "TurboQuant-MSE"; RVQ: ŷ = ŷ₁ + ê₂ in f32), for tools
// and tests (attention never reconstructs). CPU twin: src/cpu/turboquant/turboquant_dequant.rs;
// MSL twin: msl/turboquant/turboquant_dequant.metal. One WGSL source for both paths.
//
// @binding(0) P:      TqParams (uniform)
// @binding(1) codes:  array<u32> [tokens][H][S][row_words]   a segment's codes stream
// @binding(2) norms:  array<u32> [tokens][ceil(H / 2)]       its norms stream
// @binding(3) tables: array<u32>                             signs and codebooks
// @binding(4) out:    array<f32> [count][H][D]               tokens seg_token .. seg_token + count
//
// Dispatch: one workgroup per (token, head), linear index token · H + head. Invocation lid owns
// coordinates lid, lid + 64, ... of the vector in workgroup memory: ŷ from the codes, log2(P)
// butterfly passes (each reads both partners, a barrier, writes, a barrier), then, in the
// spec's order with every product rounded, × c, × s_i, × n_st; the first D coordinates.

@group(0) @binding(0) var<uniform> P: TqParams;
@group(0) @binding(1) var<storage, read> codes: array<u32>;
@group(0) @binding(2) var<storage, read> norms: array<u32>;
@group(0) @binding(3) var<storage, read> tables: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

const WPL: u32 = (TP + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE; // coordinates per invocation

var<workgroup> tq_x: array<f32, TP>;

// Code i of the row starting at word `base` (codes may straddle words).
fn tq_stored_code(base: u32, i: u32) -> u32 {
    let at = i * TB;
    let w = base + (at >> 5u);
    let off = at & 31u;
    var hi = 0u;
    if (off + TB > 32u) {
        hi = codes[w + 1u];
    }
    return bits_code(codes[w], hi, off, TB);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let item = linear_workgroup(wg, nwg);
    if (item >= P.items) {
        return; // uniform
    }
    let tok = item / P.heads;
    let h = item % P.heads;
    let t = P.seg_token + tok;
    tq_load_codebook(lid);
    workgroupBarrier();
    let row0 = (t * P.heads + h) * TS * TRW;
    // @unroll 16
    for (var k = 0u; k < WPL; k++) {
        let e = lid + k * WORKGROUP_SIZE;
        if (e < TP) {
            var y = tq_centroid(tq_stored_code(row0, e), 0u);
            if (TS == 2u) {
                y += tq_centroid(tq_stored_code(row0 + TRW, e), 1u);
            }
            tq_x[e] = y;
        }
    }
    workgroupBarrier();
    for (var p = 0u; p < TQ_LOG2P; p++) {
        let hh = 1u << p;
        var a: array<f32, WPL>;
        var b: array<f32, WPL>;
        // @unroll 16
        for (var k = 0u; k < WPL; k++) {
            let e = min(lid + k * WORKGROUP_SIZE, TP - 1u);
            a[k] = tq_x[e];
            b[k] = tq_x[e ^ hh];
        }
        workgroupBarrier();
        // @unroll 16
        for (var k = 0u; k < WPL; k++) {
            let e = lid + k * WORKGROUP_SIZE;
            if (e < TP) {
                tq_x[e] = select(a[k] + b[k], b[k] - a[k], (e & hh) != 0u);
            }
        }
        workgroupBarrier();
    }
    let nw = norms[t * P.norm_words + h / 2u];
    let n = unpack2x16float(nw)[h & 1u];
    // @unroll 16
    for (var k = 0u; k < WPL; k++) {
        let e = lid + k * WORKGROUP_SIZE;
        if (e < P.dim) {
            out[item * P.dim + e] = tq_flip(tq_x[e] * P.inv_sqrt_p, h, e) * n;
        }
    }
}
