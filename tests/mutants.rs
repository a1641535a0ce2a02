//! The mutation harness: textual mutants of the composed WGSL and MSL of kvpack's kernels
//! (a barrier removed, a shuffle offset changed, the online-softmax rescale dropped, the window
//! test inverted, a sign flipped, an off-by-one in a bit extraction, ...), each run through the
//! parity checks the kernels' own tests use (tests/common/attend_plans.rs::check_case,
//! tests/common/kivi_plans.rs::check, an oracle for bitpack) and each required to make them fail.
//!
//! MSL mutants run on the CPU emulator in a random lane order (so a removed barrier shows).
//! WGSL mutants run on the GPU adapter (lavapipe in CI) where their effect is deterministic
//! there; lavapipe runs a workgroup's invocations in a fixed order, so a removed
//! `workgroupBarrier` cannot show on it and such mutants are MSL-only (the MSL twins hold the
//! same barriers).
//!
//! A mutant whose text no longer occurs in any kernel it ran, or that no longer compiles,
//! fails the harness (it would otherwise count as caught). `KVPACK_MUTANT_FILTER=<substring>`
//! runs the mutants whose name contains it (while working on one; CI runs them all). **New kernels add their mutants to
//! [`registry`]**; the harness prints how many exist and how many were caught.

mod common;

use common::Target;
use common::attend_plans::Case;
use common::mutate::{Lang, Mutant, with_mutant};
use kvpack::{AttendOptions, Context, Input, KvLayer, Layer, Method, PathChoice};

/// Which parity check a mutant must break.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    /// Attention cases on the decode and prefill kernels (with merges, windows, sinks, rings).
    Attend,
    /// One attention case at D = 256, where the prefill kernel sums its scores over four parts
    /// of the channels (up to width 128 one part holds them all).
    WideAttend,
    /// The KIVI kernels (quantize keys/values, dequantize) on every kernel-level case.
    Kivi,
    /// Bit packing against the bit-by-bit oracle.
    Bitpack,
    /// VecInfer's LUT attention (tests/common/vecinfer_calib.rs, the synthetic D = 32 cases:
    /// f32 and f16 LUT, GQA 3) against the CPU reference.
    VecInfer,
    /// Attention with TurboQuant-Prod keys (decode and merge).
    ProdAttend,
    /// Attention with QJL keys, both forms of the sketch score: the nibble table (codecs
    /// planned for 32 KiB of workgroup storage) and masked sums (16 KiB).
    QjlAttend,
    /// Attention over a cache that evicted tokens (tests/common/positions.rs: held tokens at
    /// their absolute positions, decode and prefill kernels, windows and sinks).
    Positions,
    /// The eviction scoring kernel (tests/common/scores.rs: Q-Filters and key norm).
    Scores,
    /// The eviction compaction kernel (tests/common/compact.rs: every codec's streams).
    Compact,
    /// The eviction selection kernel (tests/common/select.rs: random, tied and real scores).
    Select,
    /// The tensor-core decode kernels' cases of tests/common/tc_decode.rs (the f16-rows kernel
    /// above all), on a target whose device runs them (elsewhere nothing).
    TensorRows,
}

const fn m(
    name: &'static str,
    lang: Lang,
    kernel: &'static str,
    find: &'static str,
    nth: Option<usize>,
    replace: &'static str,
) -> Mutant {
    Mutant {
        name,
        lang,
        kernel,
        find,
        nth,
        replace,
    }
}

