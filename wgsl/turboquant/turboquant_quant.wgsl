// turboquant_quant (workgroup-memory variant; adapters without subgroups): TurboQuant-MSE /
// -RVQ quantization, fused (../shared/spec/turboquant.md). CPU twin:
// src/cpu/turboquant/turboquant_quant.rs; MSL twin: msl/turboquant/turboquant_quant.metal
// (the same mapping); the subgroup variant: turboquant_quant_subgroup.wgsl. Bindings:
// turboquant_quant_io.wgsl.
//
// Dispatch: one workgroup of WORKGROUP_SIZE (64) invocations per (token, head pair) item,
// linear index item = token · ceil(H / 2) + pair; it quantizes head 2·pair, then head
// 2·pair + 1 (absent for an odd H: zeros, nothing stored), and writes the pair's f16 norms
// as one word. Per vector, in workgroup memory (the vector is P floats; invocation lid owns
// coordinates lid, lid + 64, ...: any P works, several coordinates per invocation):
//   1. load x (f16 → f32, zero past D); invocation 0 sums x_i² in index order (the CPU
//      reference's order: the norm is bit-exact) and takes the square root;
//   2. u = x / n (x when n = 0), signs first: u_i·s_i;
//   3. log2(P) butterfly passes at strides 1, 2, ..., P/2: each pass reads both partners,
//      a barrier, then writes (a + b for the lower index, a − b for the upper), a barrier;
//   4. × c, the stage-1 code by binary search of the boundaries; RVQ: the stage-2 code of
//      y − ĉ₁; codes to workgroup memory, a barrier;
//   5. the packed rows: invocation lid assembles words lid, lid + 64, ... and stores them.
// Every barrier is in uniform control flow (the item is the workgroup's).

const WPL: u32 = (TP + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE; // coordinates per invocation

var<workgroup> tq_x: array<f32, TP>;
var<workgroup> tq_c: array<u32, TP * TS>;
var<workgroup> tq_n: f32;

fn tq_codes_at(i: u32) -> u32 {
    return tq_c[i];
}

// Multiplies the invocation's coordinates of the vector by head h's signs.
fn tq_signs_shared(h: u32, lid: u32) {
    // @unroll 16
    for (var k = 0u; k < WPL; k++) {
        let e = lid + k * WORKGROUP_SIZE;
        if (e < TP) {
            tq_x[e] = tq_flip(tq_x[e], h, e);
        }
    }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let item = linear_workgroup(wg, nwg);
    if (item >= P.items) {
        return; // uniform: depends on the workgroup only
    }
    let tok = item / P.norm_words;
    let pair = item % P.norm_words;
    let s = P.src_start + tok;
    tq_load_codebook(lid);
    var nn = vec2<f32>(0.0);
    for (var v = 0u; v < 2u; v++) {
        let h = 2u * pair + v;
        let live = h < P.heads;
        let hs = min(h, P.heads - 1u);
        // 1. Load, norm.
        // @unroll 16
        for (var k = 0u; k < WPL; k++) {
            let e = lid + k * WORKGROUP_SIZE;
            if (e < TP) {
                var x = 0.0;
                if (live && e < P.dim) {
                    x = tq_load(s, h * P.dim + e);
                }
                tq_x[e] = x;
            }
        }
        workgroupBarrier();
        if (lid == 0u) {
            var ss = 0.0;
            for (var i = 0u; i < P.dim; i++) {
                let x = tq_x[i];
                ss += x * x;
            }
            tq_n = sqrt(ss);
        }
        workgroupBarrier();
        let n = tq_n;
        // 2. Normalize (each invocation its own coordinates), signs first.
        // @unroll 16
        for (var k = 0u; k < WPL; k++) {
            let e = lid + k * WORKGROUP_SIZE;
            if (e < TP && n != 0.0) {
                tq_x[e] = tq_x[e] / n;
            }
        }
        tq_signs_shared(hs, lid); // @tq-signs-before
        workgroupBarrier();
        // 3. Butterflies.
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
            workgroupBarrier(); // @tq-reads-before-writes
            // @unroll 16
            for (var k = 0u; k < WPL; k++) {
                let e = lid + k * WORKGROUP_SIZE;
                if (e < TP) {
                    tq_x[e] = select(a[k] + b[k], b[k] - a[k], (e & hh) != 0u);
                }
            }
            workgroupBarrier();
        }
        // @tq-signs-after
        // 4. Scale, codes.
        // @unroll 16
        for (var k = 0u; k < WPL; k++) {
            let e = lid + k * WORKGROUP_SIZE;
            if (e < TP) {
                let y = tq_x[e] * P.inv_sqrt_p;
                let c1 = tq_code(y, 0u);
                tq_c[e] = c1;
                if (TS == 2u) {
                    tq_c[min(TP + e, TP * TS - 1u)] = tq_code(y - tq_centroid(c1, 0u), 1u);
                }
            }
        }
        workgroupBarrier();
        // 5. Packed rows.
        let row0 = ((P.seg_token + tok) * P.heads + hs) * TS * TRW;
        for (var w = lid; w < TS * TRW; w += WORKGROUP_SIZE) {
            let st = w / TRW;
            let word = tq_row_word(w - st * TRW, st, 0u);
            if (live) {
                codes[row0 + w] = word;
            }
        }
        nn[v] = n;
        workgroupBarrier(); // the next vector reuses tq_x and tq_c
    }
    if (lid == 0u) {
        norms[(P.seg_token + tok) * P.norm_words + pair] =
            tq_f16_bits(nn.x) | (tq_f16_bits(nn.y) << 16u);
    }
}
