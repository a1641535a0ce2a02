// turboquant_quant (workgroup-memory variant; adapters without subgroups): TurboQuant-MSE /
// -RVQ quantization, fused (../shared/spec/turboquant.md). CPU twin:
// src/cpu/turboquant/turboquant_quant.rs; MSL twin: msl/turboquant/turboquant_quant.metal
// (the same mapping); the subgroup variant: turboquant_quant_subgroup.wgsl. Bindings:
// turboquant_quant_io.wgsl.
//
// Dispatch: one workgroup of WORKGROUP_SIZE (64) invocations per (token, head pair) item,
// linear index item = token · ceil(H / 2) + pair; it quantizes head 2·pair, then head
// 2·pair + 1 (absent for an odd H: zeros, nothing stored), and writes the pair's f16 norms
// as one word. Per vector, in workgroup memory (the vector is P floats; invocation lid owns
// coordinates lid, lid + 64, ...: any P works, several coordinates per invocation):
//   1. load x (f16 → f32, zero past D); invocation 0 sums x_i² in index order (the CPU
//      reference's order: the norm is bit-exact) and takes the square root;
//   2. u = x / n (x when n = 0), signs first: u_i·s_i;
//   3. log2(P) butterfly passes at strides 1, 2, ..., P/2: each pass reads both partners,
//      a barrier, then writes (a + b for the lower index, a − b for the upper), a barrier;
//   4. × c, the stage-1 code by binary search of the boundaries; RVQ: the stage-2 code of
//      y − ĉ₁; codes to workgroup memory, a barrier;
//   5. the packed rows: invocation lid assembles words lid, lid + 64, ... and stores them.
// Every barrier is in uniform control flow (the item is the workgroup's).

// The vector's steps: tq_shared_vector.wgsl (concatenated before this file).

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let item = linear_workgroup(wg, nwg);
    if (item >= P.items) {
        return; // uniform: depends on the workgroup only
    }
    let tok = item / P.norm_words;
    let pair = item % P.norm_words;
    let s = P.src_start + tok;
    tq_load_codebook(lid);
    var nn = vec2<f32>(0.0);
    for (var v = 0u; v < 2u; v++) {
        let h = 2u * pair + v;
        let live = h < P.heads;
        let hs = min(h, P.heads - 1u);
        // 1. Load, norm.
        let n = tq_load_norm_shared(s, h, live, lid);
        // 2. Normalize (each invocation its own coordinates), signs first.
        tq_normalize_shared(n, lid);
        tq_signs_shared(hs, lid); // @tq-signs-before
        workgroupBarrier();
        // 3. Butterflies.
        tq_butterflies_shared(lid);
        // @tq-signs-after
        // 4. Scale, codes.
        tq_codes_shared(lid);
        // 5. Packed rows.
        tq_store_rows_shared(((P.seg_token + tok) * P.heads + hs) * TS * TRW, live, lid);
        nn[v] = n;
        workgroupBarrier(); // the next vector reuses tq_x and tq_c
    }
    if (lid == 0u) {
        norms[(P.seg_token + tok) * P.norm_words + pair] =
            tq_f16_bits(nn.x) | (tq_f16_bits(nn.y) << 16u);
    }
}