/// Every mutant, the check that must catch it, and the targets it runs on (MSL: the emulator;
/// WGSL: `S` the subgroup variant, `W` the workgroup variant, `SW` both). Mutants of text the
/// two WGSL variants share run on the subgroup variant only (to keep the harness short).
#[rustfmt::skip]
fn registry() -> Vec<(Mutant, Check, &'static [&'static str])> {
    use Check::*;
    use Lang::*;
    const MSL: &[&str] = &["msl_emulated"];
    const S: &[&str] = &["wgsl_subgroup"];
    const W: &[&str] = &["wgsl_workgroup"];
    const SW: &[&str] = &["wgsl_subgroup", "wgsl_workgroup"];
    // The tensor-core kernel: only where the device runs it (the H200 runs; not lavapipe).
    const TC: &[&str] = &["wgsl_tensor"];
    // The tensor-core prefill kernel: there, and emulated (lavapipe in CI).
    const TCP: &[&str] = &["wgsl_tensor", "wgsl_tensor_emulated"];
    vec![
        // ---- attention, the tensor-core prefill kernel (attend_prefill_tc) ----
        (m("wgsl tensor attend: P·V̂ reads the first 16 tokens' values for both blocks", Wgsl, "attend_prefill_tc", "&tch[TC_OV + kb * 16u * TC_VS + j * 16u]", None, "&tch[TC_OV + j * 16u]"), Attend, TCP),
        // The rescale when a vector's max moves past its reference by more than TC_TAU (the
        // cases' random scores move it; the tile then leaves the inner loop).
        (m("wgsl tensor attend: rescale: the output not scaled by the factor", Wgsl, "attend_prefill_tc", "tcs[a] = tcs[a] * f;", None, "tcs[a] = tcs[a];"), Attend, TCP),
        (m("wgsl tensor attend: rescale: l not scaled by the factor", Wgsl, "attend_prefill_tc", "                l *= corr;", None, ""), Attend, TCP),
        (m("wgsl tensor attend: rescale: the rescaled tile's P·V̂ left out", Wgsl, "attend_prefill_tc", "        tc_pv(&o, sg);\n        t0 = next;", None, "        t0 = next;"), Attend, TCP),
        (m("wgsl tensor attend: the lane pair's maxima not combined", Wgsl, "attend_prefill_tc", "mt = max(mt, subgroupShuffleXor(mt, 1u));", None, ""), Attend, TCP),
        (m("wgsl tensor attend: window and sinks ignored", Wgsl, "attend_prefill_tc", "let ok = live && pos < s1 && visible(key_pos(pos, h), pv);", None, "let ok = live && pos < s1 && key_pos(pos, h) <= pv;"), Attend, TCP),
        (m("wgsl tensor attend: the lane pair's sums not combined", Wgsl, "attend_prefill_tc", "l += subgroupShuffleXor(l, 1u);", None, ""), Attend, TCP),
        (m("wgsl tensor attend: the weights written in token order while the scores were read rotated", Wgsl, "attend_prefill_tc", "let ps = tc_split_w(p);\n                    let t = half * TC_LT + (j + rs) % TC_LT;", None, "let ps = tc_split_w(p);\n                    let t = half * TC_LT + j;"), Attend, TCP),
        (m("wgsl tensor attend: the high weights loaded with the unpadded row stride", Wgsl, "attend_prefill_tc", "let pa = coopLoadT<TcA>(&tch[TC_OP + sg * 16u * TC_KS + kb * 16u], TC_KS);", None, "let pa = coopLoadT<TcA>(&tch[TC_OP + sg * 16u * TC_KS + kb * 16u], TC_TT);"), Attend, TCP),
        (m("wgsl tensor attend: the low weights stored scaled by 2^11", Wgsl, "attend_prefill_tc", "return vec2<f16>(f16(hi), f16(x - hi));", None, "return vec2<f16>(f16(hi), f16((x - hi) * 2048.0));"), Attend, TCP),
        (m("wgsl tensor attend: the low weights loaded from the high weights' rows", Wgsl, "attend_prefill_tc", "let pl = coopLoadT<TcA>(&tch[TC_OPL + sg", None, "let pl = coopLoadT<TcA>(&tch[TC_OP + sg"), Attend, TCP),
        // Caught only where the f16 cache's rows are held to 1e-5 (emulated: tests/common/tc_emulated.rs).
        (m("wgsl tensor attend (emulated): the low weights' product dropped", Wgsl, "attend_prefill_tc", "(*o)[j] = coopMultiplyAdd(pl, vm, coopMultiplyAdd(pa, vm, (*o)[j]));", None, "(*o)[j] = coopMultiplyAdd(pa, vm, (*o)[j]);"), Attend, &["wgsl_tensor_emulated"]),
        (m("wgsl tensor attend (emulated): the queries' low part never multiplied", Wgsl, "attend_prefill_tc", "sl2 = coopMultiplyAdd(kh, ql[k], sl2);", None, ""), Attend, &["wgsl_tensor_emulated"]),
        (m("wgsl tensor attend: exact f16 keys stored in the low part's rows", Wgsl, "attend_prefill_tc", "tch[at] = f16(x);\n        return;", None, "tch[TC_OKL + at] = f16(x);\n        return;"), Attend, TCP),
        (m("wgsl tensor attend: keys loaded row-major as the A operand (Sᵀ = K̂·Qᵀ wants them column-major)", Wgsl, "attend_prefill_tc", "let kh = coopLoad<TcA>(&tch[at], TC_KS);", None, "let kh = coopLoadT<TcA>(&tch[at], TC_KS);"), Attend, TCP),
        (m("wgsl tensor attend: every query head of a GQA group reads the group's first head", Wgsl, "attend_prefill_tc", "let at = ((v / AP.qg) * AP.hq + h * AP.qg + v % AP.qg) * DIM;", None, "let at = ((v / AP.qg) * AP.hq + h * AP.qg) * DIM;"), Attend, TCP),
        (m("wgsl tensor attend: keys' token blocks swapped", Wgsl, "attend_prefill_tc", "let at = k * 16u * TC_KS + tb * 16u;", None, "let at = k * 16u * TC_KS + (1u - tb) * 16u;"), Attend, TCP),
        // The codec tile's joint staging (pf_tile) and the softmax's wholly visible tiles.
        // (The joint tile's quads serve codecs with quads but no octs: KIVI at 8 bits, in the
        // emulated cases only.)
        (m("wgsl tensor attend (emulated): the joint tile's values read the next token's row", Wgsl, "attend_prefill_tc", "pf_vquads(lid, t0, vl, h);\n        }\n        return;", None, "pf_vquads(lid, t0 + 1u, vl, h);\n        }\n        return;"), Attend, &["wgsl_tensor_emulated"]),
        (m("wgsl tensor attend (emulated): the joint tile's key quads read the next quad's tokens", Wgsl, "attend_prefill_tc", "pf_kquads_whole(lid, t0, h);\n        }", None, "pf_kquads_whole(lid, t0 + 4u, h);\n        }"), Attend, &["wgsl_tensor_emulated"]),
        // The joint tile's octs (k_oct / v_oct: KIVI at 1, 2 and 4 bits).
        (m("wgsl tensor attend: key octs read the next oct's tokens", Wgsl, "attend_prefill_tc", "return t0 + 8u * (u % PF_TO) - AP.tok0;", None, "return t0 + 8u * ((u + 1u) % PF_TO) - AP.tok0;"), Attend, TCP),
        (m("wgsl tensor attend: a key oct's second quad stored over its first", Wgsl, "attend_prefill_tc", "pf_put_kquad(uq + 1u, x[1]);", None, "pf_put_kquad(uq, x[1]);"), Attend, TCP),
        (m("wgsl tensor attend: KIVI key octs' codes taken in reverse order", Wgsl, "attend_prefill_tc", "x[j / 4u][j % 4u] = kivi_make((w >> (j * KB)) & K_MASK", None, "x[j / 4u][j % 4u] = kivi_make((w >> ((7u - j) * KB)) & K_MASK"), Attend, TCP),
        (m("wgsl tensor attend: value octs read the next token's row", Wgsl, "attend_prefill_tc", "return min(t0 + u / PF_VO - AP.tok0, vl);", None, "return min(t0 + u / PF_VO + 1u - AP.tok0, vl);"), Attend, TCP),
        (m("wgsl tensor attend: KIVI value octs reconstructed without their offset", Wgsl, "attend_prefill_tc", "x[j / 4u][j % 4u] = kivi_make((w >> (j * VB)) & V_MASK, pr.x, pr.y)", None, "x[j / 4u][j % 4u] = kivi_make((w >> (j * VB)) & V_MASK, pr.x, 0.0)"), Attend, TCP),
        // The joint tile's eight-channel reads of f16 rows (k_row8 / v_row8).
        (m("wgsl tensor attend: f16 key rows read the next token's row", Wgsl, "attend_prefill_tc", "let row = t0 + lid % PF_TT - AP.tok0;", None, "let row = t0 + (lid + 1u) % PF_TT - AP.tok0;"), Attend, TCP),
        (m("wgsl tensor attend: f16 key rows stored one unit of channels on", Wgsl, "attend_prefill_tc", "pf_put_krow8(lid % PF_TT, 8u * g, r[k]);", None, "pf_put_krow8(lid % PF_TT, 8u * ((g + 1u) % PF_KC8), r[k]);"), Attend, TCP),
        (m("wgsl tensor attend: f16 key rows' odd channels stored in the even rows", Wgsl, "attend_prefill_tc", "tc_put_key(at + TC_KS, x.y);", None, "tc_put_key(at + TC_KS, x.x);"), Attend, TCP),
        (m("wgsl tensor attend: f16 value rows read the next token's row", Wgsl, "attend_prefill_tc", "v_row8(min(t0 + u / PF_VC8 - AP.tok0, vl)", None, "v_row8(min(t0 + u / PF_VC8 + 1u - AP.tok0, vl)"), Attend, TCP),
        (m("wgsl tensor attend: f16 value rows' channel pairs swapped", Wgsl, "attend_prefill_tc", "tch[at + 2u * j] = f16(x.x);", None, "tch[at + 2u * j] = f16(x.y);"), Attend, TCP),
        // The next whole tile's words loaded a step ahead (TC_PREF).
        (m("wgsl tensor attend: the prefetch loads the current tile again", Wgsl, "attend_prefill_tc", "raw = pf_fetch(lid, next, vl, h);", None, "raw = pf_fetch(lid, t0, vl, h);"), Attend, TCP),
        (m("wgsl tensor attend: the split's first tile never prefetched", Wgsl, "attend_prefill_tc", "raw = pf_fetch(lid, s0, vl, h);", None, ""), Attend, TCP),
        (m("wgsl tensor attend: no prefetch for a split's last tile (an off-by-one)", Wgsl, "attend_prefill_tc", "if (pref && TC_PREF_AT == 1u && next < s1", None, "if (pref && TC_PREF_AT == 1u && next + TC_TT < s1"), Attend, TCP),
        (m("wgsl tensor attend: a tile counted wholly visible across the causal diagonal", Wgsl, "attend_prefill_tc", "t0 + TC_TT - 1u <= pv", None, "t0 <= pv"), Attend, TCP),
        (m("wgsl tensor attend: a tile counted wholly visible past the window's edge", Wgsl, "attend_prefill_tc", "\n                    && (AP.window == 0u || t0 + AP.window > pv);", None, ";"), Attend, TCP),
        // ---- attention, the tensor-core decode kernel (attend_decode_tc) ----
        (m("wgsl tensor decode: the keys' Σ q·lo never added", Wgsl, "attend_decode_tc", "kbias = subgroupAdd(kb4);", None, "kbias = vec4<f32>(0.0);"), Attend, TC),
        (m("wgsl tensor decode: the values' Σ p·lo never added", Wgsl, "attend_decode_tc", "ob[g] += p * vp[g].y;", None, ""), Attend, TC),
        (m("wgsl tensor decode: the output not rescaled as the max moves", Wgsl, "attend_decode_tc", "o[i] = o[i] * corr;", None, ""), Attend, TC),
        (m("wgsl tensor decode: every column block weighted by group 0's scales", Wgsl, "attend_decode_tc", "let g = min(nb * 16u / TD_GW, TD_NG - 1u);", None, "let g = 0u;"), Attend, TC),
        (m("wgsl tensor decode: ring splits' keys read as codes", Wgsl, "attend_decode_tc", "let kcodes = KT_CODES && !kring;", None, "let kcodes = KT_CODES;"), Attend, TC),
        (m("wgsl tensor decode: window and sinks ignored", Wgsl, "attend_decode_tc", "vis[k] = live[k] && pos < s1 && visible(kp, pv[k]);", None, "vis[k] = live[k] && pos < s1 && kp <= pv[k];"), Attend, TC),
        (m("wgsl tensor decode rows: rows past the split's end weighted", Wgsl, "attend_decode_tc_rows", "vis = live[sg] && tok < s1 && visible(", None, "vis = live[sg] && visible("), TensorRows, TC),
        (m("wgsl tensor decode rows: the output not flushed when the max moves", Wgsl, "attend_decode_tc_rows", "tr_flush(oc, &o, sg, lid);", Some(0), ""), TensorRows, TC),
        (m("wgsl tensor decode rows: the flushed output not rescaled when the max moves", Wgsl, "attend_decode_tc_rows", "o[ph] *= corr;", None, ""), TensorRows, TC),
        (m("wgsl tensor decode rows: l not rescaled when the max moves", Wgsl, "attend_decode_tc_rows", "l *= corr[sg];", None, ""), TensorRows, TC),
        (m("wgsl tensor decode rows: the scores' low part taken unscaled", Wgsl, "attend_decode_tc_rows", "x += select(y, y * TR_ILO, u % 2u == 1u);", None, "x += y;"), TensorRows, TC),
        (m("wgsl tensor decode rows: the second token block's values read from the first's", Wgsl, "attend_decode_tc_rows", "&trh[TR_V + kb * 16u * TR_RS + nb * 16u]", None, "&trh[TR_V + nb * 16u]"), TensorRows, TC),
        (m("wgsl tensor decode rows: the next tile never loaded (a split's first tile again)", Wgsl, "attend_decode_tc_rows", "words = tr_load(t0 + TR_TT, s1, w.ring, h, lid);", None, ""), TensorRows, TC),
        (m("wgsl tensor decode rows: ring splits' values read from the segment", Wgsl, "attend_decode_tc_rows", "w.v[i] = ringv[(a.x % AP.ring_cap_v) * AP.row_words + a.y];", None, "w.v[i] = vseg[vt_row(a.x - AP.tok0) + a.y];"), TensorRows, TC),
        (m("wgsl tensor decode rows: ring splits' keys read from the segment", Wgsl, "attend_decode_tc_rows", "w.k[i] = ringk[(a.x % AP.ring_cap_k) * AP.row_words + a.y];", None, "w.k[i] = kseg[kt_row(a.x - AP.tok0) + a.y];"), TensorRows, TC),
        (m("wgsl tensor decode rows: the second flush pass's columns dropped", Wgsl, "attend_decode_tc_rows", "if (nb < TR_KD && nb / TR_NOP == ph) {", None, "if (nb < TR_KD && nb / TR_NOP == ph && ph == 0u) {"), TensorRows, TC),
        // ---- attention, MSL (attend_main / attend_core / attend_prefill / attend_merge) ----
        (m("msl attend: first barrier (queries staged) removed", Msl, "attend_", "threadgroup_barrier(mem_flags::mem_threadgroup);", Some(0), ""), Attend, MSL),
        (m("msl attend: barrier between the slices' region writes and their sum removed", Msl, "attend_", "    threadgroup_barrier(mem_flags::mem_threadgroup);\n    float4 mm = S.msm[0];", None, "    float4 mm = S.msm[0];"), Attend, MSL),
        (m("msl attend: the slices' regions summed without their 2^(m_s - M)", Msl, "attend_", "o += S.wsm[s * ATTEND_WIDE + c] * precise::exp2(S.msm[s] - mm);", None, "o += S.wsm[s * ATTEND_WIDE + c];"), Attend, MSL),
        (m("msl attend: the slices' merge sums two of a slice's four token groups", Msl, "attend_", "    return y + simd_shuffle_xor(y, ushort(16));", None, "    return y;"), Attend, MSL),
        (m("msl attend: the slices' merge writes channels of the wrong token group", Msl, "attend_", "if (i % 4u == tg && c < V_W) {", None, "if (i % 4u == 0u && c < V_W) {"), Attend, MSL),
        (m("msl attend: butterfly shuffle offset 4 -> 2", Msl, "attend_", "simd_shuffle_xor(send, ushort(4))", None, "simd_shuffle_xor(send, ushort(2))"), Attend, MSL),
        (m("msl attend: butterfly sign flipped (keep - send)", Msl, "attend_", "b[k] = keep + simd_shuffle_xor(send, ushort(4));", None, "b[k] = keep - simd_shuffle_xor(send, ushort(4));"), Attend, MSL),
        (m("msl attend: online-softmax rescale of l dropped", Msl, "attend_", "            l *= corr;\n            if (vring", None, "            if (vring"), Attend, MSL),
        (m("msl attend: the reference max takes one lane's scores (no SIMD-group max)", Msl, "attend_", "return max(m, slice_max(x));", None, "return max(m, x);"), Attend, MSL),
        (m("msl attend: online-softmax rescale of the accumulator dropped", Msl, "attend_", "v_scale(vs, corr);", None, ""), Attend, MSL),
        (m("msl attend: window test inverted", Msl, "attend_", "pos + A.window > p", None, "pos + A.window <= p"), Attend, MSL),
        (m("msl attend: sinks off by one", Msl, "attend_", "pos < A.sinks", None, "pos <= A.sinks"), Attend, MSL),
        (m("msl merge: partial weight exponent sign flipped", Msl, "attend_merge", "w = precise::exp2(parts[b] - mm);", None, "w = precise::exp2(mm - parts[b]);"), Attend, MSL),
        (m("msl merge: L takes the first split of each group of 16 sixteen times", Msl, "attend_merge", "ll += mgl[j + i];", None, "ll += mgl[j];"), Attend, MSL),
        (m("msl prefill: accumulator rescale dropped", Msl, "attend_prefill", "o[j * PF_OC4 + k] *= corr[j];", None, ""), Attend, MSL),
        (m("msl prefill: barrier after the tile's keys removed", Msl, "attend_prefill", "threadgroup_barrier(mem_flags::mem_threadgroup);", Some(0), ""), Attend, MSL),
        (m("msl prefill: barrier between the scores and the softmax removed", Msl, "attend_prefill", "threadgroup_barrier(mem_flags::mem_threadgroup);", Some(1), ""), Attend, MSL),
        (m("msl prefill: barrier between the softmax's maxima and their reads removed", Msl, "attend_prefill", "threadgroup_barrier(mem_flags::mem_threadgroup);", Some(2), ""), Attend, MSL),
        (m("msl prefill: barrier between the weights and P·V removed", Msl, "attend_prefill", "threadgroup_barrier(mem_flags::mem_threadgroup);", Some(3), ""), Attend, MSL),
        (m("msl prefill: barrier at the tile's end removed (next keys overwrite the values)", Msl, "attend_prefill", "threadgroup_barrier(mem_flags::mem_threadgroup);", Some(4), ""), Attend, MSL),
        (m("msl prefill: barrier before the parts of l are added removed", Msl, "attend_prefill", "threadgroup_barrier(mem_flags::mem_threadgroup);", Some(5), ""), Attend, MSL),
        (m("msl prefill: the softmax's maxima not met (each thread its own)", Msl, "attend_prefill", "mt = max(mt, pf_mx[k * PF_QB + v]);", None, "mt = max(mt, pf_mx[lid]);"), Attend, MSL),
        (m("msl prefill: the first part of l added in place of every part", Msl, "attend_prefill", "l += pf_mx[k * PF_QB + lid % PF_QB];", None, "l += pf_mx[lid % PF_QB];"), Attend, MSL),
        (m("msl prefill: l not rescaled when the max moves", Msl, "attend_prefill", "l = l * corr + sum;", None, "l = l + sum;"), Attend, MSL),
        (m("msl prefill: the softmax takes part 0's scores only", Msl, "attend_prefill", "for (uint pt = 1u; pt < PF_PARTS; ++pt) {", None, "for (uint pt = 1u; pt < 1u; ++pt) {"), WideAttend, MSL),
        (m("msl prefill: every part's channels start at channel 0", Msl, "attend_prefill", "for (uint c = part * PF_PC;", None, "for (uint c = 0u;"), WideAttend, MSL),
        (m("msl prefill: the scores read the next token's keys", Msl, "attend_prefill", "const uint at = c * PF_TT + tt;", None, "const uint at = c * PF_TT + (tt + 1u) % PF_TT;"), Attend, MSL),
        (m("msl prefill: codec-only key quads read the next quad's tokens", Msl, "attend_prefill", "t0 + 4u * (u % PF_TQ) - A.tok0", None, "t0 + 4u * ((u + 1u) % PF_TQ) - A.tok0"), Attend, MSL),
        (m("msl prefill: KIVI's key quads take their codes one bit off", Msl, "attend_prefill", "kivi_reconstruct((w >> (j * KIVI_KB)) & KIVI_K_MASK, pr.x, pr.y)", None, "kivi_reconstruct((w >> (j * KIVI_KB + 1u)) & KIVI_K_MASK, pr.x, pr.y)"), Attend, MSL),
        (m("msl prefill: codec-only value tiles read the next token's row", Msl, "attend_prefill", "t0 + u / (PF_WP / 4u) - A.tok0", None, "t0 + u / (PF_WP / 4u) + 1u - A.tok0"), Attend, MSL),
        (m("msl prefill: KIVI's value quads take their codes one bit off", Msl, "attend_prefill", "kivi_reconstruct((w >> (j * KIVI_VB)) & KIVI_V_MASK, pr.x, pr.y)", None, "kivi_reconstruct((w >> (j * KIVI_VB + 1u)) & KIVI_V_MASK, pr.x, pr.y)"), Attend, MSL),
        (m("msl prefill: f16 value quads swap their two words", Msl, "attend_prefill", "return float4(attend_half(vseg[w], 0u), attend_half(vseg[w], 1u), attend_half(vseg[w + 1u], 0u),", None, "return float4(attend_half(vseg[w + 1u], 0u), attend_half(vseg[w + 1u], 1u), attend_half(vseg[w], 0u),"), Attend, MSL),
        (m("msl bits_unit: mantissa top off by one", Msl, "attend_", "const uint top = 23u - b;", None, "const uint top = 22u - b;"), Attend, MSL),
        // ---- attention, WGSL ----
        (m("wgsl attend: butterfly shuffle offset 4 -> 2", Wgsl, "attend_", "subgroupShuffleXor(send, 4u)", None, "subgroupShuffleXor(send, 2u)"), Attend, S),
        (m("wgsl attend workgroup variant: butterfly exchange partner 4 -> 2", Wgsl, "attend_", "wsm[(lid ^ 4u) * 4u + k]", None, "wsm[(lid ^ 2u) * 4u + k]"), Attend, W),
        (m("wgsl attend: the ring's keys lose every odd channel (the second multiply-add of a pair dropped)", Wgsl, "attend_", "a += qs[c0 + 2u * i + 1u] * x.y;", None, ""), Attend, S),
        (m("wgsl attend: the f16 codec's values lose every odd channel", Wgsl, "attend_", "(*vs).o[2u * i + 1u] += p[j] * x.y;", None, ""), Attend, S),
        (m("wgsl attend: the f16 codec's key rows all read the lane's first token", Wgsl, "attend_f16", "acc[j] = f16_dot(true, KP.rows + min(row + j, last) * AP.row_words, cg, h);", None, "acc[j] = f16_dot(true, KP.rows + min(row, last) * AP.row_words, cg, h);"), Attend, S),
        (m("wgsl attend: the ring's keys read as 16-byte words lose every odd channel", Wgsl, "attend_", "a += qs[i + 1u] * x.y;", None, ""), Attend, S),
        (m("wgsl attend: the f16 codec's key rows read their first 16-byte word again", Wgsl, "attend_", "let u = f16_quad(seg, true, a0 + k);", None, "let u = f16_quad(seg, true, a0);"), Attend, S),
        (m("wgsl attend: the f16 codec's value rows read their first 16-byte word again", Wgsl, "attend_", "let u = f16_quad(true, false, a0 + k);", None, "let u = f16_quad(true, false, a0);"), Attend, S),
        (m("wgsl attend: the ring's value rows read their first 16-byte word again", Wgsl, "attend_", "let u = f16_quad(false, false, a0 + k);", None, "let u = f16_quad(false, false, a0);"), Attend, S),
        (m("wgsl attend: f16 rows read as 16-byte words from head 0's channels", Wgsl, "attend_", "return (w + ((h * DIM + cg * R_CPL) >> 1u)) >> 2u;", None, "return (w + ((cg * R_CPL) >> 1u)) >> 2u;"), Attend, S),
        (m("wgsl attend: KIVI keys' params read as 16-byte words: every channel takes the first word's", Wgsl, "attend_kivi", "pw = kseg4[pq + i / 4u];", None, "pw = kseg4[pq];"), Attend, S),
        (m("wgsl attend: online-softmax rescale of l dropped", Wgsl, "attend_", "            l *= corr;\n            if (vring", None, "            if (vring"), Attend, S),
        // (The subgroup variant's vote runs only where a slice is one subgroup, not on
        // lavapipe's 8-wide subgroups; this rule is both variants'.)
        (m("wgsl attend: the reference max never moves past its first value", Wgsl, "attend_", "return any(x > m + DEC_TAU);", None, "return all(m == vec4<f32>(NEG)) && any(x > m + DEC_TAU);"), Attend, SW),
        (m("wgsl attend: online-softmax rescale of the accumulator dropped", Wgsl, "attend_", "v_scale(&vs, corr);", None, ""), Attend, S),
        (m("wgsl attend: window test inverted", Wgsl, "attend_", "pos + AP.window > p", None, "pos + AP.window <= p"), Attend, S),
        (m("wgsl merge: partial weight exponent sign flipped", Wgsl, "attend_merge", "w = exp2(q[b] - mm);", None, "w = exp2(mm - q[b]);"), Attend, S),
        (m("wgsl merge: each split's words weighted by its neighbour's weight", Wgsl, "attend_merge", "mgw[j + k], x0[k]", None, "mgw[j + (k ^ 1u)], x0[k]"), Attend, S),
        (m("wgsl prefill: accumulator rescale dropped", Wgsl, "attend_prefill", "o[j * PF_OC4 + k] *= corr[j];", None, "o[j * PF_OC4 + k] *= 1.0;"), Attend, S),
        (m("wgsl prefill: l not rescaled when the max moves", Wgsl, "attend_prefill", "*l = *l * corr + sum;", None, "*l = *l + sum;"), Attend, S),
        (m("wgsl prefill: the softmax's maxima not met (each invocation its own)", Wgsl, "attend_prefill", "mt = max(mt, pf_mx[k * PF_QB + v]);", None, "mt = max(mt, pf_mx[lid]);"), Attend, S),
        (m("wgsl prefill: the first part of l added in place of every part", Wgsl, "attend_prefill", "l += pf_mx[k * PF_QB + lid % PF_QB];", None, "l += pf_mx[lid % PF_QB];"), Attend, S),
        (m("wgsl prefill: codec-only key tiles stored token-major where the scores read them channel-major", Wgsl, "attend_prefill", "pf_kquad(t0 + 4u * (u % PF_TQ) - AP.tok0, kl, min(u / PF_TQ, DIM - 1u), h)", None, "pf_kquad(t0 + 4u * (u / PF_DP) - AP.tok0, kl, min(u % PF_DP, DIM - 1u), h)"), Attend, S),
        (m("wgsl prefill: whole-tile key quads stored token-major where the scores read them channel-major", Wgsl, "attend_prefill", "k_quad(t0 + 4u * (u % PF_TQ) - AP.tok0, min(u / PF_TQ, DIM - 1u), h)", None, "k_quad(t0 + 4u * (u / PF_DP) - AP.tok0, min(u % PF_DP, DIM - 1u), h)"), Attend, S),
        (m("wgsl prefill: whole-tile key quads read the next quad's tokens", Wgsl, "attend_prefill", "k_quad(t0 + 4u * (u % PF_TQ) - AP.tok0, min(", None, "k_quad(t0 + 4u * ((u + 1u) % PF_TQ) - AP.tok0, min("), Attend, S),
        (m("wgsl prefill: codec-only key quads read the next quad's tokens", Wgsl, "attend_prefill", "pf_kquad(t0 + 4u * (u % PF_TQ) - AP.tok0", None, "pf_kquad(t0 + 4u * ((u + 1u) % PF_TQ) - AP.tok0"), Attend, S),
        (m("wgsl prefill: KIVI's key quads take their codes one bit off", Wgsl, "attend_prefill", "kivi_reconstruct((w >> (j * KB)) & K_MASK, pr.x, pr.y)", None, "kivi_reconstruct((w >> (j * KB + 1u)) & K_MASK, pr.x, pr.y)"), Attend, S),
        (m("wgsl prefill: ring-only key tiles read the split's last row", Wgsl, "attend_prefill", "let pos = min(t0 + e % PF_TT, s1 - 1u);\n            pf_put_k(e, pf_ring(true,", None, "let pos = s1 - 1u;\n            pf_put_k(e, pf_ring(true,"), Attend, S),
        (m("wgsl prefill: mixed key tiles take every key from the codec", Wgsl, "attend_prefill", "            if (pos < AP.qk) {\n                x = k_value(", None, "            if (true) {\n                x = k_value("), Attend, S),
        (m("wgsl prefill: mixed value tiles take every value from the ring", Wgsl, "attend_prefill", "            if (!vring && pos < AP.qv) {\n                x = v_value(", None, "            if (false) {\n                x = v_value("), Attend, S),
        (m("wgsl prefill: codec-only value tiles read the next token's row", Wgsl, "attend_prefill", "pf_vquad(t0 + u / PF_VW4 - AP.tok0, vl,", None, "pf_vquad(t0 + u / PF_VW4 + 1u - AP.tok0, vl,"), Attend, S),
        (m("wgsl prefill: KIVI's value quads take their codes one bit off", Wgsl, "attend_prefill", "kivi_reconstruct((w >> (j * VB)) & V_MASK, pr.x, pr.y)", None, "kivi_reconstruct((w >> (j * VB + 1u)) & V_MASK, pr.x, pr.y)"), Attend, S),
        (m("wgsl prefill: f16 value quads swap their two words", Wgsl, "attend_prefill", "return vec4<f32>(unpack2x16float(vseg[w]), unpack2x16float(vseg[w + 1u]));", None, "return vec4<f32>(unpack2x16float(vseg[w + 1u]), unpack2x16float(vseg[w]));"), Attend, S),
        (m("wgsl prefill: the output tile reads the next channel group's values", Wgsl, "attend_prefill", "pf_kv[t * PF_WP / 4u + st * PF_OC4 + k]", None, "pf_kv[t * PF_WP / 4u + ((st + 1u) % PF_CG) * PF_OC4 + k]"), Attend, S),
        (m("wgsl prefill: window and sinks ignored", Wgsl, "attend_prefill", "visible(kp, AP.q_pos0 + v / AP.qg)", None, "kp <= AP.q_pos0 + v / AP.qg"), Attend, S),
        (m("wgsl prefill: ring-only key tiles read the value ring", Wgsl, "attend_prefill", "pf_ring(true, pos, AP.ring_cap_k, min(e / PF_TT, DIM - 1u), h)", None, "pf_ring(false, pos, AP.ring_cap_v, min(e / PF_TT, DIM - 1u), h)"), Attend, S),
        (m("wgsl prefill: the scores stop at half of their part's channels", Wgsl, "attend_prefill", "cb < (part + 1u) * PF_PC; cb += PF_CU", None, "cb < part * PF_PC + PF_PC / 2u; cb += PF_CU"), Attend, S),
        (m("wgsl prefill: the scores read the next vector quad's queries", Wgsl, "attend_prefill", "pf_q[(cb + i) * PF_Q4 + sq]", None, "pf_q[(cb + i) * PF_Q4 + (sq + 1u) % PF_Q4]"), Attend, S),
        (m("wgsl prefill: the scores read the next token's keys", Wgsl, "attend_prefill", "let at = (cb + i) * PF_TT + st;", None, "let at = (cb + i) * PF_TT + (st + 1u) % PF_TT;"), Attend, S),
        (m("wgsl prefill: every part's channels start at channel 0", Wgsl, "attend_prefill", "for (var cb = part * PF_PC;", None, "for (var cb = 0u;"), WideAttend, S),
        (m("wgsl prefill: the softmax adds part 1 in place of every other part", Wgsl, "attend_prefill", "pf_s[((pt + 1u) * PF_TT + t)", None, "pf_s[(1u * PF_TT + t)"), WideAttend, S),
        (m("wgsl prefill: no part masks its scores", Wgsl, "attend_prefill", "if (part == 0u) {", None, "if (false) {"), Attend, S),
        (m("wgsl prefill: the output tile's rescale reads token 0's weights", Wgsl, "attend_prefill", "var corr = pf_s[PF_FS + sq];", None, "var corr = pf_s[sq];"), Attend, S),
        (m("wgsl bits_unit: mantissa top off by one", Wgsl, "attend_", "let top = 23u - b;", None, "let top = 22u - b;"), Attend, S),
        // ---- attention over a cache that evicted tokens (key_pos / attend_key_pos) ----
        (m("wgsl attend (eviction): evicting cache's table ignored (slot as position)", Wgsl, "attend_", "return kseg[AP.pos_off + slot * AP.hkv + h];", None, "return slot;"), Positions, SW),
        (m("wgsl attend (eviction): slots past the table not shifted by the evicted count", Wgsl, "attend_", "return slot + AP.evicted;", None, "return slot;"), Positions, S),
        (m("wgsl attend (eviction): positions table read for the next KV head", Wgsl, "attend_", "kseg[AP.pos_off + slot * AP.hkv + h]", None, "kseg[AP.pos_off + slot * AP.hkv + (h + 1u) % AP.hkv]"), Positions, S),
        (m("wgsl attend (eviction): positions table's last row taken as a later slot", Wgsl, "attend_", "if (slot < AP.pos_rows) {", None, "if (slot + 1u < AP.pos_rows) {"), Positions, S),
        (m("msl attend (eviction): evicting cache's table ignored (slot as position)", Msl, "attend_", "return kseg[A.pos_off + slot * A.hkv + h];", None, "return slot;"), Positions, MSL),
        (m("msl attend (eviction): slots past the table not shifted by the evicted count", Msl, "attend_", "return slot + A.evicted;", None, "return slot;"), Positions, MSL),
        (m("wgsl evict_score (eviction): the tree's last step dropped", Wgsl, "evict_score", "for (var s = WORKGROUP_SIZE / 2u; s > 0u; s >>= 1u) {", None, "for (var s = WORKGROUP_SIZE / 2u; s > 1u; s >>= 1u) {"), Scores, W),
        (m("wgsl evict_score (eviction): every lane's subgroup sum kept", Wgsl, "evict_score", "red[lid] = select(0.0, s, sgl == 0u);", None, "red[lid] = s;"), Scores, S),
        (m("wgsl evict_score (eviction): head 0's filter for every head", Wgsl, "evict_score", "a += k * filters[e];", None, "a += k * filters[c];"), Scores, S),
        (m("wgsl evict_score (eviction): key norm's sign dropped", Wgsl, "evict_score", "return -sqrt(s);", None, "return sqrt(s);"), Scores, S),
        (m("msl evict_score (eviction): lane sums not added", Msl, "evict_score", "const float s = simd_sum(a);", None, "const float s = a;"), Scores, MSL),
        (m("msl evict_score (eviction): head 0's filter for every head", Msl, "evict_score", "a += k * filters[e];", None, "a += k * filters[c];"), Scores, MSL),
        (m("wgsl evict_compact (eviction): heads' bit masks dropped", Wgsl, "evict_compact", "out |= word & bit_mask(b - c * 32u, stop - c * 32u);", None, "out |= word;"), Compact, S),
        (m("wgsl evict_compact (eviction): head 0's keep list for every head", Wgsl, "evict_compact", "su = keep[h * P.kept + u];", None, "su = keep[u];"), Compact, S),
        (m("wgsl evict_compact (eviction): later units not moved down", Wgsl, "evict_compact", "dst[w] = src[P.src0 + (u - P.kept + P.keep_of) * unit_words + within];", None, "dst[w] = src[P.src0 + u * unit_words + within];"), Compact, S),
        (m("msl evict_compact (eviction): head 0's keep list for every head", Msl, "evict_compact", "su = keep[h * P.kept + u];", None, "su = keep[u];"), Compact, MSL),
        (m("msl evict_compact (eviction): one head per word", Msl, "evict_compact", "stop = min(end, (h + 1u) * P.head_bits);", None, "stop = end;"), Compact, MSL),
        (m("wgsl evict_select (eviction): ties evict the lower position (the index word c, not ~c)", Wgsl, "evict_select", "(k == nth.x && ~c > nth.y)", None, "(k == nth.x && c > nth.y)"), Select, S),
        (m("wgsl evict_select (eviction): the radix walk stops one digit early on an exact count", Wgsl, "evict_select", "if (below + x >= need || d == 255u) {", None, "if (below + x > need || d == 255u) {"), Select, S),
        (m("wgsl evict_select (eviction): the rank still needed not reduced by the digits below", Wgsl, "evict_select", "sel_pick = vec2<u32>(d, need - below);", None, "sel_pick = vec2<u32>(d, need);"), Select, S),
        (m("wgsl evict_select (eviction): a pass counts candidates that disagree with the digits found", Wgsl, "evict_select", "var agree = (k & above) == (found.x & above);", None, "var agree = true;"), Select, S),
        (m("wgsl evict_select (eviction): the index passes ignore the key", Wgsl, "evict_select", "agree = k == found.x && (w & above) == (found.y & above);", None, "agree = (w & above) == (found.y & above);"), Select, W),
        (m("wgsl evict_select (eviction): a unit's sum runs one token late", Wgsl, "evict_select", "s += scores[(t0 + t) * P.heads + h];", None, "s += scores[(t0 + t + 1u) * P.heads + h];"), Select, S),
        (m("wgsl evict_select (eviction): negative scores in bit order", Wgsl, "evict_select", "select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u)", None, "select(b | 0x80000000u, b, (b & 0x80000000u) != 0u)"), Select, S),
        (m("wgsl evict_select (eviction): a subgroup counts its own total as before it", Wgsl, "evict_select", "select(0u, totals[g], g < sg_id)", None, "select(0u, totals[g], g <= sg_id)"), Select, S),
        (m("wgsl evict_select (eviction): a chunk advances by the lane's own prefix", Wgsl, "evict_select", "placed += scan[WORKGROUP_SIZE - 1u];", None, "placed += scan[lid];"), Select, W),
        (m("msl evict_select (eviction): ties evict the lower position (the index word c, not ~c)", Msl, "evict_select", "(kc == nth.x && ~c > nth.y)", None, "(kc == nth.x && c > nth.y)"), Select, MSL),
        (m("msl evict_select (eviction): the counts not cleared between passes", Msl, "evict_select", "atomic_store_explicit(&hist[b], 0u, memory_order_relaxed);\n            }\n            // Every lane", None, "}\n            // Every lane"), Select, MSL),
        (m("msl evict_select (eviction): lane 0 walks the counts before every lane added its own", Msl, "evict_select", "            threadgroup_barrier(mem_flags::mem_threadgroup);\n            if (lid == 0u) {", None, "            if (lid == 0u) {"), Select, MSL),
        (m("msl evict_select (eviction): the keys read before every lane wrote them", Msl, "evict_select", "threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);", None, ""), Select, MSL),
        (m("msl evict_select (eviction): sinks not kept", Msl, "evict_select", "keep[h * P.kept + u] = u;", None, "keep[h * P.kept + u] = u + 1u;"), Select, MSL),
        (m("msl attend (eviction): positions table read for the next KV head", Msl, "attend_", "kseg[A.pos_off + slot * A.hkv + h]", None, "kseg[A.pos_off + slot * A.hkv + (h + 1u) % A.hkv]"), Positions, MSL),
        // ---- VecInfer LUT attention (issue 15's planted bugs) ----
        (m("msl vecinfer: LUT of the wrong query head (the 4 vectors' lanes rotated, f32 LUT)", Msl, "attend_vecinfer", "S.kvi_lut[e] = x;", None, "S.kvi_lut[e] = x.yzwx;"), VecInfer, MSL),
        (m("msl vecinfer: LUT of the wrong query head (the 4 vectors' lanes rotated, f16 LUT)", Msl, "attend_vecinfer", "S.kvi_lut[e] = half4(x);", None, "S.kvi_lut[e] = half4(x.yzwx);"), VecInfer, MSL),
        (m("msl vecinfer: LUT from the wrong KV head's codebook", Msl, "attend_vecinfer", "const uint cb0 = A.hkv * ATTEND_DIM + h * KVI_C * KVI_DS;", None, "const uint cb0 = A.hkv * ATTEND_DIM + ((h + 1u) % A.hkv) * KVI_C * KVI_DS;"), VecInfer, MSL),
        (m("msl vecinfer: lambda applied on the wrong side (q / lambda)", Msl, "attend_vecinfer", "x = S.qs[i] * as_type<float>(ktab[h * ATTEND_DIM + i]);", None, "x = S.qs[i] / as_type<float>(ktab[h * ATTEND_DIM + i]);"), VecInfer, MSL),
        (m("msl vecinfer: values transformed back without 1/sqrt(P)", Msl, "attend_", "        S.fin[i] *= c;\n", None, ""), VecInfer, MSL),
        (m("wgsl vecinfer: LUT of the wrong query head (the 4 vectors' lanes rotated, f16 LUT)", Wgsl, "attend_vecinfer", "vec2<u32>(pack2x16float(x.xy), pack2x16float(x.zw))", None, "vec2<u32>(pack2x16float(x.zw), pack2x16float(x.xy))"), VecInfer, S),
        (m("wgsl vecinfer: LUT of the wrong query head (the 4 vectors' lanes rotated, f32 LUT)", Wgsl, "attend_vecinfer", "kvi_lut[e] = x;", None, "kvi_lut[e] = x.yzwx;"), VecInfer, S),
        (m("wgsl vecinfer: lambda applied on the wrong side (q / lambda)", Wgsl, "attend_vecinfer", "x = qs[i] * bitcast<f32>(ktab[h * DIM + i]);", None, "x = qs[i] / bitcast<f32>(ktab[h * DIM + i]);"), VecInfer, SW),
        (m("wgsl vecinfer: codebook form reads the centroid's first coordinate only", Wgsl, "attend_vecinfer", "x += qp[s * KVI_DS + i] * kvi_cb[c * KVI_DS + i];", None, "x += qp[s * KVI_DS + i] * kvi_cb[c * KVI_DS];"), VecInfer, S),
        (m("msl vecinfer: codebook form staged from the wrong KV head", Msl, "attend_vecinfer", "S.kvi_cb[e] = as_type<float>(ktab[cb0 + e]);", None, "S.kvi_cb[e] = as_type<float>(ktab[cb0 + (e + KVI_C * KVI_DS) % (A.hkv * KVI_C * KVI_DS)]);"), VecInfer, MSL),
        (m("wgsl vecinfer: index of the next sub-vector (s + 1)", Wgsl, "attend_vecinfer", "a += kvi_score(s, bits_code(kseg[w], hi, at & 31u, KVI_B));", None, "a += kvi_score(min(s + 1u, KVI_NSUB - 1u), bits_code(kseg[w], hi, at & 31u, KVI_B));"), VecInfer, S),
        // ---- KIVI ----
        (m("msl kivi values: the parts' min turned into max", Msl, "kivi_quant_values", "lo = min(lo, part_lo[first + k]);", None, "lo = max(lo, part_lo[first + k]);"), Kivi, MSL),
        (m("msl kivi values: barrier before the parts' min and max removed", Msl, "kivi_quant_values", "threadgroup_barrier(mem_flags::mem_threadgroup);", Some(0), ""), Kivi, MSL),
        (m("msl kivi: rounding half up instead of half to even", Msl, "kivi_quant", "as_type<uint>(r + 8388608.0f) - 0x4b000000u", None, "uint(r + 0.5f)"), Kivi, MSL),
        (m("wgsl kivi: the 2^23 rounding constant's exponent off by one", Wgsl, "kivi_quant", "- 0x4b000000u", None, "- 0x4a800000u"), Kivi, SW),
        (m("msl bits_code: carry shift off by one", Msl, "kivi_dequant", "v |= hi << (32u - off);", None, "v |= hi << (31u - off);"), Kivi, MSL),
        (m("wgsl kivi values: a part's codes stored at its group's first word", Wgsl, "kivi_quant_values", " + part * PWORDS;", None, ";"), Kivi, SW),
        (m("wgsl kivi values: the group's last part left out of its max", Wgsl, "kivi_quant_values", "hi = max(hi, part_hi[first + k]);", None, "hi = max(hi, part_hi[first + min(k, LANES - 2u)]);"), Kivi, SW),
        (m("wgsl bits_code: carry shift off by one", Wgsl, "kivi_dequant", "v |= hi << (32u - off);", None, "v |= hi << (31u - off);"), Kivi, SW),
        (m("wgsl kivi keys: second channel's scale from the first one's lo", Wgsl, "kivi_quant_keys", "kivi_scale(lo.y, hi.y", None, "kivi_scale(lo.x, hi.y"), Kivi, SW),
        // ---- TurboQuant-Prod keys (the sketch correction of the score) ----
        (m("msl prod keys: sketch correction's sign flipped", Msl, "attend_turboquant_prod", "acc[j] += (n * rho) * cor[j];", None, "acc[j] -= (n * rho) * cor[j];"), ProdAttend, MSL),
        (m("wgsl prod keys: sketch correction's sign flipped", Wgsl, "attend_turboquant_prod", "acc[j] += (n * rho) * cor[j];", None, "acc[j] -= (n * rho) * cor[j];"), ProdAttend, SW),
        (m("wgsl prod keys: ρ read from the norms stream", Wgsl, "attend_turboquant_prod", "kseg[KP.rhos + r * nwn", None, "kseg[KP.norms + r * nwn"), ProdAttend, S),
        // ---- QJL keys (wgsl/qjl/qjl_attend_k_common.wgsl, shared with Prod) ----
        (m("msl qjl keys: nibble table's signs flipped", Msl, "attend_qjl", "t += ((e >> b) & 1u) != 0u ? x : -x;", None, "t += ((e >> b) & 1u) != 0u ? -x : x;"), QjlAttend, MSL),
        (m("msl qjl keys: barrier between the sketched query and its table removed", Msl, "attend_qjl", "    if (KQ_LUT) {\n        threadgroup_barrier(mem_flags::mem_threadgroup);", None, "    if (KQ_LUT) {\n"), QjlAttend, MSL),
        (m("msl qjl keys: nibble extraction off by one bit", Msl, "attend_qjl", "((bits >> (4u * n)) & 15u)", None, "((bits >> (4u * n + 1u)) & 15u)"), QjlAttend, MSL),
        (m("msl qjl keys: masked sums' constant term dropped", Msl, "attend_qjl", "acc[j] = 2.0f * pos - all;", None, "acc[j] = 2.0f * pos;"), QjlAttend, MSL),
        (m("wgsl qjl keys: nibble table's signs flipped", Wgsl, "attend_qjl", "t += select(-x, x, ((e >> b) & 1u) != 0u);", None, "t += select(x, -x, ((e >> b) & 1u) != 0u);"), QjlAttend, SW),
        (m("wgsl qjl keys: nibble extraction off by one bit", Wgsl, "attend_qjl", "((bits >> (4u * n)) & 15u)", None, "((bits >> (4u * n + 1u)) & 15u)"), QjlAttend, S),
        (m("wgsl qjl keys: the lane's table one group off", Wgsl, "attend_qjl", "let t0 = off + 4u * cg * KQ_CPL;", None, "let t0 = off + 4u * cg * KQ_CPL + 16u;"), QjlAttend, S),
        (m("wgsl qjl keys: masked sums' constant term dropped", Wgsl, "attend_qjl", "acc[j] = 2.0 * pos - all;", None, "acc[j] = 2.0 * pos;"), QjlAttend, S),
        // ---- bitpack ----
        (m("msl bitpack: low part shift sign flipped", Msl, "bitpack", "acc |= c << (start - bit0);", None, "acc |= c >> (start - bit0);"), Bitpack, MSL),
        (m("wgsl bitpack: low part shift sign flipped", Wgsl, "bitpack", "acc |= c << (start - bit0);", None, "acc |= c >> (start - bit0);"), Bitpack, SW),
    ]
}

