// Attention hooks of TurboQuant, value side (wgsl/attend/attend_core.wgsl; the contract:
// ../shared/spec/turboquant.md "Attention on TurboQuant codes"): streams `codes` (word VP.codes)
// and `norms` (word VP.norms) of the value segment, layout src/codecs/turboquant/layout.rs;
// tables (vtab): signs, then codebooks. CPU twin: src/cpu/turboquant/attend_v.rs.
//
// Values accumulate in the rotated space (V_W = P, V_SPACE_OUT = false: the core cuts splits
// at the value side's Q and keeps the window's rows apart): a lane owns coordinates
// cg·CPL .. cg·CPL + CPL − 1; per token its codes are one window of CPL·b bits (as the key
// side's), the norm is folded into the softmax weight once per token, (p_j·n_j)·ŷ_jc is one
// workgroup-memory lookup and one multiply-add per code and 4 vectors. v_prepare loads the
// centroids; v_finish maps a normalized accumulator back: butterflies over fin (by pairs, a
// barrier per pass), × c, × the KV head's value signs, the first D coordinates.
// Specialized on ATT_VTQ_P, ATT_VTQ_LOG2P, ATT_VTQ_BITS, ATT_VTQ_STAGES, ATT_VTQ_C.

// Keep in sync with `TurboQuantCodec::attend_uniform` in src/codecs/turboquant/codec.rs.
struct VTqParams {
    codes: u32,
    norms: u32,
    _p0: u32,
    _p1: u32,
}
@group(0) @binding(2) var<uniform> VP: VTqParams;

const VTQ_P: u32 = ATT_VTQ_P;
const VTQ_B: u32 = ATT_VTQ_BITS;
const VTQ_S: u32 = ATT_VTQ_STAGES;
const VTQ_N: u32 = 1u << ATT_VTQ_BITS;
const VTQ_RW: u32 = (VTQ_P * VTQ_B + 31u) / 32u;
const VTQ_SW: u32 = (VTQ_P + 31u) / 32u;
const V_W: u32 = ATT_VTQ_P;
const V_CPL: u32 = max(ATT_VTQ_P / 8u, 1u);
const V_SPACE_OUT: bool = false;
const VTQ_LB: u32 = V_CPL * VTQ_B;
const VTQ_ALIGNED: bool = VTQ_LB % 32u == 0u;
const VTQ_NW: u32 = (VTQ_LB + 31u) / 32u;
const VTQ_WIN: u32 = 8u * VTQ_S * VTQ_NW;

var<workgroup> vtq_cb: array<f32, VTQ_S * VTQ_N>; // centroids [stage][2^b]

struct VState {
    o: array<vec4<f32>, V_CPL>,
}

fn v_prepare(lid: u32, h: u32) {
    let cb0 = AP.hkv * VTQ_SW;
    for (var i = lid; i < VTQ_S * VTQ_N; i += WORKGROUP_SIZE) {
        let st = i / VTQ_N;
        vtq_cb[i] = bitcast<f32>(vtab[cb0 + st * 2u * VTQ_N + i - st * VTQ_N]);
    }
}

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

fn v_accum(vs: ptr<function, VState>, row: u32, last: u32, cg: u32, h: u32, p: array<vec4<f32>, 8>) {
    var wt: array<vec4<f32>, 8>;
    var win: array<u32, VTQ_WIN>;
    let bit0 = cg * VTQ_LB;
    let w0 = bit0 >> 5u;
    let sh = bit0 & 31u;
    let nwn = (AP.hkv + 1u) / 2u;
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        let r = min(row + j, last);
        let nw = vseg[VP.norms + r * nwn + (h >> 1u)];
        wt[j] = p[j] * unpack2x16float(nw)[h & 1u];
        let rb = VP.codes + (r * AP.hkv + h) * VTQ_S * VTQ_RW;
        // @unroll 2
        for (var st = 0u; st < VTQ_S; st++) {
            let base = rb + st * VTQ_RW;
            // @unroll 8
            for (var m = 0u; m < VTQ_NW; m++) {
                var word: u32;
                if (VTQ_ALIGNED) {
                    word = vseg[base + w0 + m];
                } else {
                    let lo = vseg[base + min(w0 + m, VTQ_RW - 1u)];
                    let hi = vseg[base + min(w0 + m + 1u, VTQ_RW - 1u)];
                    word = tq_funnel(lo, hi, sh);
                }
                win[(j * VTQ_S + st) * VTQ_NW + m] = word;
            }
        }
    }
    // @unroll 32
    for (var i = 0u; i < V_CPL; i++) {
        let at = i * VTQ_B;
        let m = at >> 5u;
        var o = (*vs).o[i];
        // @unroll 8
        for (var j = 0u; j < 8u; j++) {
            var y = 0.0;
            // @unroll 2
            for (var st = 0u; st < VTQ_S; st++) {
                let wi = (j * VTQ_S + st) * VTQ_NW + m;
                let code = tq_window_code(win[wi], win[min(wi + 1u, VTQ_WIN - 1u)], at & 31u, VTQ_B);
                y += vtq_cb[st * VTQ_N + code];
            }
            o += wt[j] * y;
        }
        (*vs).o[i] = o;
    }
}

// n_r·ŷ_rc: coordinate c < P of segment row `row` (clamped to `last`) of head h in the
// rotated space (the prefill kernel's element reader; the merge kernel's v_finish maps the
// merged accumulator back). Centroids from the tables: the prefill kernel calls no v_prepare.
fn v_value(row: u32, last: u32, c: u32, h: u32) -> f32 {
    let r = min(row, last);
    let n = unpack2x16float(vseg[VP.norms + r * ((AP.hkv + 1u) / 2u) + (h >> 1u)])[h & 1u];
    let at = c * VTQ_B;
    let off = at & 31u;
    let cb0 = AP.hkv * VTQ_SW;
    var y = 0.0;
    // @unroll 2
    for (var st = 0u; st < VTQ_S; st++) {
        let w = VP.codes + ((r * AP.hkv + h) * VTQ_S + st) * VTQ_RW + (at >> 5u);
        var hi = 0u;
        if (off + VTQ_B > 32u) {
            hi = vseg[w + 1u];
        }
        let code = bits_code(vseg[w], hi, off, VTQ_B);
        y += bitcast<f32>(vtab[cb0 + st * 2u * VTQ_N + code]);
    }
    return n * y;
}

fn v_finish(lid: u32, h: u32) {
    for (var p = 0u; p < ATT_VTQ_LOG2P; p++) {
        let hh = 1u << p;
        for (var q = lid; q < VTQ_P / 2u; q += WORKGROUP_SIZE) {
            let i = ((q >> p) << (p + 1u)) | (q & (hh - 1u));
            let a = fin[i];
            let b = fin[i + hh];
            fin[i] = a + b;
            fin[i + hh] = a - b;
        }
        workgroupBarrier();
    }
    let c = bitcast<f32>(ATT_VTQ_C);
    for (var i = lid; i < VTQ_P; i += WORKGROUP_SIZE) {
        let s = ((vtab[h * VTQ_SW + (i >> 5u)] >> (i & 31u)) & 1u) << 31u;
        fin[i] = bitcast<f32>(bitcast<u32>(fin[i] * c) ^ s);
    }
    workgroupBarrier();
}
