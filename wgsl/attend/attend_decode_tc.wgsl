enable f16;
enable wgpu_cooperative_matrix;
diagnostic(off, derivative_uniformity);
// attend_decode_tc: the decode kernel on cooperative matrices (tensor cores: wgpu's
// EXPERIMENTAL_COOPERATIVE_MATRIX, 16×16×16 f16 operands with an f32 accumulator; built only
// where the adapter lists that configuration and subgroups are 32 wide). Composed after the
// core (wgsl/attend/attend_core.wgsl: bindings, uniform, `visible`, `key_pos`, PW) and the
// codecs' hooks, of which it uses the *tile hooks* (ATTENTION.md §3.3: raw codes, scales folded
// into the query and into the softmax weight, never a dequantized element):
//
//   key codec    const KT_CODES: bool  (true: codes with a (scale, lo) per channel and tile;
//                                       false: f16 rows, read by this kernel like the ring)
//                const KT_B: u32       (bits per code, 1, 2, 4 or 8; codes along tokens)
//                fn kt_word(row0: u32, c: u32, j: u32, h: u32) -> u32
//                    word j of channel c's codes of segment rows row0 .. row0 + TD_TT − 1
//                    (one key block; code i of a word at bits i·KT_B, token j·32/KT_B + i)
//                fn kt_pair(row0: u32, c: u32, h: u32) -> vec2<f32>   (scale, lo): k̂ = scale·code + lo
//                fn kt_row(row: u32) -> u32    first word of segment row `row`'s f16 row (!KT_CODES)
//   value codec  const VT_CODES: bool, const VT_B: u32, const VT_NG: u32 (groups of VT_G
//                channels; codes along channels, group g's codes from word g·VT_G·VT_B/32)
//                fn vt_word(row: u32, j: u32, h: u32) -> u32   word j of row `row`'s codes
//                fn vt_pair(row: u32, g: u32, h: u32) -> vec2<f32>   (scale, lo) of group g
//                fn vt_row(row: u32) -> u32    (!VT_CODES)
//
// **Mapping.** A workgroup is one subgroup of 32 invocations and serves one KV head h, up to
// four query vectors (vb·4 ..) and one split (dispatch index as the decode kernel's). Splits
// are cut at the key side's Q (plan.rs): a codec split's keys all come from the key codec, a
// ring split's from the ring; a token's value comes from the value codec below qv, from the
// ring above. Per tile of TD_TT tokens (32; 16 where D > 128):
//   1. staging: the tile's codes, exactly, as f16 (x = 0x6400 | c is 1024 + c; minus 1024 is
//      exact): keys channel-major [c][t] (codes) or token-major [t][c] (f16 rows), values
//      token-major [t][c]; for codec keys Q″ = q·scale per channel, split in a high and a low
//      f16 part (the low one scaled by 2^11), and the bias Σ_c q·lo (f32, subgroupAdd)
//   2. S (16 × TD_TT) = Q″_hi·K + 2^-11·Q″_lo·K: 2·TD_KD MMAs per 16 tokens; stored (f32)
//   3. lane t (token t of the tile): masks, the tile's max over the subgroup, p = 2^(s − m);
//      P′_g = p·scale(t, g) for every value group g (f16), Σ_t p·lo(t, g) kept per lane
//   4. O_tile (16 × W) = P′·V: TD_TB MMAs per 16 columns, stored (f32); lane-owned columns
//      added to the running output (rescaled by 2^(m_old − m_new) as the max moves).
// Rows 4..15 of the A operands (Q″, P′) are zero: 4 query vectors of 16 (the MMA's M).
// **Precision.** Codes and f16 rows are exact; Q″ is exact to about 2^-22 (two parts); P′ is
// rounded to f16 once per (token, group) weight (spec/attention.md's f16-product bound:
// 1e-3 relative L2 per row).
// Workgroup memory: tdh (f16) [K: TD_DP × TD_KS (codes) or TD_TT × TD_KR (rows)][V: TD_TT ×
// TD_VS][Q″_hi: 16 × TD_QS][Q″_lo][P′: TD_NG × 16 × TD_PS] (row strides padded: below);
// tdf (f32): S [16][TD_TT], then O_tile [16][TD_WP]. Every region starts at a multiple of 16
// elements (plan::tensor_decode_workgroup_bytes).
// Always writes partial records (m, l, o) (the merge kernel finishes).