/// Small attention cases covering splits + merge, a wrapped ring, a window with sinks,
/// GQA and the f16 codec.
fn attend_cases() -> Vec<Case> {
    let base = Case {
        what: "",
        method: "kivi:bits=2,group=32,residual=32",
        t: 1,
        tq: 1,
        hq: 8,
        hkv: 2,
        d: 64,
        opts: AttendOptions::default(),
        seg_tokens: 1 << 20,
        ring_extra: 0,
        target: 256,
    };
    vec![
        // One split per vector over 1200 tokens: every slice loops over many tiles, so the
        // running maximum grows inside a slice and the online-softmax rescale matters (its
        // keys rise along the cache: run_attend).
        Case {
            what: "mutants: decode f16 keys / kivi-4 values, one long split",
            method: "f16/kivi:bits=4,group=32,residual=32",
            t: 1200,
            tq: 2,
            target: 1,
            ..base
        },
        // D = 128: a lane owns 16 channels of every row, two 16-byte words of f16 (D = 64: 8,
        // one word).
        Case {
            what: "mutants: decode kivi-4 GQA 4, D = 128, wrapped ring, splits",
            method: "kivi:bits=4,group=32,residual=32",
            t: 300,
            d: 128,
            ring_extra: 9,
            target: 24,
            ..base
        },
        // D = 80: a lane's f16 rows are pairs of channels, not whole 16-byte words (ring keys,
        // f16 values).
        Case {
            what: "mutants: decode kivi-2 keys / f16 values, D = 80, ring",
            method: "kivi:bits=2,group=32/f16:residual=32",
            t: 100,
            d: 80,
            target: 8,
            ..base
        },
        // The f16 codec on both sides, its rows as 16-byte words.
        Case {
            what: "mutants: decode f16 keys and values, D = 128, splits",
            method: "f16",
            t: 200,
            d: 128,
            target: 16,
            ..base
        },
        // KIVI G = 4 with a residual of 8: Q of both sides off the prefill kernel's 16-token
        // tiles, and one split over the codec's rows and the ring's (the ring's values join
        // the codec's accumulator): the prefill kernel's mixed tiles.
        Case {
            what: "mutants: decode kivi-4 G=4 residual 8, Q off the 16-token tiles, one split",
            method: "kivi:bits=4,group=4,residual=8",
            t: 207,
            tq: 2,
            target: 1,
            ..base
        },
        Case {
            what: "mutants: prefill Tq=5 window 70 sinks 3, kivi-2, two segments",
            t: 400,
            tq: 5,
            opts: AttendOptions::default().window(Some(70)).sinks(3),
            seg_tokens: 256,
            target: 16,
            ..base
        },
    ]
}

