// Shared by the tensor-core attention kernels (attend_prefill_tc.wgsl, attend_decode_tc.wgsl):
// the cooperative-matrix types they use (16×16×16, f16 operands, f32 accumulator: the one
// configuration the host checks the adapter lists) and the f16 split of an f32 operand.

// `tc_axpy(x, y, a)` in a kernel is x + y·a on accumulators: written as a call, expanded to
// the expression before compiling (src/gpu/coop_emulation.rs, which also emulates these
// types on devices without them, for tests).
alias TcA = coop_mat16x16<f16, A>;
alias TcB = coop_mat16x16<f16, B>;
alias TcC = coop_mat16x16<f32, C>;

// x as the f16 pair (hi, 2^11·(x − hi)): hi is x with its mantissa cut to 10 bits (exact in
// f16 for |x| ≥ 2^-14; smaller parts of x, and the subnormals, are below the bound's
// concern), cut with bit operations because the H200's compiler folds f32(f16(x)) back to x.
fn tc_split(x: f32) -> vec2<f16> {
    let hi = bitcast<f32>(bitcast<u32>(x) & 0xffffe000u);
    return vec2<f16>(f16(hi), f16((x - hi) * 2048.0));
}
