enable f16;
enable wgpu_cooperative_matrix;
diagnostic(off, derivative_uniformity);
// attend_decode_tc_rows: the tensor-core decode kernel for pairs whose tile hooks are f16 rows
// on both sides (the f16 codec for keys and values, with or without a ring; KT_CODES and
// VT_CODES false, see wgsl/attend/attend_decode_tc.wgsl for the hooks). Composed like that
// kernel (after the core, its hooks and wgsl/attend/attend_tc_common.wgsl); built only where
// the adapter lists 16×16×16 f16 cooperative matrices with an f32 accumulator and subgroups
// are 32 wide, in invocation order.
//
// **Why its own kernel.** On the H200 a `coopLoad` from a storage buffer moves at most
// 1.7 TB/s, 2.3–3.4× slower than plain loads of the same bytes at the same occupancy
// (benches/coop_load.rs); the operands therefore come through workgroup memory, which takes
// plain coalesced loads and feeds the matrices at the tensor cores' rate, and the loads are
// spread over four subgroups so that a split's tile is in flight while the last one is
// multiplied.
//
// **Mapping.** A workgroup of 4 subgroups × 32 serves one KV head h, up to four query vectors
// (vb·4 ..) and one split (split_work, as the other decode kernels). Per tile of TR_TT tokens
// (32; 16 where D > 128), tiles of the split in order:
//   1. staging: the tile's key and value rows (u32 words of two f16, token-major), loaded by
//      all 128 invocations one tile ahead (the next tile's loads are issued before this
//      tile's products) and stored into workgroup memory as f16; past the split's end the
//      split's last row again (weightless), past D zero.
//   2. S (16 × TR_TT) = Q″_hi·Kᵀ + 2^-11·Q″_lo·Kᵀ: each subgroup one part (token block,
//      hi or lo, half the channels where a block has four subgroups), stored (f32).
//   3. softmax: subgroup k is query vector k, lane t token t: masks, the tile's max; the
//      workgroup's reference max of each vector moves only when a tile's max exceeds it by
//      more than TR_SLACK (weights ≤ 2^TR_SLACK, f16-safe), and then the output matrices are
//      flushed (below) and every sum rescaled; p = 2^(s − m) as f16 into P.
//   4. O += P·V: subgroup w owns the column blocks w, w + 4, … as cooperative matrices.
// O's matrices are flushed through workgroup memory into the invocations' columns (lid,
// + TR_OW, …: one pass per 128 columns) when a max moves and at the end. Rows 4..15 of Q″ and P
// are zero (4 query vectors of the MMA's 16 rows).
// **Precision.** f16 rows are exact; Q″ is exact to about 2^-22 (two parts); p is rounded to
// f16 once (spec/attention.md's f16-product bound: 1e-3 relative L2 per row).
// Workgroup memory: trh (f16) [K: TR_TT × TR_RS][V: TR_TT × TR_RS][Q″_hi: 16 × TR_RS]
// [Q″_lo: 16 × TR_RS][P: 16 × TR_TT]; trf (f32) the four subgroups' S parts [4][16][16] or,
// while flushing, O [16][TR_OW]; trx (f32) [8]: the vectors' tile maxima, then their l
// (plan::tensor_decode_rows_workgroup_bytes).
// Always writes partial records (m, l, o) (the merge kernel finishes).