/// D = 256 (the prefill kernel's 8-token tiles, 16 vectors, scores in four parts), GQA 2, a
/// causal chunk of 3 rows over a wrapped ring.
fn wide_cases() -> Vec<Case> {
    vec![Case {
        what: "mutants: prefill Tq=3 kivi-4, D = 256, wrapped ring",
        method: "kivi:bits=4,group=16,residual=16",
        t: 90,
        tq: 3,
        hq: 2,
        hkv: 1,
        d: 256,
        opts: AttendOptions::default(),
        seg_tokens: 1 << 20,
        ring_extra: 5,
        target: 4,
    }]
}

/// One TurboQuant-Prod case (keys only: f16 values), splits + merge over a wrapped ring.
fn prod_cases() -> Vec<Case> {
    vec![Case {
        what: "mutants: decode turboquant-prod 3-bit keys / f16 values, wrapped ring, splits",
        method: "turboquant-prod:bits=3/f16:residual=16",
        t: 200,
        tq: 1,
        hq: 4,
        hkv: 2,
        d: 64,
        opts: AttendOptions::default(),
        seg_tokens: 1 << 20,
        ring_extra: 5,
        target: 16,
    }]
}

/// The first case ("one long split") with keys rising along the cache (tests/common/
/// tc_decode.rs): scores pass the decode kernel's reference max by more than its slack
/// (DEC_TAU) inside a slice, so its rescale runs (random keys rarely move it after a slice's
/// first tile).
fn run_attend(t: &Target, seed: u64) {
    let cases = attend_cases().into_iter().enumerate();
    run_attend_rising(t, seed, cases.map(|(i, c)| (c, i == 0)).collect());
}

