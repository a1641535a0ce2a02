// attend, workgroup-memory variant (adapters without subgroups): the core's cross-lane steps
// through workgroup memory and barriers (bindings, dispatch and the hooks:
// wgsl/attend/attend_core.wgsl; the entry point: attend_workgroup_main.wgsl; attend_merge also
// composes these helpers, unused, since the core it shares names them). Every step is called by every invocation the same
// number of times (the core keeps the trip counts uniform).

// 4 vec4 per invocation: the halving exchange's largest step.
const ENTRY_SCRATCH: u32 = 4u * WORKGROUP_SIZE;

// No subgroups: the slices' merge takes one turn per token group (tg_sum is never called).
const TG_SHUFFLE: bool = false;
fn tg_sum(x: vec4<f32>) -> vec4<f32> {
    return x;
}

fn rs_cg(acc: array<vec4<f32>, 8>, lid: u32, sgl: u32) -> vec4<f32> {
    let cg = lid & 7u;
    var b: array<vec4<f32>, 4>;
    let up4 = (cg & 4u) != 0u;
    // @unroll 4
    for (var k = 0u; k < 4u; k++) {
        wsm[lid * 4u + k] = select(acc[k + 4u], acc[k], up4);
    }
    workgroupBarrier();
    // @unroll 4
    for (var k = 0u; k < 4u; k++) {
        b[k] = select(acc[k], acc[k + 4u], up4) + wsm[(lid ^ 4u) * 4u + k];
    }
    workgroupBarrier();
    var c: array<vec4<f32>, 2>;
    let up2 = (cg & 2u) != 0u;
    // @unroll 2
    for (var k = 0u; k < 2u; k++) {
        wsm[lid * 4u + k] = select(b[k + 2u], b[k], up2);
    }
    workgroupBarrier();
    // @unroll 2
    for (var k = 0u; k < 2u; k++) {
        c[k] = select(b[k], b[k + 2u], up2) + wsm[(lid ^ 2u) * 4u + k];
    }
    workgroupBarrier();
    let up1 = (cg & 1u) != 0u;
    wsm[lid * 4u] = select(c[1], c[0], up1);
    workgroupBarrier();
    let r = select(c[0], c[1], up1) + wsm[(lid ^ 1u) * 4u];
    workgroupBarrier();
    return r;
}

fn slice_reduce(x: vec4<f32>, lid: u32, is_max: bool) -> vec4<f32> {
    wsm[lid * 4u] = x;
    workgroupBarrier();
    let first = lid - lid % 32u;
    var t = wsm[first * 4u];
    for (var k = 1u; k < 32u; k++) {
        let y = wsm[(first + k) * 4u];
        t = select(t + y, max(t, y), is_max);
    }
    workgroupBarrier();
    return t;
}

fn slice_max(x: vec4<f32>, lid: u32, sgl: u32) -> vec4<f32> {
    return slice_reduce(x, lid, true);
}

// The tile's reference max (attend_core.wgsl, DEC_TAU): m, unless the slice's max passes
// m + DEC_TAU; then the max of both.
fn slice_ref_max(x: vec4<f32>, m: vec4<f32>, lid: u32, sgl: u32) -> vec4<f32> {
    let mx = slice_reduce(x, lid, true);
    return select(m, max(m, mx), ref_moves(mx, m));
}

fn slice_sum(x: vec4<f32>, lid: u32, sgl: u32) -> vec4<f32> {
    return slice_reduce(x, lid, false);
}

fn gather8(p: vec4<f32>, lid: u32, sgl: u32) -> array<vec4<f32>, 8> {
    wsm[lid * 4u] = p;
    workgroupBarrier();
    var out: array<vec4<f32>, 8>;
    let base = lid & ~7u;
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        out[j] = wsm[(base + j) * 4u];
    }
    workgroupBarrier();
    return out;
}
