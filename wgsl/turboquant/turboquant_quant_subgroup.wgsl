// turboquant_quant (subgroup variant): TurboQuant-MSE / -RVQ quantization, fused
// (../shared/spec/turboquant.md), one vector per group of 8 lanes held in registers. CPU twin:
// src/cpu/turboquant/turboquant_quant.rs; the workgroup-memory variant (and the MSL twin's
// mapping): turboquant_quant.wgsl. Bindings: turboquant_quant_io.wgsl.
//
// Dispatch: workgroups of WORKGROUP_SIZE (64) = 8 groups of 8 lanes; group g of workgroup w
// takes item w·8 + g = token · ceil(H / 2) + pair: head 2·pair, then head 2·pair + 1 (absent
// for an odd H: zeros, nothing stored); lane 0 writes the pair's f16 norms as one word.
// Lane l of a group owns coordinates l·C .. l·C + C − 1 (C = P / 8; several per lane: any P
// works whatever the adapter's invocation limit; P < 8: C = 1, lanes ≥ P hold zeros):
//   1. load x (zero past D); the sum of squares by the lane, then over the group by
//      subgroupShuffleXor at offsets 1, 2, 4 (every lane ends with the same n);
//   2. u = x / n (x when n = 0), signs first;
//   3. butterfly passes at strides below C inside the lane's registers, then at strides C,
//      2C, 4C with the partner lane (lane ^ 1, ^ 2, ^ 4: both values are read by the shuffle
//      before either is replaced);
//   4. × c, codes by binary search of the boundaries (codebooks in workgroup memory);
//   5. packed codes: where a lane's C·b bits are whole words, the lane assembles and stores
//      them from registers; where a pair of lanes' bits are (C·b = 48), the pair does, with one
//      shuffle (PAIRED); otherwise the codes go through workgroup memory and the group's lanes
//      assemble the row's words.
// The 8 lanes of a group must lie in one subgroup, in invocation order (the context probes the
// order once per device: src/gpu/probe.rs; subgroups narrower than 8 are refused on the host).
// Every subgroup operation and barrier is in uniform control flow: groups past the last item
// run them with zeros and store nothing.

const GL: u32 = 8u;                                  // lanes per vector
const GROUPS: u32 = WORKGROUP_SIZE / GL;
const LOG2C: u32 = max(TQ_LOG2P, 3u) - 3u;
const C: u32 = 1u << LOG2C;                          // coordinates per lane
const CH: u32 = C / 2u;
const CW: u32 = max(CH, 1u);                         // a lane's input words (even D)
const LOG2LU: u32 = min(TQ_LOG2P, 3u);               // cross-lane passes
const LU: u32 = 1u << LOG2LU;                        // lanes holding coordinates
const CB: u32 = C * TB;                              // a lane's bits per row
const DIRECT: bool = CB % 32u == 0u;                 // ... are whole words
// Otherwise, where two neighbouring lanes' bits are whole words (C·b = 48: 3-bit codes of
// P = 128), the pair assembles them: the even lane stores the pair's first two words (its own
// 48 bits and the odd lane's first 16, one shuffle), the odd lane the third.
const PAIRED: bool = !DIRECT && LU == GL && CB > 32u && CB < 64u && (2u * CB) % 32u == 0u;
// Bits of a lane's second word (PAIRED; 16 otherwise, so that no shift is by 32 bits).
const SH: u32 = select(16u, CB % 32u, PAIRED);
const PW3: u32 = (2u * CB) / 32u;                    // a pair's words (PAIRED)
const LW: u32 = select(max(CB / 32u, 1u), 2u, PAIRED); // its words (DIRECT, PAIRED)
const WN: u32 = LW * TS;                             // its words, all stages (DIRECT, PAIRED)
const XN: u32 = select(GROUPS * TP * TS, 1u, DIRECT || PAIRED);

var<workgroup> tq_xc: array<u32, XN>; // the groups' codes (not DIRECT)

fn tq_codes_at(i: u32) -> u32 {
    return tq_xc[min(i, XN - 1u)];
}

// Multiplies the lane's coordinates by head h's signs.
fn tq_signs_reg(x: ptr<function, array<f32, C>>, h: u32, lane_g: u32) {
    // @unroll 128
    for (var k = 0u; k < C; k++) {
        (*x)[k] = tq_flip((*x)[k], h, lane_g * C + k);
    }
}