const TR_DP: u32 = (DIM + 15u) / 16u * 16u;
// Row stride (f16) of K, V and Q″ in workgroup memory: D rounded up to 16, plus 8 where
// ATT_TC_PAD (rows 16 bytes apart in the banks instead of all on the same ones).
const TR_RS: u32 = TR_DP + 8u * ATT_TC_PAD;
const TR_TT: u32 = select(32u, 16u, TR_DP > 128u);
const TR_TB: u32 = TR_TT / 16u;            // token blocks of a tile
const TR_KD: u32 = TR_DP / 16u;            // k-steps of S, column blocks of O
const TR_NOW: u32 = (TR_KD + 3u) / 4u;     // column blocks of a subgroup: sg + 4·i
const TR_WPB: u32 = 4u / TR_TB;            // subgroups per token block in S (2 or 4)
const TR_NH: u32 = TR_WPB / 2u;            // channel ranges per (block, part)
const TR_KH: u32 = (TR_KD + TR_NH - 1u) / TR_NH; // k-steps of a range
const TR_NOP: u32 = min(TR_KD, 8u);        // column blocks of a flush pass
const TR_OH: u32 = (TR_KD + TR_NOP - 1u) / TR_NOP; // flush passes
const TR_OW: u32 = 16u * TR_NOP;           // columns of a pass (≤ 128: one per invocation)
const TR_DW: u32 = DIM / 2u;               // u32 words of a head's row
const TR_WL: u32 = (TR_TT * TR_DW + 127u) / 128u; // words of a tile's keys (values) per invocation
const TR_QC: u32 = (TR_DP + 127u) / 128u;  // query channels of an invocation: lid + 128·i
const TR_SLACK: f32 = 8.0;
// Measuring only (KVPACK_TC_NOLOAD=1): zero rows staged instead of loaded, for the kernel's
// floor without memory traffic.
const TR_NOLOAD: bool = ATT_TC_NOLOAD == 1u;
const TR_ILO: f32 = 1.0 / 2048.0;

const TR_K: u32 = 0u;
const TR_V: u32 = TR_TT * TR_RS;
const TR_QH: u32 = 2u * TR_TT * TR_RS;
const TR_QL: u32 = TR_QH + 16u * TR_RS;
const TR_P: u32 = TR_QL + 16u * TR_RS;
const TR_HN: u32 = TR_P + 16u * TR_TT;

var<workgroup> trh: array<f16, TR_HN>;
var<workgroup> trf: array<f32, max(4u * 256u, 16u * TR_OW)>;
// (8 words: every array a whole number of 32-byte units, so that the matrices' regions stay
// 32-byte aligned in whatever order the driver lays the arrays out.)
var<workgroup> trx: array<f32, 8>;

// The tile at t0's words of this invocation (word e = lid + 128·i: row e / TR_DW, word
// e % TR_DW of it). Past s1 the row s1 − 1 again: a stored row (finite), whose repeats get
// no weight; no branch around a load (on the H200 loads behind branches are issued one after
// another). One source per split: the rings on a ring split, else the segments (f16 rows
// hold one token per block on both sides, so the key and value codecs end at the same token
// and a split's values come from where its keys do).
struct TrWords {
    k: array<u32, TR_WL>,
    v: array<u32, TR_WL>,
}

// Token (clamped to s1 − 1) and word offset in its row of this invocation's word i.
fn tr_at(t0: u32, s1: u32, h: u32, lid: u32, i: u32) -> vec2<u32> {
    let e = lid + 128u * i;
    let t = e / TR_DW;
    return vec2<u32>(min(t0 + t, s1 - 1u), h * TR_DW + e - t * TR_DW);
}

fn tr_load(t0: u32, s1: u32, ring: bool, h: u32, lid: u32) -> TrWords {
    var w: TrWords;
    if (TR_NOLOAD) {
        return w;
    }
    if (ring) {
        // @unroll 32
        for (var i = 0u; i < TR_WL; i++) {
            let a = tr_at(t0, s1, h, lid, i);
            w.k[i] = ringk[(a.x % AP.ring_cap_k) * AP.row_words + a.y];
            w.v[i] = ringv[(a.x % AP.ring_cap_v) * AP.row_words + a.y];
        }
    } else {
        // @unroll 32
        for (var i = 0u; i < TR_WL; i++) {
            let a = tr_at(t0, s1, h, lid, i);
            w.k[i] = kseg[kt_row(a.x - AP.tok0) + a.y];
            w.v[i] = vseg[vt_row(a.x - AP.tok0) + a.y];
        }
    }
    return w;
}

fn tr_store(w: TrWords, lid: u32) {
    // @unroll 32
    for (var i = 0u; i < TR_WL; i++) {
        let e = lid + 128u * i;
        let t = e / TR_DW;
        if (t < TR_TT) {
            let c = 2u * (e - t * TR_DW);
            let k = unpack2x16float(w.k[i]);
            let v = unpack2x16float(w.v[i]);
            trh[TR_K + t * TR_RS + c] = f16(k.x);
            trh[TR_K + t * TR_RS + c + 1u] = f16(k.y);
            trh[TR_V + t * TR_RS + c] = f16(v.x);
            trh[TR_V + t * TR_RS + c + 1u] = f16(v.y);
        }
    }
}

