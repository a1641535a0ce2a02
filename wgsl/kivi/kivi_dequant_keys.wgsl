// kivi_dequant_keys: reconstructs quantized keys, one invocation per (token, head, channel).
// CPU reference: src/cpu/kivi/kivi_dequant_keys.rs. Bindings: wgsl/kivi/kivi_dequant_io.wgsl.

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
    let e = i % hd_count;
    let t = i / hd_count;
    let gi = (P.dst_offset + t / P.group) * hd_count + e;
    let pair = load_pair(gi);
    out[i] = kivi_reconstruct(get_code(gi * P.group_words, t % P.group), pair.x, pair.y);
}