/// QJL keys: m = 96 (pieces straddle words) by the nibble table, m = 64 by masked sums.
fn qjl_cases() -> Vec<(Case, u32)> {
    let base = Case {
        what: "mutants: decode qjl m=96 keys (nibble table) / kivi-4 values, wrapped ring, splits",
        method: "qjl:m=96/kivi:bits=4,group=32,residual=32",
        t: 200,
        tq: 1,
        hq: 4,
        hkv: 2,
        d: 64,
        opts: AttendOptions::default(),
        seg_tokens: 1 << 20,
        ring_extra: 5,
        target: 16,
    };
    vec![
        (base, 32 * 1024),
        (
            Case {
                what: "mutants: decode qjl m=64 keys (masked sums) / f16 values",
                method: "qjl:m=64/f16:residual=16",
                ..base
            },
            16 * 1024,
        ),
    ]
}

fn run_attend_cases(t: &Target, seed: u64, cases: Vec<Case>) {
    run_attend_cases_at(t, seed, cases.into_iter().map(|c| (c, 16 * 1024)).collect());
}

/// Each case with its codecs planned for `limit` bytes of workgroup storage.
fn run_attend_cases_at(t: &Target, seed: u64, cases: Vec<(Case, u32)>) {
    let cases = cases.into_iter().map(|(c, l)| (c, l, false)).collect();
    run_attend_inputs(t, seed, cases);
}

