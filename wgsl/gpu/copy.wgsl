// copy: dst[i] = src[i] for n vec4<u32> (16 bytes each). A measuring tool (the device's
// memory roofline: bytes read + written over time), not a kvpack kernel.
//
// @binding(0) params: CopyParams (uniform)   n = number of vec4<u32> to copy
// @binding(1) src:    array<vec4<u32>> [n]
// @binding(2) dst:    array<vec4<u32>> [n]   output
//
// Dispatch: any number of workgroups of WORKGROUP_SIZE (256), split over (x, y) by the host;
// grid-stride loop, so the host may cap the workgroup count (e.g. 65,535) and every vec4 is
// still copied exactly once.

struct CopyParams {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: CopyParams;
@group(0) @binding(1) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> dst: array<vec4<u32>>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let stride = nwg.x * nwg.y * WORKGROUP_SIZE;
    for (var i = linear_workgroup(wg, nwg) * WORKGROUP_SIZE + lid; i < params.n; i += stride) {
        dst[i] = src[i];
    }
}