// Adds O's matrices (rows 0..3: the 4 vectors) into the invocations' columns through trf
// (every invocation calls it: barriers).
fn tr_flush(oc: array<TcC, TR_NOW>, o: ptr<function, array<vec4<f32>, TR_OH>>, sg: u32, lid: u32) {
    // @unroll 4
    for (var ph = 0u; ph < TR_OH; ph++) {
        workgroupBarrier();
        // @unroll 8
        for (var i = 0u; i < TR_NOW; i++) {
            let nb = sg + 4u * i;
            if (nb < TR_KD && nb / TR_NOP == ph) {
                coopStoreT(oc[i], &trf[(nb - ph * TR_NOP) * 16u], TR_OW);
            }
        }
        workgroupBarrier();
        if (lid < TR_OW) {
            (*o)[ph] += vec4<f32>(trf[lid], trf[TR_OW + lid], trf[2u * TR_OW + lid], trf[3u * TR_OW + lid]);
        }
    }
}

fn tr_main(wid: u32, lid: u32) {
    let w = split_work(wid);
    if (!w.live) {
        return; // uniform: depends on the workgroup only
    }
    let h = w.h;
    let s0 = w.s0;
    let s1 = w.s1;
    let sg = lid / 32u;
    let lane = lid % 32u;
    var live = vec4<bool>(false);
    var pv = vec4<u32>(0u);
    // @unroll 4
    for (var i = 0u; i < 4u; i++) {
        let v = w.vb * 4u + i;
        live[i] = v < AP.vec_total;
        pv[i] = AP.q_pos0 + min(v, AP.vec_total - 1u) / AP.qg;
    }
    // Q″ (q·scale·log2 e as hi and lo f16 parts) in rows 0..3; rows 4..15, P and the
    // padding channels (of Q″, K and V) zero.
    for (var e = lid; e < TR_HN; e += 128u) {
        trh[e] = 0.0h;
    }
    workgroupBarrier();
    // @unroll 4
    for (var i = 0u; i < TR_QC; i++) {
        let c = lid + 128u * i;
        if (c < DIM) {
            // @unroll 4
            for (var k = 0u; k < 4u; k++) {
                let v = w.vb * 4u + k;
                var x = 0.0;
                if (live[k]) {
                    x = q[((v / AP.qg) * AP.hq + h * AP.qg + v % AP.qg) * DIM + c] * AP.scale_log2;
                }
                let sp = tc_split(x);
                trh[TR_QH + k * TR_RS + c] = sp.x;
                trh[TR_QL + k * TR_RS + c] = sp.y;
            }
        }
    }
    // S: this subgroup's token block, part (hi, lo) and k-steps.
    let tb = sg / TR_WPB;
    let part = (sg % TR_WPB) % 2u;
    let kc0 = ((sg % TR_WPB) / 2u) * TR_KH;
    let kc1 = min(kc0 + TR_KH, TR_KD);
    let qoff = select(TR_QH, TR_QL, part == 1u);

    var m = vec4<f32>(NEG);
    var l = 0.0; // vector sg's sum over this lane's tokens
    var o: array<vec4<f32>, TR_OH>;
    var oc: array<TcC, TR_NOW>;
    // @unroll 8
    for (var i = 0u; i < TR_NOW; i++) {
        oc[i] = TcC();
    }
    var dirty = false;
    var words = tr_load(s0, s1, w.ring, h, lid);
    for (var t0 = s0; t0 < s1; t0 += TR_TT) {
        // 1. This tile into workgroup memory; the next one's loads in flight. (Measuring
        //    only, ATT_TC_PF: 1, the next tile's loads issued after the barrier; 2, no
        //    prefetch: each tile loaded right before it is stored.)
        if (ATT_TC_PF == 2u && t0 != s0) {
            words = tr_load(t0, s1, w.ring, h, lid);
        }
        tr_store(words, lid);
        if (ATT_TC_PF == 0u && t0 + TR_TT < s1) {
            words = tr_load(t0 + TR_TT, s1, w.ring, h, lid);
        }
        workgroupBarrier();
        if (ATT_TC_PF == 1u && t0 + TR_TT < s1) {
            words = tr_load(t0 + TR_TT, s1, w.ring, h, lid);
        }
        // 2. S, this subgroup's part.
        // (Two accumulators: two independent MMA chains.)
        var acc0 = TcC();
        var acc1 = TcC();
        // @unroll 16
        for (var i = 0u; i < TR_KH; i++) {
            let kc = kc0 + i;
            if (kc < kc1) {
                let qa = coopLoadT<TcA>(&trh[qoff + kc * 16u], TR_RS);
                let kb = coopLoad<TcB>(&trh[TR_K + tb * 16u * TR_RS + kc * 16u], TR_RS);
                if (i % 2u == 0u) {
                    acc0 = coopMultiplyAdd(qa, kb, acc0);
                } else {
                    acc1 = coopMultiplyAdd(qa, kb, acc1);
                }
            }
        }
        coopStoreT(acc0 + acc1, &trf[sg * 256u], 16u);
        workgroupBarrier();
        // 3. Softmax: subgroup sg = vector sg, lane = token t0 + lane.
        let tok = t0 + lane;
        var vis = false;
        var s = NEG;
        if (lane < TR_TT) {
            let b = lane / 16u;
            var x = 0.0;
            // @unroll 4
            for (var u = 0u; u < TR_WPB; u++) {
                let y = trf[(b * TR_WPB + u) * 256u + sg * 16u + lane % 16u];
                x += select(y, y * TR_ILO, u % 2u == 1u);
            }
            vis = live[sg] && tok < s1 && visible(key_pos(tok, h), pv[sg]);
            s = select(NEG, x, vis);
        }
        let tmax = subgroupMax(s);
        if (lane == 0u) {
            trx[sg] = tmax;
        }
        workgroupBarrier();
        let tm = vec4<f32>(trx[0], trx[1], trx[2], trx[3]);
        if (any(tm > m + TR_SLACK)) { // uniform
            let m_new = max(m, tm);
            let corr = exp2(m - m_new);
            if (dirty) {
                tr_flush(oc, &o, sg, lid);
                // @unroll 8
                for (var i = 0u; i < TR_NOW; i++) {
                    oc[i] = TcC();
                }
                dirty = false;
            }
            // @unroll 4
            for (var ph = 0u; ph < TR_OH; ph++) {
                o[ph] *= corr;
            }
            l *= corr[sg];
            m = m_new;
        }
        let p = select(0.0, exp2(s - m[sg]), vis);
        l += p;
        if (lane < TR_TT) {
            trh[TR_P + sg * TR_TT + lane] = f16(p);
        }
        workgroupBarrier();
        // 4. O += P·V for this subgroup's column blocks.
        var pa: array<TcA, 2>;
        // @unroll 2
        for (var kb = 0u; kb < TR_TB; kb++) {
            pa[kb] = coopLoadT<TcA>(&trh[TR_P + kb * 16u], TR_TT);
        }
        // @unroll 8
        for (var i = 0u; i < TR_NOW; i++) {
            let nb = sg + 4u * i;
            if (nb < TR_KD) {
                // @unroll 2
                for (var kb = 0u; kb < TR_TB; kb++) {
                    let vm = coopLoadT<TcB>(&trh[TR_V + kb * 16u * TR_RS + nb * 16u], TR_RS);
                    oc[i] = coopMultiplyAdd(pa[kb], vm, oc[i]);
                }
            }
        }
        dirty = true;
        // K, V, S, P and trx are rewritten by the next tile.
        workgroupBarrier();
    }
    if (dirty) {
        tr_flush(oc, &o, sg, lid);
    }
    // The record of each vector: m, l (summed in its subgroup), o.
    let ls = subgroupAdd(l);
    workgroupBarrier();
    if (lane == 0u) {
        trx[sg] = ls;
    }
    workgroupBarrier();
    // @unroll 4
    for (var k = 0u; k < 4u; k++) {
        let v = w.vb * 4u + k;
        if (live[k]) {
            let b = ((h * AP.vec_total + v) * AP.n_parts + w.part) * PW;
            if (lid == 0u) {
                partials[b] = m[k];
                partials[b + 1u] = trx[k];
            }
            // @unroll 4
            for (var ph = 0u; ph < TR_OH; ph++) {
                let c = ph * TR_OW + lid;
                if (lid < TR_OW && c < DIM) {
                    partials[b + 2u + c] = o[ph][k];
                }
            }
        }
    }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    tr_main(linear_workgroup(wg, nwg), lid);
}
