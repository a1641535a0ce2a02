// TurboQuant's key-side attention pieces (read wgsl/turboquant/attend_k.wgsl for the mapping),
// shared by its key hook and TurboQuant-Prod's (wgsl/turboquant/attend_k_prod.wgsl):
// concatenated before either. Specialized on ATT_KTQ_P, ATT_KTQ_LOG2P, ATT_KTQ_BITS,
// ATT_KTQ_STAGES, ATT_KTQ_C.

const KTQ_P: u32 = ATT_KTQ_P;
const KTQ_B: u32 = ATT_KTQ_BITS;
const KTQ_S: u32 = ATT_KTQ_STAGES;
const KTQ_N: u32 = 1u << ATT_KTQ_BITS;
const KTQ_CPL: u32 = max(ATT_KTQ_P / 8u, 1u);       // coordinates per lane
const KTQ_RW: u32 = (KTQ_P * KTQ_B + 31u) / 32u;     // words per code row
const KTQ_SW: u32 = (KTQ_P + 31u) / 32u;             // sign words per head
const KTQ_LB: u32 = KTQ_CPL * KTQ_B;                 // a lane's bits per row
const KTQ_ALIGNED: bool = KTQ_LB % 32u == 0u;
const KTQ_NW: u32 = (KTQ_LB + 31u) / 32u;            // window words per row
const KTQ_WIN: u32 = 8u * KTQ_S * KTQ_NW;

var<workgroup> ktq_cb: array<f32, KTQ_S * KTQ_N>; // centroids [stage][2^b]

// The codebook into workgroup memory and q′ = c·H_P·(s ⊙ q) into qp[0 .. P) (k_prepare).
fn ktq_prepare(lid: u32, h: u32) {
    let cb0 = AP.hkv * KTQ_SW;
    for (var i = lid; i < KTQ_S * KTQ_N; i += WORKGROUP_SIZE) {
        let st = i / KTQ_N;
        ktq_cb[i] = bitcast<f32>(ktab[cb0 + st * 2u * KTQ_N + i - st * KTQ_N]);
    }
    for (var i = lid; i < K_PREP_W; i += WORKGROUP_SIZE) {
        var x = vec4<f32>(0.0);
        if (i < DIM) {
            let flip = ((ktab[h * KTQ_SW + (i >> 5u)] >> (i & 31u)) & 1u) != 0u;
            x = select(qs[i], -qs[i], flip);
        }
        qp[i] = x;
    }
    workgroupBarrier();
    for (var p = 0u; p < ATT_KTQ_LOG2P; p++) {
        let hh = 1u << p;
        for (var q = lid; q < KTQ_P / 2u; q += WORKGROUP_SIZE) {
            let i = ((q >> p) << (p + 1u)) | (q & (hh - 1u));
            let a = qp[i];
            let b = qp[i + hh];
            qp[i] = a + b;
            qp[i + hh] = a - b;
        }
        workgroupBarrier();
    }
    let c = bitcast<f32>(ATT_KTQ_C);
    for (var i = lid; i < KTQ_P; i += WORKGROUP_SIZE) {
        qp[i] *= c;
    }
}

// The lane's n_j·Σ_c q′_c·ŷ_jc of its 8 tokens (k_score) from the codes at word `codes` and
// the norms at word `norms` of the key segment.
fn ktq_score(row: u32, last: u32, cg: u32, h: u32, codes: u32, norms: u32) -> array<vec4<f32>, 8> {
    var acc: array<vec4<f32>, 8>;
    var nrm: array<f32, 8>;
    var win: array<u32, KTQ_WIN>;
    let bit0 = cg * KTQ_LB;
    let w0 = bit0 >> 5u;
    let sh = bit0 & 31u;
    let nwn = (AP.hkv + 1u) / 2u;
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        let r = min(row + j, last);
        let nw = kseg[norms + r * nwn + (h >> 1u)];
        nrm[j] = unpack2x16float(nw)[h & 1u];
        let rb = codes + (r * AP.hkv + h) * KTQ_S * KTQ_RW;
        // @unroll 2
        for (var st = 0u; st < KTQ_S; st++) {
            let base = rb + st * KTQ_RW;
            // @unroll 8
            for (var m = 0u; m < KTQ_NW; m++) {
                var word: u32;
                if (KTQ_ALIGNED) {
                    word = kseg[base + w0 + m];
                } else {
                    let lo = kseg[base + min(w0 + m, KTQ_RW - 1u)];
                    let hi = kseg[base + min(w0 + m + 1u, KTQ_RW - 1u)];
                    word = tq_funnel(lo, hi, sh);
                }
                win[(j * KTQ_S + st) * KTQ_NW + m] = word;
            }
        }
    }
    // @unroll 32
    for (var i = 0u; i < KTQ_CPL; i++) {
        let qv = qp[cg * KTQ_CPL + i];
        let at = i * KTQ_B;
        let m = at >> 5u;
        // @unroll 8
        for (var j = 0u; j < 8u; j++) {
            var y = 0.0;
            // @unroll 2
            for (var st = 0u; st < KTQ_S; st++) {
                let wi = (j * KTQ_S + st) * KTQ_NW + m;
                let code = tq_window_code(win[wi], win[min(wi + 1u, KTQ_WIN - 1u)], at & 31u, KTQ_B);
                y += ktq_cb[st * KTQ_N + code];
            }
            acc[j] += qv * y;
        }
    }
    // @unroll 8
    for (var j = 0u; j < 8u; j++) {
        acc[j] *= nrm[j];
    }
    return acc;
}
