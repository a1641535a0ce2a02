// kivi_dequant_values: reconstructs quantized values, one invocation per (token, head, channel).
// CPU reference: src/cpu/kivi/kivi_dequant_values.rs. Bindings: wgsl/kivi/kivi_dequant_io.wgsl.

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let hd_count = P.heads * P.dim;
    let i = linear_workgroup(wg, nwg) * WORKGROUP_SIZE + lid;
    if (i >= P.count * hd_count) {
        return;
    }
    let d = i % P.dim;
    let th = i / P.dim; // token * H + head, segment-relative after adding dst_offset * H
    let j = d / P.group;
    let row = P.dst_offset * P.heads + th;
    let pair = load_pair(row * P.n_groups + j);
    let q = get_code(row * P.row_words + j * P.group_words, d - j * P.group);
    out[i] = kivi_reconstruct(q, pair.x, pair.y);
}
