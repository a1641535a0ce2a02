// KIVI shared WGSL: the uniform block, f16 rounding, the group arithmetic
// (../shared/spec/kivi.md "One group"). CPU twin: src/cpu/kivi/kivi_group.rs.
// Specialization constant PARAMS_F16 (1: one u32 per (scale, lo); 0: two u32 of f32 bits).

// Keep in sync with KiviParams in src/codecs/kivi/plans.rs and msl/kivi/kivi_common.metal.
struct KiviParams {
    heads: u32,
    dim: u32,
    bits: u32,
    group: u32,          // keys: tokens per group; values: channels per group
    count: u32,          // keys: blocks in this dispatch; values/dequant: tokens
    src_start: u32,      // absolute token of the first token this dispatch reads
    t_old: u32,          // tokens < t_old come from the ring, the others from `incoming`
    ring_tokens: u32,    // ring capacity C (token s sits in slot s % C)
    dst_offset: u32,     // first block (keys) / token (values) inside the segment buffers
    inv_levels: f32,     // f32(1 / (2^b - 1)), computed on the host
    group_words: u32,    // words of one full group stream
    row_words: u32,      // values: words of one (token, head) row
    n_groups: u32,       // values: groups per row
    resid_row_words: u32,// words of one f16 residual row (H*D halves)
    inc_start: u32,      // absolute token of `incoming`'s first row
    _pad1: u32,
}

const F16_OVERFLOW: f32 = 65520.0; // |x| >= this rounds to f16 infinity

// f32 -> f16 bits, round to nearest even (exactly the `half` crate's from_f32 for finite x).
// Done in integers because WGSL lets pack2x16float round either way.
fn f16_bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let sign = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a >= 0x477ff000u) {
        return sign | 0x7c00u; // overflow (callers reject it before storing)
    }
    if (a >= 0x38800000u) {
        let r = a + 0xfffu + ((a >> 13u) & 1u);
        return sign | ((r - 0x38000000u) >> 13u);
    }
    if (a < 0x33000000u) {
        return sign; // below half the smallest subnormal: zero
    }
    let e = a >> 23u;
    let m = (a & 0x7fffffu) | 0x800000u;
    let shift = 126u - e; // 14..=24
    let q = m >> shift;
    let rem = m & ((1u << shift) - 1u);
    let half_ = 1u << (shift - 1u);
    let up = select(0u, 1u, rem > half_ || (rem == half_ && (q & 1u) == 1u));
    return sign | (q + up);
}

// (scale, lo) as f32 from the group's min and max.
fn kivi_scale(lo: f32, hi: f32, inv_levels: f32) -> f32 {
    return (hi - lo) * inv_levels;
}

fn kivi_code(x: f32, scale: f32, lo: f32, levels: u32) -> u32 {
    // Written so that NaN or a non-positive scale gives code 0, as the spec says.
    if (!(scale > 0.0 && scale < 3.0e38)) {
        return 0u;
    }
    // Clamped before rounding (the bounds are integers: the same code). r + 2^23 lies in
    // [2^23, 2^24), where f32 steps by exactly 1: the addition rounds r half to even, as the
    // spec says, and leaves the integer in the low mantissa bits. No float-to-integer
    // conversion, which NVIDIA GPUs issue at a quarter of the add rate.
    let r = clamp((x - lo) / scale, 0.0, f32(levels));
    return bitcast<u32>(r + 8388608.0) - 0x4b000000u;
}

fn kivi_params_overflow(scale: f32, lo: f32) -> bool {
    return PARAMS_F16 == 1u && (abs(scale) >= F16_OVERFLOW || abs(lo) >= F16_OVERFLOW);
}

fn f16_from_bits(h: u32) -> f32 {
    return unpack2x16float(h & 0xffffu).x;
}

// Reconstruction from a stored pair: f32(q * scale_st) + lo_st (two roundings; a GPU
// compiler may still contract them, which the spec's tolerance covers).
fn kivi_reconstruct(q: u32, scale_st: f32, lo_st: f32) -> f32 {
    if (q == 0u) {
        return lo_st;
    }
    let p = f32(q) * scale_st;
    return p + lo_st;
}

// A code's value for the tensor-core kernels' staging (their products run in f16, within the
// spec's 1e-3 per row): kivi_reconstruct within one f32 rounding, one fused multiply-add and
// no branch (a zero code gives lo_st + 0 · scale_st = lo_st: scales are finite).
fn kivi_make(q: u32, scale_st: f32, lo_st: f32) -> f32 {
    return fma(f32(q), scale_st, lo_st);
}
