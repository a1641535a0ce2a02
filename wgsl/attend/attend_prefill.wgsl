// attend_prefill: attention of many query vectors per KV head (a prefill chunk: Tq rows × the
// grouped heads), in GEMM form. Composed after the core (wgsl/attend/attend_core.wgsl: its
// bindings, uniform, `visible`, PW) and the codecs' hooks, of which it uses only the element
// readers:
//   key codec:   fn k_value(row: u32, last: u32, c: u32, h: u32) -> f32   (k̂ of segment row
//                `row` (rows past `last` read row `last`), channel c < D, KV head h)
//   value codec: fn v_value(row: u32, last: u32, c: u32, h: u32) -> f32   (its space: c < V_W)
// and, before this file, a cross-lane helper (attend_prefill_subgroup.wgsl /
// attend_prefill_workgroup.wgsl): fn pf_lane_sum(x: f32, lid: u32) -> f32, the sum over the
// PF_LPV invocations of a query vector (called uniformly).
//
// **Mapping.** A workgroup serves one KV head h, PF_QB query vectors and one split (the
// decode kernel's plan, with PF_QB vectors per workgroup instead of 4; the dispatch index is
// ((h · splits) + split) · vblocks + vb). Invocation lid owns vector vb·PF_QB + lid / PF_LPV
// and channels 32·(lid % PF_LPV) .. + 31 of it: that slice of the scaled query and of the
// output accumulator live in registers. Per tile of PF_TT tokens the workgroup reads the
// tile's keys once through k_value (or the ring's f16 rows) into workgroup memory `pft`
// (f32, rows PF_S4 vec4 apart); every invocation dots its query slice with each row, the
// PF_LPV slices are summed (pf_lane_sum), masks and an online softmax (base 2) follow per
// vector; then the tile's values replace its keys in `pft` and every invocation adds p·v̂ to
// its slice. A record (m, l, o) per (vector, split) goes to the partials (never direct: the
// merge kernel finishes, as for the decode kernel's splits).
//
// Workgroup storage: PF_TT · PF_S4 vec4 + 8·PF_LPV vec4 of padding (a lane's slice may run
// past the row's width: those channels have query 0 and are never written).