// (TcA, TcB, TcC and tc_split: wgsl/attend/attend_tc_common.wgsl)

const TD_DP: u32 = (DIM + 15u) / 16u * 16u;
const TD_WP: u32 = (max(V_W, DIM) + 15u) / 16u * 16u;
const TD_TT: u32 = select(32u, 16u, TD_DP > 128u);
const TD_TB: u32 = TD_TT / 16u;
const TD_KD: u32 = TD_DP / 16u;
const TD_NO: u32 = TD_WP / 16u;
const TD_NG: u32 = VT_NG;
const TD_GW: u32 = VT_G;                     // output columns of a value group
const TD_CPL: u32 = (TD_WP + 31u) / 32u;    // output columns of a lane: lane + 32·i
// O_tile goes through tdf in TD_OH passes of TD_OW columns (two where D > 128: workgroup
// storage).
const TD_OH: u32 = select(1u, 2u, TD_WP > 128u && TD_WP % 64u == 0u);
const TD_OW: u32 = TD_WP / TD_OH;
const TD_NOP: u32 = TD_NO / TD_OH;  // column blocks of a pass
const TD_CPP: u32 = TD_CPL / TD_OH; // a lane's columns of a pass
const TD_QC: u32 = (TD_DP + 31u) / 32u;     // query channels of a lane: lane + 32·i
// Words a lane loads per tile: key codes (TD_WPC per channel), key f16 rows, value codes,
// value f16 rows.
const TD_WPC: u32 = max(TD_TT * KT_B / 32u, 1u);
const TD_KCW: u32 = (TD_DP * TD_WPC + 31u) / 32u;
const TD_KRW: u32 = (TD_TT * TD_DP / 2u + 31u) / 32u;
const TD_VCW: u32 = (TD_TT * VT_RW + 31u) / 32u;
const TD_VRW: u32 = (TD_TT * TD_WP / 2u + 31u) / 32u;
const TD_ILO: f32 = 1.0 / 2048.0;
// Measuring only (KVPACK_TC_NOLOAD=1: no global loads of the tile, zero words staged; =2: no
// staging at all, the tiles stay as initialized; =3 below): the kernel's floor without memory
// traffic.
const TD_NOLOAD: bool = ATT_TC_NOLOAD >= 1u;
const TD_NOSTAGE: bool = ATT_TC_NOLOAD >= 2u;
// =3: no cooperative-matrix work either (scores and outputs as the tiles hold them).
const TD_NOMMA: bool = ATT_TC_NOLOAD == 3u;

// Row strides (f16) in tdh: the regions' widths plus 8 where ATT_TC_PAD and D ≤ 128 (rows 16
// bytes apart in the banks instead of all on the same ones: codes' rows of 32 f16, keys',
// values' and Q″'s of 128; at D = 256 the padded tiles would not fit 48 KiB), each a multiple
// of 8 (matrix rows 16-byte aligned).
const TD_PAD: u32 = select(0u, 8u * ATT_TC_PAD, TD_DP <= 128u);
const TD_KS: u32 = TD_TT + TD_PAD;  // key codes [c][t]
const TD_KR: u32 = TD_DP + TD_PAD;  // key f16 rows [t][c]
const TD_VS: u32 = TD_WP + TD_PAD;  // values [t][c]
const TD_QS: u32 = TD_DP + TD_PAD;  // Q″ [16][c]
const TD_PS: u32 = TD_TT + TD_PAD;  // P′ [g][16][t]
// tdh's regions.
const TD_K: u32 = 0u;
const TD_V: u32 = max(TD_DP * TD_KS, TD_TT * TD_KR);
const TD_QH: u32 = TD_V + TD_TT * TD_VS;
const TD_QL: u32 = TD_QH + 16u * TD_QS;
const TD_P: u32 = TD_QL + 16u * TD_QS;
const TD_HN: u32 = TD_P + TD_NG * 16u * TD_PS;

var<workgroup> tdh: array<f16, TD_HN>;
var<workgroup> tdf: array<f32, max(16u * TD_TT, 16u * TD_OW)>;

