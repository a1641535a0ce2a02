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

const NEG: f32 = -1.0e30; // as in wgsl/attend/attend_core.wgsl

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
    // Eight chunks per step, their loads issued together (indices clamped, extra chunks
    // masked): a dependent load per chunk would serialize the merge on memory latency.
    let stride = A.dim + 2u;
    let base = wid * A.nc_total * stride;
    let nc = A.nc_total;
    var m = NEG;
    for (var c0 = 0u; c0 < nc; c0 += 8u) {
        var mv: array<f32, 8>;
        for (var u = 0u; u < 8u; u++) {
            mv[u] = partials[base + min(c0 + u, nc - 1u) * stride];
        }
        for (var u = 0u; u < 8u; u++) {
            m = max(m, mv[u]); // clamped duplicates cannot change a maximum
        }
    }
    var l = 0.0;
    var y: array<f32, 4>; // channels lid, lid + 64, lid + 128, lid + 192 (D <= 256)
    for (var k = 0u; k < 4u; k++) {
        y[k] = 0.0;
    }
    for (var c0 = 0u; c0 < nc; c0 += 8u) {
        var wv: array<f32, 8>;
        var lv: array<f32, 8>;
        for (var u = 0u; u < 8u; u++) {
            let b = base + min(c0 + u, nc - 1u) * stride;
            wv[u] = select(0.0, exp(partials[b] - m), c0 + u < nc);
            lv[u] = partials[b + 1u];
        }
        for (var u = 0u; u < 8u; u++) {
            l += lv[u] * wv[u];
        }
        for (var k = 0u; k < 4u; k++) {
            let d = min(lid + 64u * k, A.dim - 1u);
            var av: array<f32, 8>;
            for (var u = 0u; u < 8u; u++) {
                av[u] = partials[base + min(c0 + u, nc - 1u) * stride + 2u + d];
            }
            for (var u = 0u; u < 8u; u++) {
                y[k] += av[u] * wv[u];
            }
        }
    }
    for (var k = 0u; k < 4u; k++) {
        let d = lid + 64u * k;
        if (d < A.dim) {
            var o = 0.0;
            if (l > 0.0) {
                o = y[k] / l;
            }
            out[wid * A.dim + d] = o;
        }
    }
}
