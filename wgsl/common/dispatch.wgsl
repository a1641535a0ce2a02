// Shared dispatch helper (concatenated before kernels that list it in their KernelDef).
// Dispatches larger than 65,535 workgroups are split over x and y by the host
// (src/gpu/mod.rs: split_workgroups); kernels rebuild the linear index here and return early,
// uniformly per workgroup, past the end.
fn linear_workgroup(wg: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wg.y * nwg.x + wg.x;
}
