// kivi_quant_values (workgroup-memory variant): per-token value quantization, fused.
// Layout: src/kivi/layout.rs. CPU reference: src/cpu/kivi_quant_values.rs.
// Bindings: wgsl/common/kivi_quant_io.wgsl.
//
// Dispatch: one workgroup of WORKGROUP_SIZE (32) invocations per (token, head, group), linear
// workgroup index g = (token * H + head) * n_groups + group. Invocation l takes channels
// c0 + l, c0 + l + 32, ...; min/max is a tree in workgroup memory; then invocation l writes
// words l, l + 32, ... of the group stream, recomputing each code from the input.
// The early return depends on the workgroup index only, so it is uniform.

var<workgroup> red_lo: array<f32, WORKGROUP_SIZE>;
var<workgroup> red_hi: array<f32, WORKGROUP_SIZE>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = linear_workgroup(wg, nwg);
    if (g >= P.count * P.heads * P.n_groups) {
        return;
    }
    let j = g % P.n_groups;
    let th = g / P.n_groups;           // token * H + head, relative to src_start
    let h = th % P.heads;
    let t = th / P.heads;
    let s = P.src_start + t;
    let c0 = j * P.group;
    let n = min(P.group, P.dim - c0);
    let e0 = h * P.dim + c0;

    var lo = 3.0e38;
    var hi = -3.0e38;
    for (var c = lid; c < n; c += WORKGROUP_SIZE) {
        let x = load_x(s, e0 + c);
        lo = min(lo, x);
        hi = max(hi, x);
    }
    red_lo[lid] = lo;
    red_hi[lid] = hi;
    workgroupBarrier();
    for (var off = WORKGROUP_SIZE / 2u; off > 0u; off >>= 1u) {
        if (lid < off) {
            red_lo[lid] = min(red_lo[lid], red_lo[lid + off]);
            red_hi[lid] = max(red_hi[lid], red_hi[lid + off]);
        }
        workgroupBarrier();
    }
    lo = red_lo[0];
    hi = red_hi[0];

    let scale = kivi_scale(lo, hi, P.inv_levels);
    let gi = ((P.dst_offset + t) * P.heads + h) * P.n_groups + j;
    if (lid == 0u) {
        store_params(gi, scale, lo);
    }
    let levels = (1u << P.bits) - 1u;
    let b = P.bits;
    let base = ((P.dst_offset + t) * P.heads + h) * P.row_words + j * P.group_words;
    let words = (n * b + 31u) / 32u;
    for (var w = lid; w < words; w += WORKGROUP_SIZE) {
        let bit0 = w * 32u;
        let end_bit = min(bit0 + 32u, n * b);
        var acc = 0u;
        for (var c = bit0 / b; c < (end_bit + b - 1u) / b; c++) {
            let code = kivi_code(load_x(s, e0 + c), scale, lo, levels);
            let start = c * b;
            if (start >= bit0) {
                acc |= code << (start - bit0);
            } else {
                acc |= code >> (bit0 - start);
            }
        }
        codes[base + w] = acc;
    }
}