/// Each case (16 KiB of workgroup storage), its keys rising along the cache where marked
/// (tests/common/tc_decode.rs).
fn run_attend_rising(t: &Target, seed: u64, cases: Vec<(Case, bool)>) {
    let cases = cases.into_iter().map(|(c, r)| (c, 16 * 1024, r)).collect();
    run_attend_inputs(t, seed, cases);
}

/// Each case with its codecs planned for `limit` bytes of workgroup storage and, where
/// marked, rising keys.
fn run_attend_inputs(t: &Target, seed: u64, cases: Vec<(Case, u32, bool)>) {
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for (c, limit, rising) in cases {
        let cpu = Context::cpu()
            .with_max_workgroup_storage_size(limit)
            .expect("limit");
        let (q, mut k, v) = common::attend_plans::qkv(&mut rng, &c);
        if rising {
            let scale = c.opts.scale.unwrap_or(1.0 / (c.d as f32).sqrt());
            common::tc_decode::rising_past(&q, &mut k, c.hq, c.hkv, c.d, scale);
        }
        let method = Method::parse(c.method).expect("method");
        let mut layer = Layer::new(&cpu, c.hkv, c.d, &method, PathChoice::Cpu).expect("layer");
        layer
            .append(Input::F32(&k), Input::F32(&v))
            .expect("append");
        let reference = layer.attend(&q, c.hq, &c.opts).expect("reference");
        common::attend_plans::check_case(t, &c, &layer, &q, &reference);
    }
}

