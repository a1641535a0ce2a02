// attend_merge: combines the chunks' (m, l, acc) of every (query row, query head) and
// normalizes: out = Σ_c acc_c·e^(m_c − M) / Σ_c l_c·e^(m_c − M), M = max_c m_c.
// CPU reference: the single-pass online softmax of src/cpu/attend.rs (same result up to
// f32 summation order).
//
// @binding(0) A:        AttendParams (uniform; tq, hq, dim, nc_total used)
// @binding(1) partials: array<f32> [Tq][Hq][nc_total][D + 2]
// @binding(2) out:      array<f32> [Tq][Hq][D]
//
// Dispatch: one workgroup of 64 per (query row, query head), linear index i * Hq + head.

@group(0) @binding(0) var<uniform> A: AttendParams;
@group(0) @binding(1) var<storage, read> partials: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

const NEG: f32 = -1.0e30; // as in wgsl/common/attend.wgsl

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let wid = linear_workgroup(wg, nwg);
    if (wid >= A.tq * A.hq) {
        return;
    }
    let stride = A.dim + 2u;
    let base = wid * A.nc_total * stride;
    var m = NEG;
    for (var c = 0u; c < A.nc_total; c++) {
        m = max(m, partials[base + c * stride]);
    }
    var l = 0.0;
    for (var c = 0u; c < A.nc_total; c++) {
        let b = base + c * stride;
        l += partials[b + 1u] * exp(partials[b] - m);
    }
    for (var d = lid; d < A.dim; d += 64u) {
        var y = 0.0;
        for (var c = 0u; c < A.nc_total; c++) {
            let b = base + c * stride;
            y += partials[b + 2u + d] * exp(partials[b] - m);
        }
        var o = 0.0;
        if (l > 0.0) {
            o = y / l;
        }
        out[wid * A.dim + d] = o;
    }
}
