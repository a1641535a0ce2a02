//! Attention kernels run from their dispatch plans over a layer's stored words laid out as the
//! GPU store lays them out (tests/attend_kernels.rs describes the layout; the mask oracle and
//! the mutation harness run the same plans).

use super::{POISON, Target, run_plan};
use kvpack::attention::gpu::dispatch_plans;
use kvpack::attention::plan::{CacheShape, Call, KeyPositions, plan, plan_kernel};
use kvpack::codec::Codec;
use kvpack::cpu::attend::Positions;
use kvpack::store::Side;
use kvpack::store::{SideWords, Snapshot};
use kvpack::{AttendKernel, AttendOptions, Error, KvLayer, Layer};
use rand::Rng;

#[derive(Clone, Copy)]
pub struct Case {
    pub what: &'static str,
    pub method: &'static str,
    pub t: usize,
    pub tq: usize,
    pub hq: usize,
    pub hkv: usize,
    pub d: usize,
    pub opts: AttendOptions,
    /// Tokens per segment (both sides), a multiple of 32 and of the block sizes.
    pub seg_tokens: usize,
    /// Extra ring rows beyond what the window needs (the ring wraps at other places).
    pub ring_extra: usize,
    /// Workgroups the plan aims at (small: long splits; large: many splits).
    pub target: usize,
}

pub fn qkv(rng: &mut impl Rng, c: &Case) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    super::random_qkv(rng, c.t, c.tq, c.hq, c.hkv, c.d)
}

/// The `ATT_SG_WIDE` class a target's kernels are specialized for: the device's own on WGSL
/// (`attention::gpu::wide_subgroups`), always wide on MSL (SIMD groups of 32; the MSL attention
/// kernels are written for 32 lanes and take no such constant), irrelevant on the CPU.
pub fn wide_for(t: &Target) -> bool {
    match t {
        Target::Wgsl(ctx, _) => kvpack::attention::gpu::wide_subgroups(ctx),
        _ => true,
    }
}

/// One segment buffer's bytes and its streams' byte ranges.
pub type SegmentBytes = (Vec<u8>, Vec<(u64, u64)>);

pub fn bytes(w: &[u32]) -> Vec<u8> {
    bytemuck::cast_slice(w).to_vec()
}

/// One side's segment buffers (streams of blocks of tokens [d·S, min((d+1)·S, Q)), each at a
/// 16-byte aligned word offset) and their byte ranges.
pub fn segments(codec: &dyn Codec, w: &SideWords, seg_tokens: usize) -> Vec<SegmentBytes> {
    let g = codec.block_tokens();
    let mut out = Vec::new();
    let mut a = 0;
    while a < w.quantized {
        let b = (a + seg_tokens).min(w.quantized);
        let mut buf: Vec<u32> = Vec::new();
        let mut ranges = Vec::new();
        for (st, words) in codec.streams().iter().zip(&w.streams) {
            let wpb = st.words_per_block;
            buf.resize(buf.len().div_ceil(4) * 4, POISON);
            let part = &words[a / g * wpb..b / g * wpb];
            ranges.push(((buf.len() * 4) as u64, (part.len() * 4) as u64));
            buf.extend_from_slice(part);
        }
        out.push((bytes(&buf), ranges));
        a = b;
    }
    out
}

/// A ring of `cap` f16 rows holding tokens [q, t) at slot s % cap, the other slots NaN; a
/// side without residual tokens gets the store's one-word placeholder (the MSL emulator then
/// catches any read of it).
pub fn ring(w: &SideWords, t: usize, cap: usize, row: usize) -> Vec<u8> {
    if w.quantized == t {
        return bytes(&[POISON]);
    }
    let rw = row.div_ceil(2);
    let mut words = vec![0x7e00_7e00u32; cap * rw];
    for s in w.quantized..t {
        let r = &w.residual[(s - w.quantized) * row..][..row];
        let slot = (s % cap) * rw;
        words[slot..slot + rw].fill(0);
        for (e, x) in r.iter().enumerate() {
            words[slot + e / 2] |= u32::from(x.to_bits()) << (16 * (e % 2));
        }
    }
    bytes(&words)
}