// The partial record of each of the workgroup's vectors (m, l, o + the groups' Σ p·lo) for
// split slot `part`; o holds the lane's columns lane + 32·i.
fn td_record(lane: u32, h: u32, vb: u32, part: u32, m: vec4<f32>, lt: vec4<f32>, o: array<vec4<f32>, TD_CPL>, obt: array<vec4<f32>, TD_NG>) {
    // @unroll 4
    for (var k = 0u; k < 4u; k++) {
        let v = vb * 4u + k;
        if (v < AP.vec_total) {
            let b = ((h * AP.vec_total + v) * AP.n_parts + part) * PW;
            if (lane == 0u) {
                partials[b] = m[k];
                partials[b + 1u] = lt[k];
            }
            // @unroll 8
            for (var i = 0u; i < TD_CPL; i++) {
                let c = lane + 32u * i;
                if (c < DIM) {
                    let g = min(c / TD_GW, TD_NG - 1u);
                    partials[b + 2u + c] = o[i][k] + obt[g][k];
                }
            }
        }
    }
}

// The 32/b codes of word w (b bits each, code i at bits i·b) as exact f16 at tdh[at ..].
fn td_codes(w: u32, b: u32, at: u32) {
    let m = (1u << b) - 1u;
    // @unroll 16
    for (var i = 0u; i < 16u; i++) {
        if (i < 16u / b) {
            let lo = (w >> (2u * b * i)) & m;
            let hi = (w >> (2u * b * i + b)) & m;
            // (naga 30 types bitcast<vec2<f16>>(u32) as f32: through unpack2x16float instead;
            // both steps are exact)
            let x = unpack2x16float(lo | (hi << 16u) | 0x64006400u) - vec2<f32>(1024.0);
            tdh[at + 2u * i] = f16(x.x);
            tdh[at + 2u * i + 1u] = f16(x.y);
        }
    }
}

// Word j (channels 2j, 2j + 1) of head h's part of token pos's f16 row, from the ring (keys or
// values) or from the codec's segment (first word `seg_w`).
fn td_row_word(keys: bool, ring: bool, pos: u32, seg_w: u32, j: u32, h: u32) -> u32 {
    let off = h * (DIM / 2u) + j;
    if (keys) {
        if (ring) {
            return ringk[(pos % AP.ring_cap_k) * AP.row_words + off];
        }
        return kseg[seg_w + off];
    }
    if (ring) {
        return ringv[(pos % AP.ring_cap_v) * AP.row_words + off];
    }
    return vseg[seg_w + off];
}

