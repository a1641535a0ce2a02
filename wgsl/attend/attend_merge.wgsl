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
    var mm = NEG;
    for (var s = 0u; s < AP.n_parts; s++) {
        mm = max(mm, q[base + s * PW]);
    }
    var ll = 0.0;
    for (var s = 0u; s < AP.n_parts; s++) {
        ll += q[base + s * PW + 1u] * exp2(q[base + s * PW] - mm);
    }
    let inv = select(0.0, 1.0 / ll, ll > 0.0);
    // Channels lid, lid + WORKGROUP_SIZE (V_W and D are at most 2 · WORKGROUP_SIZE).
    var ring: array<f32, 2>;
    for (var k = 0u; k < 2u; k++) {
        let c = lid + k * WORKGROUP_SIZE;
        var oc = 0.0;
        var orr = 0.0;
        for (var s = 0u; s < AP.n_parts; s++) {
            let b = base + s * PW;
            let w = exp2(q[b] - mm);
            let x = q[b + 2u + min(c, PW - 3u)];
            if (s < AP.n_parts_c) {
                oc += x * w;
            } else {
                orr += x * w;
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