/// Runs the kernels of one call on `t` over the layer's words laid out as described above (the
/// kernel choice's error, if any: a prefill call on keys that transform the query).
pub fn on_target(
    t: &Target,
    c: &Case,
    layer: &Layer,
    snap: &Snapshot,
    q: &[f32],
) -> Result<(Vec<f32>, usize, bool), Error> {
    on_target_at(t, c, layer, snap, q, None)
}

/// [`on_target`] for a cache that evicted tokens: the held tokens sit at `positions` (the
/// table `[rows][Hkv]` laid, as the GPU store lays it, after the codec's streams in the key
/// side's segment 0, 16-byte aligned; `positions.appended − c.t` tokens evicted), the kernels
/// built with `ATT_POS = 1`.
pub fn on_target_at(
    t: &Target,
    c: &Case,
    layer: &Layer,
    snap: &Snapshot,
    q: &[f32],
    positions: Option<&Positions<'_>>,
) -> Result<(Vec<f32>, usize, bool), Error> {
    let (k, v) = (layer.codec(Side::Keys), layer.codec(Side::Values));
    let mut ks = segments(k, &snap.keys, c.seg_tokens);
    let key_positions = positions.map(|p| {
        let seg0 = ks
            .first_mut()
            .expect("a table needs the key side's segment 0");
        let mut words: Vec<u32> = bytemuck::pod_collect_to_vec(&seg0.0);
        words.resize(words.len().div_ceil(4) * 4, POISON);
        let offset = words.len();
        words.extend_from_slice(p.table);
        seg0.0 = bytes(&words);
        KeyPositions {
            offset,
            rows: p.table.len() / c.hkv,
            evicted: p.appended - c.t,
        }
    });
    let row = c.hkv * c.d;
    let caps = [&snap.keys, &snap.values].map(|w| (c.t - w.quantized).max(1) + c.ring_extra);
    let shape = CacheShape {
        qk: snap.keys.quantized,
        qv: snap.values.quantized,
        seg_tokens: c.seg_tokens,
        ring_cap: caps,
        row_words: row.div_ceil(2),
        value_dim: v.value_dim(),
        value_space_out: v.attend_value_space_out(),
        key_prep: k.attend_hooks().k_prep,
        ring: layer.has_ring(),
        positions: key_positions,
    };
    let call = Call {
        tq: c.tq,
        hq: c.hq,
        hkv: c.hkv,
        dim: c.d,
        tokens: c.t,
        opts: c.opts,
    };
    let wide = wide_for(t);
    let tensor = tensor_cores(t);
    let tiles = kvpack::attention::gpu::tiles(k, v);
    let kernel = match call.split_kernel(&shape, 1 << 16, &tensor, &tiles) {
        Ok(k) => k,
        Err(e) => {
            if matches!(e, Error::Config(_)) {
                // The dispatch plans refuse a prefill plan on their own too (a shape that does
                // not say the keys transform the query must not reach a kernel that is not
                // there).
                let p = plan(&call, &shape, c.target, 1 << 30, true).expect("plan");
                let r = dispatch_plans(&call, &p, k, v, wide, layer.has_ring());
                assert!(
                    matches!(r, Err(Error::Config(_))),
                    "{}: a prefill plan on {} keys must be refused by the dispatch plans",
                    c.what,
                    c.method
                );
            }
            return Err(e);
        }
    };
    let p = plan_kernel(&call, &shape, c.target, 1 << 30, kernel).expect("plan");
    let (dispatches, merge) =
        dispatch_plans(&call, &p, k, v, wide, layer.has_ring()).expect("dispatch plans");
    let vs = segments(v, &snap.values, c.seg_tokens);
    let rings = [
        ring(&snap.keys, c.t, caps[0], row),
        ring(&snap.values, c.t, caps[1], row),
    ];
    let out_len = c.tq * c.hq * c.d * 4;
    let poison_f32 = |n: usize| bytes(&vec![0x7fc0_0000u32; n.div_ceil(4)]);
    let mut partials = if p.merge.is_some() {
        poison_f32(p.partial_bytes as usize)
    } else {
        poison_f32(out_len)
    };
    let placeholder = bytes(&[0u32]);
    // A codec's tables are bound whether or not its side holds quantized tokens.
    let tables = |codec: &dyn Codec| {
        if codec.tables().is_empty() {
            placeholder.clone()
        } else {
            bytes(codec.tables())
        }
    };
    let uni = |codec: &dyn Codec, s: Option<&SegmentBytes>| {
        codec.attend_uniform(s.map(|x| x.1.as_slice()))
    };
    for (d, dp) in p.dispatches.iter().zip(&dispatches) {
        let (kseg, vseg) = (ks.get(d.segment), vs.get(d.segment));
        let kb = kseg.map_or(placeholder.clone(), |s| s.0.clone());
        let vb = vseg.map_or(placeholder.clone(), |s| s.0.clone());
        let mut bufs = vec![
            uni(k, kseg),
            uni(v, vseg),
            bytes(bytemuck::cast_slice(q)),
            std::mem::take(&mut partials),
            kb.clone(),
            tables(k),
            vb.clone(),
            tables(v),
            rings[0].clone(),
            rings[1].clone(),
            // Bindings 11-14: the same buffers as 16-byte words (kvpack binds each buffer
            // twice; here copies of the same bytes, padded to whole 16-byte words).
            pad16(kb),
            pad16(vb),
            pad16(rings[0].clone()),
            pad16(rings[1].clone()),
        ];
        run_plan(t, dp, &mut bufs)
            .unwrap_or_else(|e| panic!("{} {}: partials: {e}", t.name(), c.what));
        partials = std::mem::take(&mut bufs[3]);
    }
    let direct = merge.is_none();
    let out = match merge {
        None => partials,
        Some(mp) => {
            let last = ks.last();
            let mut bufs = vec![
                uni(k, last),
                uni(v, vs.last()),
                partials,
                poison_f32(out_len),
                placeholder.clone(),
                placeholder.clone(),
                placeholder.clone(),
                tables(v),
                placeholder.clone(),
                placeholder.clone(),
                pad16(placeholder.clone()),
                pad16(placeholder.clone()),
                pad16(placeholder.clone()),
                pad16(placeholder.clone()),
            ];
            run_plan(t, &mp, &mut bufs)
                .unwrap_or_else(|e| panic!("{} {}: merge: {e}", t.name(), c.what));
            std::mem::take(&mut bufs[3])
        }
    };
    Ok((
        bytemuck::pod_collect_to_vec(&out[..out_len]),
        p.dispatches.len(),
        direct,
    ))
}