fn run_kivi(t: &Target, seed: u64) {
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for (cfg, h, d, blocks, from_ring, dst_blocks, amp) in common::kivi_plans::configs() {
        let c = common::kivi_plans::case(&mut rng, &cfg, h, d, blocks, from_ring, dst_blocks, amp);
        common::kivi_plans::check(t, &c, "mutants");
    }
}

fn run_bitpack(t: &Target, seed: u64) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for bits in 1..=8u32 {
        let n = 1000;
        let codes: Vec<u8> = (0..n)
            .map(|_| rng.random_range(0..(1u32 << bits)) as u8)
            .collect();
        // The oracle: stream bit k = bit k of the code stream, one bit at a time.
        let mut want = vec![0u32; kvpack::packed_words(n, bits).expect("words")];
        for (i, &c) in codes.iter().enumerate() {
            for b in 0..bits as usize {
                let k = i * bits as usize + b;
                want[k / 32] |= ((u32::from(c) >> b) & 1) << (k % 32);
            }
        }
        let mut storage = vec![
            codes.clone(),
            bytemuck::cast_slice(&vec![common::POISON; want.len()]).to_vec(),
        ];
        common::run_plan(
            t,
            &kvpack::bitpack::plan_pack(n, bits).expect("plan"),
            &mut storage,
        )
        .unwrap_or_else(|e| panic!("{}: bitpack: {e}", t.name()));
        let got: Vec<u32> = bytemuck::pod_collect_to_vec(&storage[1]);
        assert_eq!(got, want, "{}: bitpack b={bits}", t.name());
    }
}