// ORs code `c` of coordinate k (of the lane) into the lane's words of stage s.
fn tq_put(w: ptr<function, array<u32, WN>>, s: u32, k: u32, c: u32) {
    let at = k * TB;
    let i = s * LW + (at >> 5u);
    (*w)[i] |= c << (at & 31u);
    if ((at & 31u) + TB > 32u) {
        (*w)[i + 1u] |= c >> (32u - (at & 31u));
    }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let grp = lid / GL;
    let lane_g = lid % GL;
    let item = linear_workgroup(wg, nwg) * GROUPS + grp;
    let valid = item < P.items;
    let tok = item / P.norm_words;
    let pair = item % P.norm_words;
    let s = P.src_start + tok;
    tq_load_codebook(lid);
    workgroupBarrier();
    var nn = vec2<f32>(0.0);
    for (var v = 0u; v < 2u; v++) {
        let h = 2u * pair + v;
        let live = valid && h < P.heads;
        let hs = min(h, P.heads - 1u);
        // 1. Load, norm.
        var x: array<f32, C>;
        var ss = 0.0;
        if (C >= 2u && (P.dim & 1u) == 0u) {
            // Even D: the lane's coordinates are whole words, loaded once each with the ring
            // or incoming choice made once (no branch between the loads: all in flight).
            var xw: array<u32, CW>;
            let r = tq_row(s) + ((h * P.dim + lane_g * C) >> 1u);
            if (s < P.t_old) {
                // @unroll 64
                for (var k = 0u; k < CW; k++) {
                    xw[k] = select(0u, ring[min(r + k, arrayLength(&ring) - 1u)], live && lane_g * C + 2u * k < P.dim);
                }
            } else {
                // @unroll 64
                for (var k = 0u; k < CW; k++) {
                    xw[k] = select(0u, incoming[min(r + k, arrayLength(&incoming) - 1u)], live && lane_g * C + 2u * k < P.dim);
                }
            }
            // @unroll 128
            for (var k = 0u; k < C; k++) {
                let xv = unpack2x16float(xw[k / 2u])[k % 2u];
                x[k] = xv;
                ss += xv * xv;
            }
        } else {
            // @unroll 128
            for (var k = 0u; k < C; k++) {
                let d = lane_g * C + k;
                var xv = 0.0;
                if (live && d < P.dim) {
                    xv = tq_load(s, h * P.dim + d);
                }
                x[k] = xv;
                ss += xv * xv;
            }
        }
        ss += subgroupShuffleXor(ss, 1u);
        ss += subgroupShuffleXor(ss, 2u);
        ss += subgroupShuffleXor(ss, 4u);
        let n = sqrt(ss);
        // 2. Normalize, signs first.
        // @unroll 128
        for (var k = 0u; k < C; k++) {
            x[k] = select(x[k], x[k] / n, n != 0.0);
        }
        tq_signs_reg(&x, hs, lane_g); // @tq-signs-before
        // 3. Butterflies: strides 1 .. C/2 in registers, then C, 2C, 4C across lanes.
        // @unroll 8
        for (var p = 0u; p < LOG2C; p++) {
            // @unroll 64
            for (var q = 0u; q < CH; q++) {
                let i = ((q >> p) << (p + 1u)) | (q & ((1u << p) - 1u));
                let j = i + (1u << p);
                let a = x[i];
                let b = x[j];
                x[i] = a + b;
                x[j] = a - b;
            }
        }
        // @unroll 3
        for (var p = 0u; p < LOG2LU; p++) {
            let m = 1u << p;
            let upper = (lane_g & m) != 0u;
            // @unroll 128
            for (var k = 0u; k < C; k++) {
                let y = subgroupShuffleXor(x[k], m);
                x[k] = select(x[k] + y, y - x[k], upper);
            }
        }
        // @tq-signs-after
        // 4. Scale, codes; 5. packed rows.
        let row0 = ((P.seg_token + tok) * P.heads + hs) * TS * TRW;
        if (DIRECT || PAIRED) {
            var w: array<u32, WN>;
            // @unroll 128
            for (var k = 0u; k < C; k++) {
                let y = x[k] * P.inv_sqrt_p;
                let c1 = tq_code(y, 0u);
                tq_put(&w, 0u, k, c1);
                if (TS == 2u) {
                    tq_put(&w, 1u, k, tq_code(y - tq_centroid(c1, 0u), 1u));
                }
            }
            if (PAIRED) {
                // @unroll 2
                for (var st = 0u; st < TS; st++) {
                    let w0 = w[st * LW];
                    let w1 = w[min(st * LW + 1u, WN - 1u)];
                    let o0 = subgroupShuffleXor(w0, 1u); // uniform: every lane of the group
                    let pb = row0 + st * TRW + (lane_g >> 1u) * PW3;
                    if (live) {
                        if ((lane_g & 1u) == 0u) {
                            codes[pb] = w0;
                            codes[pb + 1u] = w1 | (o0 << SH);
                        } else {
                            codes[pb + 2u] = (w0 >> (32u - SH)) | (w1 << SH);
                        }
                    }
                }
            } else if (live) {
                // @unroll 2
                for (var st = 0u; st < TS; st++) {
                    // @unroll 32
                    for (var j = 0u; j < LW; j++) {
                        codes[row0 + st * TRW + lane_g * LW + j] = w[st * LW + j];
                    }
                }
            }
        } else {
            let base = grp * TP * TS;
            // @unroll 128
            for (var k = 0u; k < C; k++) {
                let e = lane_g * C + k;
                let y = x[k] * P.inv_sqrt_p;
                let c1 = tq_code(y, 0u);
                if (e < TP) {
                    tq_xc[min(base + e, XN - 1u)] = c1;
                    if (TS == 2u) {
                        tq_xc[min(base + TP + e, XN - 1u)] = tq_code(y - tq_centroid(c1, 0u), 1u);
                    }
                }
            }
            workgroupBarrier();
            for (var wi = lane_g; wi < TS * TRW; wi += GL) {
                let st = wi / TRW;
                let word = tq_row_word(wi - st * TRW, st, base);
                if (live) {
                    codes[row0 + wi] = word;
                }
            }
            workgroupBarrier(); // the next vector reuses tq_xc
        }
        nn[v] = n;
    }
    if (valid && lane_g == 0u) {
        norms[(P.seg_token + tok) * P.norm_words + pair] =
            tq_f16_bits(nn.x) | (tq_f16_bits(nn.y) << 16u);
    }
}