/// `b` zero-padded to whole 16-byte words (a binding the kernel reads as `array<vec4<u32>>`).
fn pad16(mut b: Vec<u8>) -> Vec<u8> {
    b.resize(b.len().div_ceil(16).max(1) * 16, 0);
    b
}

/// Whether `t`'s device runs the tensor-core kernel (WGSL targets only), or why not.
pub fn tensor_cores(t: &Target) -> Result<(), String> {
    match t {
        Target::Wgsl(ctx, _) => ctx.tensor_cores(),
        _ => Err(format!("{} is not a WGSL target", t.name())),
    }
}

/// The kernels of one case on `t` (decode and prefill kernel) against the CPU reference
/// `reference` on the same layer's words: relative L2 ≤ 1e-4 per row (spec/attention.md).
pub fn check_case(t: &Target, c: &Case, layer: &Layer, q: &[f32], reference: &[f32]) {
    check_case_within(t, c, layer, q, reference, 1e-4);
}

/// [`check_case`] with the bound `tol` a variant's spec sets (VecInfer's f16 LUT: 1e-3).
pub fn check_case_within(
    t: &Target,
    c: &Case,
    layer: &Layer,
    q: &[f32],
    reference: &[f32],
    tol: f64,
) {
    check_case_at(t, c, layer, q, reference, tol, None);
}

