// Attention over a compressed cache, shared core (../shared/spec/attention.md).
// A codec file (wgsl/attend/attend_{kivi,f16}.wgsl) defines its bindings (3..) and
//   fn codec_key(pos: u32, h: u32, d: u32) -> f32     // k̂ of absolute token pos, KV head h
//   fn codec_value(pos: u32, h: u32, d: u32) -> f32   // v̂ likewise
//   const CODEC_STAGES: bool; fn codec_stage(t0, n, h, lid)  // optional tile staging: when
//       true, called by every invocation before a tile's scores, between barriers; pos is
//       then always inside [t0, t0 + n)
// reconstructing in registers from its stored form. The entry point (wgsl/attend/attend_{workgroup,subgroup}.wgsl)
// provides `slice_max` / `slice_sum` (subgroup or workgroup-memory reductions over a slice of
// 32 invocations) and calls `attend_main`.
//
// @binding(0) A:        AttendParams (uniform)            keep in sync with src/attention/gpu.rs
// @binding(1) q:        array<f32> [Tq][Hq][D]
// @binding(2) partials: array<f32> [Tq][Hq][nc_total][D + 2]   (m, l, acc[D]) per chunk
//
// Dispatch: one workgroup of 128 (4 slices of 32) per (block of ATT_ROWS query rows b, KV
// head h, chunk c), linear index (b * Hkv + h) * n_chunks + c; the block's query vectors are
// its rows × the Hq/Hkv query heads of h (QV = ATT_ROWS · ATT_QG of them, vector v = row
// v / QG, head v % QG), and all of them share every key and value the workgroup loads
// (decode: one row; a prefill chunk: several rows, so the cache is read Tq / ATT_ROWS times,
// not Tq times). A chunk is `chunk_tokens` consecutive positions of this dispatch's region
// [region_start, region_end); tiles of 32 tokens: scores (4 slices split D), online softmax
// per query vector (slice = vector, four at a time), value accumulation (one invocation per
// channel).


@group(0) @binding(0) var<uniform> A: AttendParams;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read_write> partials: array<f32>;

const TILE: u32 = 32u;
// Finite "minus infinity": exp(NEG - m) is 0, and NEG * log2(e) stays finite, so an exp
// computed as exp2(x * log2 e) under fast math cannot overflow to -inf.
const NEG: f32 = -1.0e30;

// Sized by the specialization (src/attention/gpu.rs keeps the total within the device's
// workgroup storage limit when it picks ATT_ROWS).
var<workgroup> qsh: array<f32, QV * DIM>;      // [QV][D] scaled queries
var<workgroup> red: array<f32, QV * 4u * TILE>; // [QV][4][TILE] partial dots
var<workgroup> psh: array<f32, QV * TILE>;     // [QV][TILE] softmax weights of the tile
var<workgroup> m_run: array<f32, QV>;
var<workgroup> l_run: array<f32, QV>;
var<workgroup> corr_sh: array<f32, QV>;
var<workgroup> scratch: array<f32, 128>;       // slice reductions

fn is_visible(pos: u32, p: u32) -> bool {
    if (pos > p || pos >= A.region_end) {
        return false;
    }
    if (A.window == 0u) {
        return true;
    }
    return pos + A.window > p || pos < A.sinks;
}

// Specialized per cache (fixed for its life, never on T): ATT_DIM = D, ATT_QG = Hq / Hkv;
// per call shape: ATT_ROWS, query rows per workgroup (1 for decode; a power of two <= Tq,
// from a small fixed set, for prefill chunks). Constant trip counts let the compiler unroll
// the loops below, keep `dots`/`acc` in registers and issue a tile's loads together instead
// of one dependent load at a time.
const DIM: u32 = ATT_DIM;
const QG: u32 = ATT_QG;
const ROWS: u32 = ATT_ROWS;
const QV: u32 = ATT_QG * ATT_ROWS;
const PART: u32 = (DIM + 3u) / 4u;      // channels per slice in the score phase
const DK: u32 = (DIM + 127u) / 128u;    // channels per invocation in the value phase

