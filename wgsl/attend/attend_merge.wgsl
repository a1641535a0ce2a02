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
//
// Mapping: M takes the splits across the lanes (lane i reads splits i, i + WORKGROUP_SIZE, ...)
// and a tree over the lanes; then, one chunk of WORKGROUP_SIZE splits at a time, each lane
// turns one split into its weight 2^(m_s − M) and l_s·2^(m_s − M) (mgw, mgl), and every lane
// walks the chunk's splits in order for its channels, MG_U splits' words loaded together (one
// channel per lane where max(V_W, D) ≤ WORKGROUP_SIZE, else two). L and the O sums keep split
// order, so the result does not depend on WORKGROUP_SIZE or MG_U. (A lane walking every
// split's m, l and o one load at a time cost ~0.5 µs a split on the H200:
// benches/results/h200-2026-12-03-diag; four at a time left a chain of n_parts / 4 loads.)

// Splits whose words a lane loads before adding any (a divisor of WORKGROUP_SIZE).
const MG_U: u32 = 16u;
// Whether a lane serves a second channel (lid + WORKGROUP_SIZE).
const MG_TWO: bool = max(V_W, DIM) > WORKGROUP_SIZE;

// One chunk's weights 2^(m_s − M) (0 past the last split), and the max tree's lanes.
var<workgroup> mgw: array<f32, WORKGROUP_SIZE>;
// One chunk's l_s · 2^(m_s − M) (0 past the last split).
var<workgroup> mgl: array<f32, WORKGROUP_SIZE>;

// Adds split s's channel words (x0, x1) with weight w to the codec's sums (acc.xy) or, past
// the codec's splits, the ring's (acc.zw). s is the same in every lane (uniform branch).
fn merge_add(acc: ptr<function, vec4<f32>>, s: u32, w: f32, x0: f32, x1: f32) {
    if (s < AP.n_parts_c) {
        (*acc).x += x0 * w;
        (*acc).y += x1 * w;
    } else {
        (*acc).z += x0 * w;
        (*acc).w += x1 * w;
    }
}

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
    var mx = NEG;
    for (var s = lid; s < AP.n_parts; s += WORKGROUP_SIZE) {
        mx = max(mx, q[base + s * PW]);
    }
    mgw[lid] = mx;
    workgroupBarrier();
    for (var n = WORKGROUP_SIZE / 2u; n > 0u; n >>= 1u) {
        if (lid < n) {
            mgw[lid] = max(mgw[lid], mgw[lid + n]);
        }
        workgroupBarrier();
    }
    let mm = mgw[0];
    workgroupBarrier();
    // Channels lid, lid + WORKGROUP_SIZE (V_W and D are at most 2 · WORKGROUP_SIZE); the
    // record's words past PW are never read (the clamped channels are not stored).
    let c0 = 2u + min(lid, PW - 3u);
    let c1 = 2u + min(lid + WORKGROUP_SIZE, PW - 3u);
    var acc = vec4<f32>(0.0); // codec part of channels c0, c1; ring part of c0, c1
    var ll = 0.0;
    for (var s0 = 0u; s0 < AP.n_parts; s0 += WORKGROUP_SIZE) {
        var w = 0.0;
        var lw = 0.0;
        if (s0 + lid < AP.n_parts) {
            let b = base + (s0 + lid) * PW;
            w = exp2(q[b] - mm);
            lw = q[b + 1u] * w;
        }
        mgw[lid] = w;
        mgl[lid] = lw;
        workgroupBarrier();
        let n = min(WORKGROUP_SIZE, AP.n_parts - s0);
        for (var j = 0u; j < n; j += MG_U) {
            // Past the last split: its words again, with weight 0 (j + MG_U stays in the
            // chunk's tables).
            var x0: array<f32, MG_U>;
            var x1: array<f32, MG_U>;
            // @unroll 16
            for (var k = 0u; k < MG_U; k++) {
                let b = base + min(s0 + j + k, last) * PW;
                x0[k] = q[b + c0];
                if (MG_TWO) {
                    x1[k] = q[b + c1];
                }
            }
            // @unroll 16
            for (var k = 0u; k < MG_U; k++) {
                ll += mgl[j + k];
                merge_add(&acc, s0 + j + k, mgw[j + k], x0[k], select(0.0, x1[k], MG_TWO));
            }
        }
        workgroupBarrier();
    }
    let inv = select(0.0, 1.0 / ll, ll > 0.0);
    if (lid < V_W) {
        fin[lid] = acc.x * inv;
    }
    if (lid + WORKGROUP_SIZE < V_W) {
        fin[lid + WORKGROUP_SIZE] = acc.y * inv;
    }
    let ring = vec2<f32>(acc.z, acc.w) * inv;
    workgroupBarrier();
    v_finish(lid, h);
    workgroupBarrier();
    let o = ((v / AP.qg) * AP.hq + h * AP.qg + v % AP.qg) * DIM;
    if (lid < DIM) {
        partials[o + lid] = fin[lid] + ring.x;
    }
    if (lid + WORKGROUP_SIZE < DIM) {
        partials[o + lid + WORKGROUP_SIZE] = fin[lid + WORKGROUP_SIZE] + ring.y;
    }
}
