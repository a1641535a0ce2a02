// One vector in workgroup memory, the steps the workgroup-memory kernels share
// (turboquant_quant.wgsl, the workgroup variant; turboquant_prod_quant, both variants):
// invocation lid owns coordinates lid, lid + 64, ... (WPL of them: any P works). Every
// function holding a barrier is called in uniform control flow. Needs turboquant_common.wgsl
// and turboquant_quant_io.wgsl (tq_load).

const WPL: u32 = (TP + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE; // coordinates per invocation

var<workgroup> tq_x: array<f32, TP>;
var<workgroup> tq_c: array<u32, TP * TS>;
var<workgroup> tq_n: f32;

fn tq_codes_at(i: u32) -> u32 {
    return tq_c[i];
}

// Head h's vector of absolute token s into tq_x (f16 → f32, zeros past D and for an absent
// head), a barrier, then invocation 0's norm of it (sum of squares in index order, the CPU
// reference's order: bit-exact), a barrier; returns the norm.
fn tq_load_norm_shared(s: u32, h: u32, live: bool, lid: u32) -> f32 {
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
    return tq_norm_shared(P.dim, lid);
}

// ‖tq_x[0 .. len)‖₂ by invocation 0 in index order (barriers before and after).
fn tq_norm_shared(len: u32, lid: u32) -> f32 {
    workgroupBarrier();
    if (lid == 0u) {
        var ss = 0.0;
        for (var i = 0u; i < len; i++) {
            let x = tq_x[i];
            ss += x * x;
        }
        tq_n = sqrt(ss);
    }
    workgroupBarrier();
    return tq_n;
}

// u = x / n on the invocation's coordinates (x itself when n = 0).
fn tq_normalize_shared(n: f32, lid: u32) {
    // @unroll 16
    for (var k = 0u; k < WPL; k++) {
        let e = lid + k * WORKGROUP_SIZE;
        if (e < TP && n != 0.0) {
            tq_x[e] = tq_x[e] / n;
        }
    }
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

// log2(P) butterfly passes on tq_x at strides 1, 2, ..., P/2 (no scale): each pass reads both
// partners, a barrier, then writes (a + b for the lower index, a − b for the upper), a
// barrier. A barrier must precede the call (the invocations' last writes of tq_x).
fn tq_butterflies_shared(lid: u32) {
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
}

// y = tq_x · c, its stage codes into tq_c (RVQ: the stage-2 code of y − ĉ₁), a barrier.
fn tq_codes_shared(lid: u32) {
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
}

// The packed rows of tq_c from word `row0` of `codes`: invocation lid assembles words lid,
// lid + 64, ... (stored only for a live head).
fn tq_store_rows_shared(row0: u32, live: bool, lid: u32) {
    for (var w = lid; w < TS * TRW; w += WORKGROUP_SIZE) {
        let st = w / TRW;
        let word = tq_row_word(w - st * TRW, st, 0u);
        if (live) {
            codes[row0 + w] = word;
        }
    }
}