fn td_main(wid: u32, lane: u32) {
    let w = split_work(wid);
    if (!w.live) {
        return; // uniform: depends on the workgroup only
    }
    let h = w.h;
    let vb = w.vb;
    let kring = w.ring;
    let s0 = w.s0;
    let s1 = w.s1;
    let part = w.part;
    let kcodes = KT_CODES && !kring;

    // The 4 query vectors (scaled by scale·log2(e)): the lane's channels lane + 32·i.
    var live = vec4<bool>(false);
    var pv = vec4<u32>(0u);
    // @unroll 4
    for (var i = 0u; i < 4u; i++) {
        let v = vb * 4u + i;
        live[i] = v < AP.vec_total;
        pv[i] = AP.q_pos0 + min(v, AP.vec_total - 1u) / AP.qg;
    }
    var qr: array<vec4<f32>, TD_QC>;
    // @unroll 8
    for (var i = 0u; i < TD_QC; i++) {
        let c = lane + 32u * i;
        var x = vec4<f32>(0.0);
        // @unroll 4
        for (var k = 0u; k < 4u; k++) {
            let v = vb * 4u + k;
            if (live[k] && c < DIM) {
                x[k] = q[((v / AP.qg) * AP.hq + h * AP.qg + v % AP.qg) * DIM + c] * AP.scale_log2;
            }
        }
        qr[i] = x;
    }
    // Zero A rows (4..15 of Q″ and P′ for good; every row of Q″ for now).
    for (var e = lane; e < TD_HN - TD_QH; e += 32u) {
        tdh[TD_QH + e] = 0.0h;
    }
    workgroupBarrier();
    // Keys from f16 rows: Q″ = q for the whole split.
    if (!kcodes) {
        // @unroll 8
        for (var i = 0u; i < TD_QC; i++) {
            let c = lane + 32u * i;
            if (c < TD_DP) {
                // @unroll 4
                for (var k = 0u; k < 4u; k++) {
                    let sp = tc_split(qr[i][k]);
                    tdh[TD_QH + k * TD_QS + c] = sp.x;
                    tdh[TD_QL + k * TD_QS + c] = sp.y;
                }
            }
        }
    }

    var m = vec4<f32>(NEG);
    var l = vec4<f32>(0.0);
    var o: array<vec4<f32>, TD_CPL>;
    var ob: array<vec4<f32>, TD_NG>;
    for (var t0 = s0; t0 < s1; t0 += TD_TT) {
        let row0 = t0 - AP.tok0;
        // 1. Staging: every load of the tile first (independent, so all in flight at once; a
        //    load-store loop waited for each load in turn), then the stores into workgroup
        //    memory. Keys: codes (channel-major) with Q″ and the bias, or f16 rows (token-major;
        //    zero past the split). Values: codes below qv (token-major; the group scales go
        //    into the weights), f16 rows from the ring above; zero past the split.
        var kbias = vec4<f32>(0.0);
        let vq = min(s1, AP.qv); // tokens below vq: the value codec
        let pos = t0 + lane;
        let vcodes = VT_CODES && t0 < vq;
        let vrows = !VT_CODES || t0 + TD_TT > vq;
        var kcw: array<u32, TD_KCW>;
        var krw: array<u32, TD_KRW>;
        var kpr: array<vec2<f32>, TD_QC>;
        var vcw: array<u32, TD_VCW>;
        var vrw: array<u32, TD_VRW>;
        var vp: array<vec2<f32>, TD_NG>;
        if (kcodes && !TD_NOLOAD) {
            // (Addresses clamped instead of loads behind branches, which the H200 issues one
            // after another; the stores below skip what is past D.)
            // @unroll 32
            for (var i = 0u; i < TD_KCW; i++) {
                let e = lane + 32u * i;
                let c = e / TD_WPC;
                kcw[i] = kt_word(row0, min(c, DIM - 1u), e - c * TD_WPC, h);
            }
            // @unroll 8
            for (var i = 0u; i < TD_QC; i++) {
                kpr[i] = kt_pair(row0, min(lane + 32u * i, DIM - 1u), h);
            }
        } else if (!TD_NOLOAD) {
            // Rows past s1 (and past the tile) read row s1 − 1 again: weightless, finite.
            if (kring) {
                // @unroll 64
                for (var i = 0u; i < TD_KRW; i++) {
                    let e = lane + 32u * i;
                    let t = e / (TD_DP / 2u);
                    let p = min(t0 + t, s1 - 1u);
                    krw[i] = td_row_word(true, true, p, 0u, min(e - t * (TD_DP / 2u), DIM / 2u - 1u), h);
                }
            } else {
                // @unroll 64
                for (var i = 0u; i < TD_KRW; i++) {
                    let e = lane + 32u * i;
                    let t = e / (TD_DP / 2u);
                    let p = min(t0 + t, s1 - 1u);
                    krw[i] = td_row_word(true, false, p, kt_row(p - AP.tok0), min(e - t * (TD_DP / 2u), DIM / 2u - 1u), h);
                }
            }
        }
        if (vcodes && !TD_NOLOAD) {
            // (Rows at or past vq read row vq − 1 again; the stores skip them.)
            // @unroll 32
            for (var i = 0u; i < TD_VCW; i++) {
                let e = lane + 32u * i;
                let t = e / VT_RW;
                vcw[i] = vt_word(row0 + min(t, vq - 1u - t0), e - t * VT_RW, h);
            }
        }
        // @unroll 16
        for (var g = 0u; g < TD_NG; g++) {
            vp[g] = vec2<f32>(1.0, 0.0);
            if (vcodes && !TD_NOLOAD) { // uniform
                let pr = vt_pair(min(pos, vq - 1u) - AP.tok0, g, h);
                vp[g] = select(vp[g], pr, lane < TD_TT && pos < vq);
            }
        }
        if (vrows && !TD_NOLOAD && !VT_CODES && t0 + TD_TT <= vq) {
            // f16 value rows, the whole tile below vq: the segment's rows, past s1 row s1 − 1
            // again (weightless).
            // @unroll 64
            for (var i = 0u; i < TD_VRW; i++) {
                let e = lane + 32u * i;
                let t = e / (TD_WP / 2u);
                let p = min(t0 + t, s1 - 1u);
                vrw[i] = td_row_word(false, false, p, vt_row(p - AP.tok0), min(e - t * (TD_WP / 2u), DIM / 2u - 1u), h);
            }
        } else if (vrows && !TD_NOLOAD) {
            // @unroll 64
            for (var i = 0u; i < TD_VRW; i++) {
                let e = lane + 32u * i;
                let t = e / (TD_WP / 2u);
                let j = e - t * (TD_WP / 2u);
                let p = t0 + t;
                let from_ring = p >= vq;
                if (t < TD_TT && p < s1 && 2u * j < DIM && (from_ring || !VT_CODES)) {
                    if (from_ring) {
                        vrw[i] = td_row_word(false, true, p, 0u, j, h);
                    } else {
                        vrw[i] = td_row_word(false, false, p, vt_row(p - AP.tok0), j, h);
                    }
                }
            }
        }
        // Stores.
        if (kcodes && !TD_NOSTAGE) {
            // @unroll 32
            for (var i = 0u; i < TD_KCW; i++) {
                let e = lane + 32u * i;
                let c = e / TD_WPC;
                if (c < TD_DP) {
                    td_codes(kcw[i], KT_B, TD_K + c * TD_KS + (e - c * TD_WPC) * (32u / KT_B));
                }
            }
            var kb4 = vec4<f32>(0.0);
            // @unroll 8
            for (var i = 0u; i < TD_QC; i++) {
                let c = lane + 32u * i;
                if (c < DIM) {
                    kb4 += qr[i] * kpr[i].y;
                    // @unroll 4
                    for (var k = 0u; k < 4u; k++) {
                        let sp = tc_split(qr[i][k] * kpr[i].x);
                        tdh[TD_QH + k * TD_QS + c] = sp.x;
                        tdh[TD_QL + k * TD_QS + c] = sp.y;
                    }
                }
            }
            kbias = subgroupAdd(kb4);
        } else if (!TD_NOSTAGE) {
            // @unroll 64
            for (var i = 0u; i < TD_KRW; i++) {
                let e = lane + 32u * i;
                let t = e / (TD_DP / 2u);
                let j = e - t * (TD_DP / 2u);
                if (t < TD_TT) {
                    let x = unpack2x16float(krw[i]);
                    tdh[TD_K + t * TD_KR + 2u * j] = f16(x.x);
                    tdh[TD_K + t * TD_KR + 2u * j + 1u] = f16(x.y);
                }
            }
        }
        if (vcodes && !TD_NOSTAGE) {
            // @unroll 32
            for (var i = 0u; i < TD_VCW; i++) {
                let e = lane + 32u * i;
                let t = e / VT_RW;
                // Tokens at or above vq are the rows' (below): never written twice.
                if (t < TD_TT && t0 + t < vq) {
                    td_codes(vcw[i], VT_B, TD_V + t * TD_VS + (e - t * VT_RW) * (32u / VT_B));
                }
            }
        }
        if (vrows && !TD_NOSTAGE) {
            // @unroll 64
            for (var i = 0u; i < TD_VRW; i++) {
                let e = lane + 32u * i;
                let t = e / (TD_WP / 2u);
                let j = e - t * (TD_WP / 2u);
                if (t < TD_TT && (!VT_CODES || t0 + t >= vq)) {
                    let x = unpack2x16float(vrw[i]);
                    tdh[TD_V + t * TD_VS + 2u * j] = f16(x.x);
                    tdh[TD_V + t * TD_VS + 2u * j + 1u] = f16(x.y);
                }
            }
        }
        workgroupBarrier();
        // 2. Scores.
        if (!TD_NOMMA) {
            var sh: array<TcC, TD_TB>;
            var sl: array<TcC, TD_TB>;
            // @unroll 2
            for (var tb = 0u; tb < TD_TB; tb++) {
                sh[tb] = TcC();
                sl[tb] = TcC();
            }
            // @unroll 16
            for (var kc = 0u; kc < TD_KD; kc++) {
                let qa = coopLoadT<TcA>(&tdh[TD_QH + kc * 16u], TD_QS);
                let ql = coopLoadT<TcA>(&tdh[TD_QL + kc * 16u], TD_QS);
                // @unroll 2
                for (var tb = 0u; tb < TD_TB; tb++) {
                    var kb: TcB;
                    if (kcodes) {
                        kb = coopLoadT<TcB>(&tdh[TD_K + kc * 16u * TD_KS + tb * 16u], TD_KS);
                    } else {
                        kb = coopLoad<TcB>(&tdh[TD_K + tb * 16u * TD_KR + kc * 16u], TD_KR);
                    }
                    sh[tb] = coopMultiplyAdd(qa, kb, sh[tb]);
                    sl[tb] = coopMultiplyAdd(ql, kb, sl[tb]);
                }
            }
            // @unroll 2
            for (var tb = 0u; tb < TD_TB; tb++) {
                coopStoreT(sh[tb] + sl[tb] * TD_ILO, &tdf[tb * 16u], TD_TT);
            }
        }
        workgroupBarrier();
        // 3. Softmax: lane = token t0 + lane.
        var s = vec4<f32>(NEG);
        var vis = vec4<bool>(false);
        if (lane < TD_TT) {
            let kp = key_pos(pos, h);
            // @unroll 4
            for (var k = 0u; k < 4u; k++) {
                vis[k] = live[k] && pos < s1 && visible(kp, pv[k]);
                s[k] = select(NEG, tdf[k * TD_TT + lane] + kbias[k], vis[k]);
            }
        }
        let m_new = max(m, subgroupMax(s));
        let corr = exp2(m - m_new);
        let p = select(vec4<f32>(0.0), exp2(s - m_new), vis);
        l = l * corr + p;
        m = m_new;
        if (any(corr != vec4<f32>(1.0))) {
            // @unroll 8
            for (var i = 0u; i < TD_CPL; i++) {
                o[i] = o[i] * corr;
            }
            // @unroll 16
            for (var g = 0u; g < TD_NG; g++) {
                ob[g] *= corr;
            }
        }
        if (lane < TD_TT) {
            // @unroll 16
            for (var g = 0u; g < TD_NG; g++) {
                ob[g] += p * vp[g].y;
                let pg = p * vp[g].x;
                // @unroll 4
                for (var k = 0u; k < 4u; k++) {
                    tdh[TD_P + (g * 16u + k) * TD_PS + lane] = f16(pg[k]);
                }
            }
        }
        workgroupBarrier();
        // 4. O_tile = P′·V, column block by column block (each in one value group), in
        //    TD_OH passes through tdf.
        // @unroll 2
        for (var ph = 0u; ph < TD_OH; ph++) {
            if (!TD_NOMMA) {
                // @unroll 16
                for (var n = 0u; n < TD_NOP; n++) {
                    let nb = ph * (TD_NO / TD_OH) + n;
                    let g = min(nb * 16u / TD_GW, TD_NG - 1u);
                    var acc = TcC();
                    // @unroll 2
                    for (var kb = 0u; kb < TD_TB; kb++) {
                        let pa = coopLoadT<TcA>(&tdh[TD_P + g * 16u * TD_PS + kb * 16u], TD_PS);
                        let vm = coopLoadT<TcB>(&tdh[TD_V + kb * 16u * TD_VS + nb * 16u], TD_VS);
                        acc = coopMultiplyAdd(pa, vm, acc);
                    }
                    coopStoreT(acc, &tdf[n * 16u], TD_OW);
                }
            }
            workgroupBarrier();
            // @unroll 8
            for (var i = 0u; i < TD_CPP; i++) {
                let c = lane + 32u * i; // column within the pass
                if (ph * TD_OW + c < TD_WP) {
                    o[ph * (TD_CPL / TD_OH) + i] += vec4<f32>(tdf[c], tdf[TD_OW + c], tdf[2u * TD_OW + c], tdf[3u * TD_OW + c]);
                }
            }
            workgroupBarrier();
        }
    }

    // The record of each (vector, split): m, l, o + the groups' Σ p·lo.
    var obt: array<vec4<f32>, TD_NG>;
    // @unroll 16
    for (var g = 0u; g < TD_NG; g++) {
        obt[g] = subgroupAdd(ob[g]);
    }
    td_record(lane, h, vb, part, m, subgroupAdd(l), o, obt);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(subgroup_invocation_id) sl: u32,
) {
    td_main(linear_workgroup(wg, nwg), sl);
}