fn run_vecinfer(t: &Target) {
    for lc in common::vecinfer_calib::lut_cases(None, false) {
        common::vecinfer_calib::check_lut_case(t, &lc);
    }
}

fn run(check: Check, t: &Target, seed: u64) {
    if t.ctx().tensor_cores_emulated() {
        // The emulated tensor-core prefill kernel's own cases (every other kernel runs on
        // the plain targets).
        if check == Check::Attend {
            let cases = common::tc_emulated::plan_cases().into_iter();
            run_attend_rising(
                t,
                seed,
                cases.map(|c| (c, c.what.contains("keys rising"))).collect(),
            );
        }
        return;
    }
    match check {
        Check::Attend => run_attend(t, seed),
        Check::WideAttend => run_attend_cases(t, seed, wide_cases()),
        Check::Kivi => run_kivi(t, seed),
        Check::Bitpack => run_bitpack(t, seed),
        Check::VecInfer => run_vecinfer(t),
        Check::ProdAttend => run_attend_cases(t, seed, prod_cases()),
        Check::QjlAttend => run_attend_cases_at(t, seed, qjl_cases()),
        Check::Positions => {
            use rand::SeedableRng;
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            common::positions::check_all(t, &mut rng);
        }
        Check::Scores => {
            use rand::SeedableRng;
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            common::scores::check_all(t, &mut rng);
        }
        Check::Compact => {
            use rand::SeedableRng;
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            common::compact::check_all(t, &mut rng);
        }
        Check::Select => {
            use rand::SeedableRng;
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            common::select::check_all(t, &mut rng);
        }
        Check::TensorRows => {
            // Only where the tensor-core kernels run (elsewhere the cases prove nothing new).
            if common::attend_plans::tensor_cores(t).is_ok() {
                run_attend_rising(t, seed, common::tc_decode::cases());
            }
        }
    }
}

/// The targets of `kinds` (after a visible skip where one cannot run).
fn targets(kinds: &[&str]) -> Vec<Target> {
    kinds
        .iter()
        .filter_map(|k| common::target(k, "mutants"))
        .collect()
}

#[test]
fn every_mutant_is_caught() {
    let seed = {
        use rand::Rng;
        common::rng("mutants").random::<u64>()
    };
    // The unmutated kernels pass the same checks (or the mutants prove nothing).
    let filter = std::env::var("KVPACK_MUTANT_FILTER").unwrap_or_default();
    // The targets of the mutants that run (all of them without a filter).
    let mut kinds: Vec<&str> = Vec::new();
    for (mutant, _, ks) in registry() {
        if mutant.name.contains(&filter) {
            for k in ks {
                if !kinds.contains(k) {
                    kinds.push(k);
                }
            }
        }
    }
    for t in targets(&kinds) {
        for check in [
            Check::Attend,
            Check::Kivi,
            Check::Bitpack,
            Check::VecInfer,
            Check::ProdAttend,
            Check::QjlAttend,
            Check::Positions,
            Check::Scores,
            Check::Compact,
            Check::Select,
            Check::TensorRows,
        ] {
            run(check, &t, seed);
        }
    }
    let (mut total, mut caught, mut ran) = (0, 0, 0);
    let mut escaped = Vec::new();
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    for (mutant, check, kinds) in registry() {
        if !mutant.name.contains(&filter) {
            continue;
        }
        total += 1;
        for t in targets(kinds) {
            ran += 1;
            let start = std::time::Instant::now();
            let (r, applied) = with_mutant(mutant, || run(check, &t, seed));
            let msg = match &r {
                Ok(()) => String::new(),
                Err(e) => e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default(),
            };
            let verdict = if applied == 0 {
                "INVALID (its text occurs in no kernel that ran)"
            } else if msg.contains("compiling msl/") || msg.contains("Shader") {
                "INVALID (does not compile)"
            } else if r.is_err() {
                "caught"
            } else {
                "ESCAPED"
            };
            eprintln!(
                "mutant [{}] {:?}: {verdict} ({applied} replacements, {:.1}s){}",
                t.name(),
                mutant.name,
                start.elapsed().as_secs_f64(),
                if r.is_err() {
                    format!(
                        ": {}",
                        msg.lines()
                            .next()
                            .unwrap_or("")
                            .chars()
                            .take(160)
                            .collect::<String>()
                    )
                } else {
                    String::new()
                }
            );
            if verdict == "caught" {
                caught += 1;
            } else {
                escaped.push(format!("[{}] {}: {verdict}", t.name(), mutant.name));
            }
        }
    }
    std::panic::set_hook(quiet);
    eprintln!("mutants: {total} mutants, {ran} runs (mutant x target), {caught} caught");
    assert!(
        escaped.is_empty(),
        "mutants not caught (derived seed {seed}; replay with the KVPACK_SEED printed first):\n  {}",
        escaped.join("\n  ")
    );
}