/// [`check_case_within`] for a cache whose held tokens sit at `positions` ([`on_target_at`]).
pub fn check_case_at(
    t: &Target,
    c: &Case,
    layer: &Layer,
    q: &[f32],
    reference: &[f32],
    tol: f64,
    positions: Option<&Positions<'_>>,
) {
    let snap = layer.snapshot().expect("snapshot");
    // Every case on both kernels (the prefill kernel also at Tq = 1: windows, rings,
    // widths and segments are its as much as the decode kernel's), and on the tensor-core
    // kernel where the target's device runs it (f16 products: spec/attention.md's 1e-3).
    let mut kernels = vec![AttendKernel::Decode, AttendKernel::Prefill];
    if t.ctx().tensor_cores_emulated() {
        // An emulating handle (Context::with_emulated_tensor_cores): the tensor-core prefill
        // kernel only (the other kernels run on the plain targets).
        kernels = vec![AttendKernel::Tensor];
    } else if tensor_cores(t).is_ok() {
        kernels.push(AttendKernel::Tensor);
        kernels.push(AttendKernel::TensorDecode);
    }
    let tiles = kvpack::attention::gpu::tiles(layer.codec(Side::Keys), layer.codec(Side::Values));
    for kernel in kernels {
        let tol = if matches!(kernel, AttendKernel::Tensor | AttendKernel::TensorDecode) {
            super::tc_emulated::bound(t.ctx(), c.method).max(tol)
        } else {
            tol
        };
        let c = Case {
            opts: c.opts.kernel(kernel),
            ..*c
        };
        let got = on_target_at(t, &c, layer, &snap, q, positions);
        if kernel == AttendKernel::TensorDecode && (tiles.is_err() || !c.d.is_multiple_of(16)) {
            // Pairs without tile hooks (or widths off 16) are refused, typed, naming why.
            match got {
                Err(Error::PathUnavailable { reason, .. }) => {
                    eprintln!(
                        "attend_kernels[{}] {} ({}, TensorDecode): refused as it must be: {reason}",
                        t.name(),
                        c.what,
                        c.method
                    );
                    continue;
                }
                Err(e) => panic!("{}: tensor decode without tile hooks: {e}", c.what),
                Ok(_) => panic!("{}: tensor decode without tile hooks ran", c.what),
            }
        }
        let k_prep = layer.codec(Side::Keys).attend_hooks().k_prep;
        if kernel != AttendKernel::Decode && k_prep {
            match got {
                Err(Error::Config(m)) if m.contains("prefill") || m.contains("tensor-core") => {
                    eprintln!(
                        "attend_kernels[{}] {} ({}, Prefill): refused as it must be: {m}",
                        t.name(),
                        c.what,
                        c.method
                    );
                    continue;
                }
                Err(e) => panic!("{}: prefill on query-transforming keys: {e}", c.what),
                Ok(_) => panic!("{}: prefill on query-transforming keys ran", c.what),
            }
        }
        let (out, dispatches, direct) =
            got.unwrap_or_else(|e| panic!("{} {kernel:?}: {e}", c.what));
        let err = super::rel_l2_rows(&out, reference, c.d);
        eprintln!(
            "attend_kernels[{}] {} ({}, {kernel:?}): Qk={} Qv={} {dispatches} dispatches, direct {direct}: worst row rel L2 {err:e}",
            t.name(),
            c.what,
            c.method,
            snap.keys.quantized,
            snap.values.quantized
        );
        assert!(
            err <= tol,
            "{} {} ({}, {kernel:?}): worst row rel L2 {err:e} against the reference",
            t.name(),
            c.what,
            c.method
        );
    }
}
