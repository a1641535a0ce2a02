// attend, subgroup variant: the core's cross-lane steps by subgroup shuffles (bindings, dispatch
// and the hooks: wgsl/attend/attend_core.wgsl; the entry point: attend_subgroup_main.wgsl). A slice of 32
// invocations is one subgroup where subgroups are at least 32 wide (ATT_SG_WIDE = 1: no
// workgroup memory, no barrier in the tile loop); narrower subgroups (lavapipe: 8) reduce within
// the subgroup by shuffles and combine the 32 / width parts of a slice in workgroup memory.
// The 8 lanes sharing a token group (lane & ~7) must lie in one subgroup, in invocation order
// (the context probes the order once per device: src/gpu/probe.rs).

// Narrow subgroups combine a slice's parts through the core's `wsm`: one vec4 per invocation.
const ENTRY_SCRATCH: u32 = WORKGROUP_SIZE;

var<private> SGW: u32; // min(subgroup size, 32)

// Whether a slice is one subgroup: the slices' merge then sums a slice's token groups by
// shuffles (tg_sum) and takes one turn per slice.
const TG_SHUFFLE: bool = ATT_SG_WIDE == 1u;

// The sum over the slice's 4 token groups (lanes cg, cg + 8, cg + 16, cg + 24), in every
// lane; only where TG_SHUFFLE (the 4 lanes in one subgroup).
fn tg_sum(x: vec4<f32>) -> vec4<f32> {
    let y = x + subgroupShuffleXor(x, 8u);
    return y + subgroupShuffleXor(y, 16u);
}

// Sums the 8 cg lanes' partial scores of 8 tokens by recursive halving: 4, 2, then 1 token
// per lane, exchanging half each step; lane cg ends with token cg's total.
fn rs_cg(acc: array<vec4<f32>, 8>, lid: u32, sgl: u32) -> vec4<f32> {
    let cg = lid & 7u;
    var b: array<vec4<f32>, 4>;
    let up4 = (cg & 4u) != 0u;
    // @unroll 4
    for (var k = 0u; k < 4u; k++) {
        let send = select(acc[k + 4u], acc[k], up4);
        let keep = select(acc[k], acc[k + 4u], up4);
        b[k] = keep + subgroupShuffleXor(send, 4u);
    }
    var c: array<vec4<f32>, 2>;
    let up2 = (cg & 2u) != 0u;
    // @unroll 2
    for (var k = 0u; k < 2u; k++) {
        let send = select(b[k + 2u], b[k], up2);
        let keep = select(b[k], b[k + 2u], up2);
        c[k] = keep + subgroupShuffleXor(send, 2u);
    }
    let up1 = (cg & 1u) != 0u;
    return select(c[0], c[1], up1) + subgroupShuffleXor(select(c[1], c[0], up1), 1u);
}

fn slice_reduce(x: vec4<f32>, lid: u32, is_max: bool) -> vec4<f32> {
    var r = x;
    for (var off = 1u; off < SGW; off <<= 1u) {
        let y = subgroupShuffleXor(r, off);
        r = select(r + y, max(r, y), is_max);
    }
    if (ATT_SG_WIDE == 1u) {
        return r;
    }
    // Narrow subgroups: the slice's 32 / SGW partial results meet in workgroup memory.
    wsm[lid] = r;
    workgroupBarrier();
    let first = lid - lid % 32u;
    var t = wsm[first];
    for (var k = SGW; k < 32u; k += SGW) {
        let y = wsm[first + k];
        t = select(t + y, max(t, y), is_max);
    }
    workgroupBarrier();
    return t;
}

fn slice_max(x: vec4<f32>, lid: u32, sgl: u32) -> vec4<f32> {
    return slice_reduce(x, lid, true);
}

// The tile's reference max (attend_core.wgsl, DEC_TAU): m, unless one of the slice's scores x
// passes m + DEC_TAU; then the max of m and all of them. A slice that is one subgroup asks its
// lanes first (one vote) and takes the max only then; narrower subgroups take it always (its
// barriers need every invocation) and apply the same rule.
fn slice_ref_max(x: vec4<f32>, m: vec4<f32>, lid: u32, sgl: u32) -> vec4<f32> {
    if (ATT_SG_WIDE == 1u) {
        if (subgroupAny(ref_moves(x, m))) {
            return max(m, slice_reduce(x, lid, true));
        }
        return m;
    }
    let mx = slice_reduce(x, lid, true);
    return select(m, max(m, mx), ref_moves(mx, m));
}

fn slice_sum(x: vec4<f32>, lid: u32, sgl: u32) -> vec4<f32> {
    return slice_reduce(x, lid, false);
}

// The weights of the lane's 8 tokens: token 8·tg + j is held by lane 8·tg + j.
fn gather8(p: vec4<f32>, lid: u32, sgl: u32) -> array<vec4<f32>, 8> {
    var out: array<vec4<f32>, 8>;
    let base = sgl & ~7u;
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        out[j] = subgroupShuffle(p, base + j);
    }
    return out;
}
