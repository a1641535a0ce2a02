// attend_merge: combines the splits' partial records of every query vector and normalizes:
// M = max_s m_s, L = Σ_s l_s·2^(m_s − M); the value codec's part O_c = Σ_{s < n_parts_c}
// o_s·2^(m_s − M) (its space, V_W wide) goes through its finish hook (v_finish, linear: an
// inverse rotation, or nothing), the ring's part O_r = Σ_{s ≥ n_parts_c} ... (output space) is
// added: out = v_finish(O_c / L) + O_r / L. CPU reference: src/cpu/attend.rs (same result up to
// f32 summation order).
//
// Composed after the attention core and its hooks (it shares their declarations); bindings as
// the core's, with two roles swapped: @binding(3) (`q` there) holds the partials
// [hkv·vec_total][n_parts][PW] and @binding(4) (`partials` there) receives out
// [Tq][Hq][D]. The other storage bindings are bound but unused (the hooks' tables may be read
// by v_finish).
//
// Dispatch: one workgroup per (KV head h, query vector v), linear index h · vec_total + v.

// Splits whose loads one trip of a loop over them issues together.
const MERGE_UNROLL: u32 = 8u;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let wid = linear_workgroup(wg, nwg);
    if (wid >= AP.hkv * AP.vec_total) {
        return; // uniform
    }
    let h = wid / AP.vec_total;
    let v = wid % AP.vec_total;
    let base = wid * AP.n_parts * PW;
    let last = AP.n_parts - 1u;
    // Every loop over the splits takes MERGE_UNROLL of them per trip, their loads first (a
    // loop of one load per trip waits for each: ~0.5 µs a split on the H200). The sums keep
    // split order (the same f32 result as one split per trip).
    var mm = NEG;
    for (var s0 = 0u; s0 < AP.n_parts; s0 += MERGE_UNROLL) {
        var m8: array<f32, MERGE_UNROLL>;
        // @unroll 8
        for (var j = 0u; j < MERGE_UNROLL; j++) {
            m8[j] = q[base + min(s0 + j, last) * PW]; // past the last: the last again
        }
        // @unroll 8
        for (var j = 0u; j < MERGE_UNROLL; j++) {
            mm = max(mm, m8[j]);
        }
    }
    var ll = 0.0;
    for (var s0 = 0u; s0 < AP.n_parts; s0 += MERGE_UNROLL) {
        var m8: array<f32, MERGE_UNROLL>;
        var l8: array<f32, MERGE_UNROLL>;
        // @unroll 8
        for (var j = 0u; j < MERGE_UNROLL; j++) {
            let b = base + min(s0 + j, last) * PW;
            m8[j] = q[b];
            l8[j] = q[b + 1u];
        }
        // @unroll 8
        for (var j = 0u; j < MERGE_UNROLL; j++) {
            if (s0 + j < AP.n_parts) {
                ll += l8[j] * exp2(m8[j] - mm);
            }
        }
    }
    let inv = select(0.0, 1.0 / ll, ll > 0.0);
    // Channels lid, lid + WORKGROUP_SIZE (V_W and D are at most 2 · WORKGROUP_SIZE).
    var ring: array<f32, 2>;
    for (var k = 0u; k < 2u; k++) {
        let c = lid + k * WORKGROUP_SIZE;
        var oc = 0.0;
        var orr = 0.0;
        for (var s0 = 0u; s0 < AP.n_parts; s0 += MERGE_UNROLL) {
            var m8: array<f32, MERGE_UNROLL>;
            var x8: array<f32, MERGE_UNROLL>;
            // @unroll 8
            for (var j = 0u; j < MERGE_UNROLL; j++) {
                let b = base + min(s0 + j, last) * PW;
                m8[j] = q[b];
                x8[j] = q[b + 2u + min(c, PW - 3u)];
            }
            // @unroll 8
            for (var j = 0u; j < MERGE_UNROLL; j++) {
                let s = s0 + j;
                if (s < AP.n_parts) {
                    let w = exp2(m8[j] - mm);
                    if (s < AP.n_parts_c) {
                        oc += x8[j] * w;
                    } else {
                        orr += x8[j] * w;
                    }
                }
            }
        }
        if (c < V_W) {
            fin[c] = oc * inv;
        }
        ring[k] = orr * inv;
    }
    workgroupBarrier();
    v_finish(lid, h);
    workgroupBarrier();
    let o = ((v / AP.qg) * AP.hq + h * AP.qg + v % AP.qg) * DIM;
    for (var k = 0u; k < 2u; k++) {
        let c = lid + k * WORKGROUP_SIZE;
        if (c < DIM) {
            partials[o + c] = fin[c] + ring[k];
        }
    }
}