const PF_TT: u32 = 16u;
// Output (and key) channels a row holds: the wider of the codec's value space and D.
const PF_W: u32 = max(V_W, DIM);
// Invocations per vector: 32 channels each, a power of two.
const PF_LPV: u32 = select(select(select(8u, 4u, PF_W <= 128u), 2u, PF_W <= 64u), 1u, PF_W <= 32u);
const PF_QB: u32 = WORKGROUP_SIZE / PF_LPV;
const PF_S4: u32 = (PF_W + 3u) / 4u;
// Elements of a tile's keys (values) each invocation reads: loops of constant trip counts,
// unrolled, so that all of an invocation's loads are in flight at once.
const PF_KE: u32 = (PF_TT * DIM + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE;
const PF_VE: u32 = (PF_TT * PF_W + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE;

var<workgroup> pft: array<vec4<f32>, PF_TT * PF_S4 + 8u * PF_LPV>;

// Element c of token pos's f16 row in a ring (keys or values) of `cap` rows.
fn pf_ring(keys: bool, pos: u32, cap: u32, c: u32, h: u32) -> f32 {
    let e = h * DIM + c;
    let at = (pos % cap) * AP.row_words + (e >> 1u);
    var w: u32;
    if (keys) {
        w = ringk[at];
    } else {
        w = ringv[at];
    }
    return unpack2x16float(w)[e & 1u];
}

fn pf_set(t: u32, c: u32, x: f32) {
    pft[t * PF_S4 + c / 4u][c % 4u] = x;
}

fn prefill_main(lid: u32, wid: u32) {
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
    let width = select(V_W, DIM, vring);
    let v = vb * PF_QB + lid / PF_LPV;
    let live = v < AP.vec_total;
    let vc = min(v, AP.vec_total - 1u);
    let pv = AP.q_pos0 + vc / AP.qg;
    let c0 = (lid % PF_LPV) * 32u;
    // The lane's query slice, scaled by scale·log2(e) (0 past D and for vectors past the call).
    var qr: array<vec4<f32>, 8>;
    let qbase = ((vc / AP.qg) * AP.hq + h * AP.qg + vc % AP.qg) * DIM;
    // @unroll 8
    for (var i = 0u; i < 8u; i++) {
        var x = vec4<f32>(0.0);
        // @unroll 4
        for (var k = 0u; k < 4u; k++) {
            let c = c0 + 4u * i + k;
            if (live && c < DIM) {
                x[k] = q[qbase + c] * AP.scale_log2;
            }
        }
        qr[i] = x;
    }
    var o: array<vec4<f32>, 8>;
    var m = NEG;
    var l = 0.0;
    let kl = AP.qk - 1u - AP.tok0; // the last key row of the codec (when qk > tok0)
    let vl = min(s1, AP.qv) - 1u - AP.tok0;
    for (var t0 = s0; t0 < s1; t0 += PF_TT) {
        // 1. The tile's keys into pft (tokens past the split: 0, masked below).
        // @unroll 32
        for (var k = 0u; k < PF_KE; k++) {
            let e = min(lid + k * WORKGROUP_SIZE, PF_TT * DIM - 1u); // (a repeat: same value)
            let t = e / DIM;
            let c = e - t * DIM;
            let pos = t0 + t;
            var x = 0.0;
            if (pos < s1) {
                if (pos < AP.qk) {
                    x = k_value(pos - AP.tok0, kl, c, h);
                } else if (RING) {
                    x = pf_ring(true, pos, AP.ring_cap_k, c, h);
                }
            }
            pf_set(t, c, x);
        }
        workgroupBarrier();
        // 2. Scores of the lane's vector, masked; the tile's max.
        var s: array<f32, PF_TT>;
        var mt = NEG;
        // @unroll 16
        for (var t = 0u; t < PF_TT; t++) {
            var a = vec4<f32>(0.0);
            // @unroll 8
            for (var i = 0u; i < 8u; i++) {
                a += qr[i] * pft[t * PF_S4 + c0 / 4u + i];
            }
            let full = pf_lane_sum(a.x + a.y + a.z + a.w, lid);
            let pos = t0 + t;
            let ok = live && pos < s1 && visible(key_pos(pos, h), pv);
            s[t] = select(NEG, full, ok);
            mt = max(mt, s[t]);
        }
        // 3. Online softmax (base 2).
        let m_new = max(m, mt);
        let corr = exp2(m - m_new);
        m = m_new;
        l *= corr;
        // @unroll 8
        for (var i = 0u; i < 8u; i++) {
            o[i] *= corr;
        }
        // @unroll 16
        for (var t = 0u; t < PF_TT; t++) {
            s[t] = select(0.0, exp2(s[t] - m_new), s[t] > NEG);
            l += s[t];
        }
        workgroupBarrier();
        // 4. The tile's values (the codec's space, or the ring's rows: the output space).
        // @unroll 32
        for (var k = 0u; k < PF_VE; k++) {
            let e = min(lid + k * WORKGROUP_SIZE, PF_TT * width - 1u); // (a repeat: same value)
            let t = e / width;
            let c = e - t * width;
            let pos = t0 + t;
            var x = 0.0;
            if (pos < s1) {
                if (!vring && pos < AP.qv) {
                    x = v_value(pos - AP.tok0, vl, c, h);
                } else if (RING) {
                    x = pf_ring(false, pos, AP.ring_cap_v, c, h);
                }
            }
            pf_set(t, c, x);
        }
        workgroupBarrier();
        // @unroll 16
        for (var t = 0u; t < PF_TT; t++) {
            // @unroll 8
            for (var i = 0u; i < 8u; i++) {
                o[i] += s[t] * pft[t * PF_S4 + c0 / 4u + i];
            }
        }
        workgroupBarrier();
    }
    // 5. The record of (vector, split).
    if (live) {
        let b = ((h * AP.vec_total + v) * AP.n_parts + part) * PW;
        if (lid % PF_LPV == 0u) {
            partials[b] = m;
            partials[b + 1u] = l;
        }
        // @unroll 8
        for (var i = 0u; i < 8u; i++) {
            // @unroll 4
            for (var k = 0u; k < 4u; k++) {
                let c = c0 + 4u * i + k;
                if (c < width) {
                    partials[b + 2u + c] = o[i][k];
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
    prefill_main(lid, linear_workgroup(wg, nwg));
}
