// Attention hooks of VecInfer, value side (wgsl/attend/attend_core.wgsl; the contract:
// ../shared/spec/vecinfer.md "Attention"): streams `codes` (word VP.codes, [tokens][H][VVI_RW],
// as the key side's) of the value segment; tables (vtab, f32 bits): the value codebooks
// [H][C][d_s]. CPU twin: src/cpu/vecinfer/attend_v.rs.
//
// Values accumulate in the transformed space (V_W = P, V_SPACE_OUT = false: the core cuts
// splits at the value side's Q and keeps the window's rows apart): lane cg owns coordinates
// cg·V_CPL .. cg·V_CPL + V_CPL − 1; coordinate x of a token adds p·cb_h[index_{x / d_s}][x mod d_s]
// (the codebook read from vtab: no workgroup memory, which the key side's LUT needs).
// v_finish maps a normalized accumulator back once: butterflies over fin (by pairs, a barrier
// per pass), × c = 1/√P (H_P/√P is its own inverse); the core writes the first D.
// Specialized on ATT_VVI_P, ATT_VVI_LOG2P, ATT_VVI_DS, ATT_VVI_BITS, ATT_VVI_C.

// Keep in sync with `VecInferCodec::attend_uniform` in src/codecs/vecinfer/codec.rs.
struct VViParams {
    codes: u32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
}
@group(0) @binding(2) var<uniform> VP: VViParams;

const VVI_P: u32 = ATT_VVI_P;
const VVI_DS: u32 = ATT_VVI_DS;
const VVI_B: u32 = ATT_VVI_BITS;
const VVI_C: u32 = 1u << ATT_VVI_BITS;
const VVI_RW: u32 = (ATT_VVI_P / ATT_VVI_DS * VVI_B + 31u) / 32u;
const V_W: u32 = ATT_VVI_P;
const V_CPL: u32 = max(ATT_VVI_P / 8u, 1u);
const V_SPACE_OUT: bool = false;

struct VState {
    o: array<vec4<f32>, V_CPL>,
}

fn v_prepare(lid: u32, h: u32) {}

fn v_reset(vs: ptr<function, VState>) {
    // @unroll 32
    for (var i = 0u; i < V_CPL; i++) {
        (*vs).o[i] = vec4<f32>(0.0);
    }
}

fn v_scale(vs: ptr<function, VState>, c: vec4<f32>) {
    // @unroll 32
    for (var i = 0u; i < V_CPL; i++) {
        (*vs).o[i] *= c;
    }
}

fn v_out(vs: ptr<function, VState>, i: u32) -> vec4<f32> {
    return (*vs).o[i];
}

fn v_add(vs: ptr<function, VState>, i: u32, x: vec4<f32>) {
    (*vs).o[i] += x;
}

// Coordinate x < P of segment row r of head h in the transformed space: the value codebook's
// entry of its sub-vector's index.
fn vvi_coord(r: u32, x: u32, h: u32) -> f32 {
    let at = (x / VVI_DS) * VVI_B;
    let w = VP.codes + (r * AP.hkv + h) * VVI_RW + (at >> 5u);
    var hi = 0u;
    if ((at & 31u) + VVI_B > 32u) {
        hi = vseg[w + 1u];
    }
    let idx = bits_code(vseg[w], hi, at & 31u, VVI_B);
    return bitcast<f32>(vtab[(h * VVI_C + idx) * VVI_DS + x % VVI_DS]);
}

fn v_accum(vs: ptr<function, VState>, row: u32, last: u32, cg: u32, h: u32, p: array<vec4<f32>, 8>) {
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        let r = min(row + j, last);
        // @unroll 32
        for (var i = 0u; i < V_CPL; i++) {
            let x = cg * V_CPL + i;
            if (x < V_W) {
                (*vs).o[i] += p[j] * vvi_coord(r, x, h);
            }
        }
    }
}

// Coordinate c < P of segment row `row` (clamped to `last`) of head h in the transformed space
// (the prefill kernel's element reader; the merge kernel's v_finish maps it back).
fn v_value(row: u32, last: u32, c: u32, h: u32) -> f32 {
    return vvi_coord(min(row, last), c, h);
}

fn v_finish(lid: u32, h: u32) {
    for (var p = 0u; p < ATT_VVI_LOG2P; p++) {
        let hh = 1u << p;
        for (var q = lid; q < VVI_P / 2u; q += WORKGROUP_SIZE) {
            let i = ((q >> p) << (p + 1u)) | (q & (hh - 1u));
            let a = fin[i];
            let b = fin[i + hh];
            fin[i] = a + b;
            fin[i + hh] = a - b;
        }
        workgroupBarrier();
    }
    let c = bitcast<f32>(ATT_VVI_C);
    for (var i = lid; i < VVI_P; i += WORKGROUP_SIZE) {
        fin[i] *= c;
    }
    workgroupBarrier();
}