fn attend_main(lid: u32, wid: u32) {
    let per_block = A.hkv * A.n_chunks;
    if (wid >= ((A.tq + ROWS - 1u) / ROWS) * per_block) {
        return; // uniform: depends on the workgroup only
    }
    let c = wid % A.n_chunks;
    let h = (wid / A.n_chunks) % A.hkv;
    let i0 = (wid / per_block) * ROWS;
    let rows = min(ROWS, A.tq - i0);
    // Positions of the block's first and last query rows.
    let p_first = A.q_pos0 + i0;
    let p_last = p_first + rows - 1u;
    let slice = lid / 32u;
    let lane = lid % 32u;

    // Query vectors of the block, scaled once (vectors of rows past Tq: zeros, never output).
    for (var x = lid; x < QV * DIM; x += 128u) {
        let v = x / DIM;
        let dd = x % DIM;
        let r = v / QG;
        var qv = 0.0;
        if (r < rows) {
            qv = q[((i0 + r) * A.hq + h * QG + v % QG) * DIM + dd] * A.scale;
        }
        qsh[v * DIM + dd] = qv;
    }
    for (var x = lid; x < QV; x += 128u) {
        m_run[x] = NEG;
        l_run[x] = 0.0;
    }
    var acc: array<f32, QV * DK>;
    for (var x = 0u; x < QV * DK; x++) {
        acc[x] = 0.0;
    }
    workgroupBarrier();

    let c_start = A.region_start + c * A.chunk_tokens;
    let c_end = min(c_start + A.chunk_tokens, A.region_end);
    for (var t0 = c_start; t0 < c_end; t0 += TILE) {
        // Skip tiles no query row of the block can see (uniform per workgroup).
        let t_last = min(t0 + TILE, c_end) - 1u;
        var seen = t0 <= p_last;
        if (A.window != 0u) {
            seen = seen && (t_last + A.window > p_first || t0 < A.sinks);
        }
        if (!seen) {
            continue;
        }
        // 0. A staging codec copies the tile's packed words into workgroup memory (after every
        // invocation has finished reading the previous tile's).
        if (CODEC_STAGES) {
            workgroupBarrier();
            codec_stage(t0, t_last + 1u - t0, h, lid);
            workgroupBarrier();
        }
        // 1. Scores: invocation (slice, lane) = (quarter of D, token t0 + lane). All of a lane's
        // key loads are issued first, unconditionally (indices clamped into range, invisible
        // tokens masked afterwards), so they are in flight together: a branch around each load
        // would serialize them on the memory latency.
        let pos = t0 + lane;
        let pos_c = min(pos, c_end - 1u);
        let d0 = slice * PART;
        var ks: array<f32, PART>;
        for (var x = 0u; x < PART; x++) {
            ks[x] = codec_key(pos_c, h, min(d0 + x, DIM - 1u));
        }
        var dots: array<f32, QV>;
        for (var g = 0u; g < QV; g++) {
            var acc_g = 0.0;
            for (var x = 0u; x < PART; x++) {
                if (d0 + x < DIM) {
                    acc_g += qsh[g * DIM + d0 + x] * ks[x];
                }
            }
            dots[g] = acc_g;
        }
        for (var g = 0u; g < QV; g++) {
            red[(g * 4u + slice) * TILE + lane] = dots[g];
        }
        workgroupBarrier();
        // 2. Online softmax: slice = query vector (four at a time), lane = token.
        for (var g0 = 0u; g0 < QV; g0 += 4u) {
            let g = g0 + slice;
            let live = g < QV && g / QG < rows;
            let vis = pos < c_end && is_visible(pos, p_first + g / QG);
            var s = NEG;
            if (live && vis) {
                let b = g * 4u * TILE + lane;
                s = red[b] + red[b + TILE] + red[b + 2u * TILE] + red[b + 3u * TILE];
            }
            var m_old = NEG;
            if (live) {
                m_old = m_run[g];
            }
            let m_tile = slice_max(s, lid);
            let m_new = max(m_old, m_tile);
            var w = 0.0;
            if (live && vis) {
                w = exp(s - m_new);
            }
            // (the reductions' own barriers order every lane's read of m_run before lane 0's
            // update below)
            let l_tile = slice_sum(w, lid);
            if (live) {
                psh[g * TILE + lane] = w;
                if (lane == 0u) {
                    let corr = exp(m_old - m_new);
                    corr_sh[g] = corr;
                    l_run[g] = l_run[g] * corr + l_tile;
                    m_run[g] = m_new;
                }
            }
        }
        workgroupBarrier();
        // 3. Values: invocation = channel(s); every token of the tile, every query head. The
        // tile's value loads are issued first (tokens past the chunk clamped; their weights
        // are 0).
        let last = c_end - 1u;
        for (var k = 0u; k < DK; k++) {
            let dd = lid + 128u * k;
            let dd_c = min(dd, DIM - 1u);
            var vs: array<f32, TILE>;
            for (var j = 0u; j < TILE; j++) {
                vs[j] = codec_value(min(t0 + j, last), h, dd_c);
            }
            for (var g = 0u; g < QV; g++) {
                var a = acc[g * DK + k] * corr_sh[g];
                for (var j = 0u; j < TILE; j++) {
                    a += psh[g * TILE + j] * vs[j];
                }
                acc[g * DK + k] = a;
            }
        }
        // No barrier needed here: the next tile writes `red` only (psh and corr_sh are written
        // after its post-score barrier, when every invocation has finished this tile).
    }
    // 4. This chunk's (m, l, acc) per query vector of the block's rows.
    let stride = DIM + 2u;
    for (var g = 0u; g < rows * QG; g++) {
        let pi = (((i0 + g / QG) * A.hq + h * QG + g % QG) * A.nc_total + A.chunk_base + c) * stride;
        if (lid == 0u) {
            partials[pi] = m_run[g];
            partials[pi + 1u] = l_run[g];
        }
        for (var k = 0u; k < DK; k++) {
            let dd = lid + 128u * k;
            if (dd < DIM) {
                partials[pi + 2u + dd] = acc[g * DK + k];
            }
        }
    }
}
