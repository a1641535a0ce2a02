//! Recording one attention call on the GPU: the partials kernel of the layer's (key codec,
//! value codec) pair once per segment index ([`super::plan`]), then the merge (unless one split
//! served every vector), all in one compute pass.

use super::kernel;
use super::plan::{self, CacheShape, Call, Plan};
use crate::codec::{Codec, SegmentRef};
use crate::context::{Context, KernelPath, PathChoice};
use crate::error::{Error, Result};
use crate::gpu::{self, Bind, DispatchPlan, registry};

/// What the attention kernels read of one side of a layer.
pub struct SideBuffers<'a> {
    /// The side's codec.
    pub codec: &'a dyn Codec,
    /// Its segments, by index (each from block 0).
    pub segments: Vec<SegmentRef<'a>>,
    /// Its residual ring, if it has one.
    pub ring: Option<&'a wgpu::Buffer>,
    /// Its codec's tables (bound even before the side has a segment: a hook may read them
    /// for tokens that are all in the ring, e.g. a rotation of the query or of the output).
    pub tables: &'a wgpu::Buffer,
}

/// The kernels one call runs on, resolved for a path choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttendPaths {
    /// The partials kernel `attend_<k>_<v>`.
    pub partials: KernelPath,
    /// The prefill kernel `attend_prefill_<k>_<v>` (`None` for a key codec that transforms the
    /// query: [`kernel::AttendHooks::k_prep`]).
    pub prefill: Option<KernelPath>,
    /// The tensor-core prefill kernel `attend_prefill_tc_<k>_<v>`, where the device runs it
    /// (else why not) and the key codec does not transform the query (`None`).
    pub tensor: Option<std::result::Result<KernelPath, String>>,
    /// The tensor-core decode kernel `attend_decode_tc_<k>_<v>` (`attend_decode_tc_rows_<k>_<v>`
    /// for f16 rows on both sides) where the device runs it (else why not) and both codecs have
    /// tile hooks (`None`).
    pub tensor_decode: Option<std::result::Result<KernelPath, String>>,
    /// The merge kernel `attend_merge_<k>_<v>`.
    pub merge: KernelPath,
}

impl AttendPaths {
    /// Resolves both kernels of the (key, value) codec pair for `choice`.
    pub fn resolve(
        ctx: &Context,
        k: &dyn Codec,
        v: &dyn Codec,
        choice: PathChoice,
    ) -> Result<Self> {
        let (kh, vh) = (k.attend_hooks(), v.attend_hooks());
        // A codec whose hooks have no WGSL (TurboQuant-Prod's placeholder) is refused here,
        // before any kernel is composed: no silent CPU fallback, no shader error.
        for (h, src, side) in [(kh, kh.wgsl_k, "keys"), (vh, vh.wgsl_v, "values")] {
            if !src.contains("fn ") {
                return Err(Error::PathUnavailable {
                    kernel: h.name,
                    requested: choice.to_string(),
                    reason: format!(
                        "{} has no GPU attention hooks for {side} yet; attend on the CPU path",
                        h.name
                    ),
                });
            }
        }
        Ok(Self {
            partials: ctx.resolve(kernel::partials(kh, vh), choice)?,
            prefill: match kernel::prefill(kh, vh) {
                Some(def) => Some(ctx.resolve(def, choice)?),
                None => None,
            },
            tensor: kernel::tensor(kh, vh).map(|def| {
                ctx.resolve(def, choice).map_err(|e| match e {
                    Error::PathUnavailable { reason, .. } => reason,
                    other => other.to_string(),
                })
            }),
            tensor_decode: kernel::tensor_decode(kh, vh).map(|def| {
                ctx.resolve(def, choice).map_err(|e| match e {
                    Error::PathUnavailable { reason, .. } => reason,
                    other => other.to_string(),
                })
            }),
            merge: ctx.resolve(kernel::merge(kh, vh), choice)?,
        })
    }
}

/// Whether every subgroup of the device is at least 32 wide (a slice is one subgroup).
pub fn wide_subgroups(ctx: &Context) -> bool {
    ctx.adapter_info()
        .is_some_and(|i| i.subgroup_min_size >= 32)
}

/// A measuring knob's value: environment variable `var` as a number up to `max`, else 0 (the
/// kernels as shipped). Read once per process (every attention call builds the
/// specialization: reading the environment each time cost ~1 µs of host time a call).
fn measuring_knob(var: &'static str, max: u32) -> u32 {
    static READ: std::sync::Mutex<Vec<(&str, u32)>> = std::sync::Mutex::new(Vec::new());
    let mut read = READ.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, v)) = read.iter().find(|(n, _)| *n == var) {
        return v.min(max);
    }
    let v = std::env::var(var)
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|v| *v <= max)
        .unwrap_or(0);
    read.push((var, v));
    v
}

/// The specialization of both kernels: head width, the subgroup width class (`wide`: see
/// [`wide_subgroups`]; MSL's SIMD groups are), then the codecs' own constants (a name both
/// sides give, e.g. KIVI's `PARAMS_F16`, once).
pub fn specialization(
    call: &Call,
    k: &dyn Codec,
    v: &dyn Codec,
    wide: bool,
    ring: bool,
    positions: bool,
) -> registry::Specialization {
    let mut spec = vec![
        ("ATT_DIM", call.dim as u32),
        ("ATT_SG_WIDE", u32::from(wide)),
        ("ATT_RING", u32::from(ring)),
        // A layer under eviction: keys at the positions the key segment holds
        // (`plan::KeyPositions`), fixed for the layer's life.
        ("ATT_POS", u32::from(positions)),
        // Measuring only: the tensor-core kernels without the codecs' reads (1; the decode
        // kernel: 2, without staging the tiles either; 3, without its MMAs; the prefill
        // kernel: 2, without its score step either; 3, without its softmax), for the kernels'
        // floor. The decode kernel for f16 rows (wgsl/attend/attend_decode_tc_rows.wgsl): 1,
        // zero rows staged instead of loaded.
        ("ATT_TC_NOLOAD", measuring_knob("KVPACK_TC_NOLOAD", 3)),
        // Measuring only: the tensor-core prefill kernel's cost apart from its tiles
        // (`KVPACK_TC_FIXED`: 1, workgroups that return at once: the launch and the merge;
        // 2, no tile loop: the queries' staging and the record's writing too).
        ("ATT_TC_FIXED", measuring_knob("KVPACK_TC_FIXED", 2)),
        // Measuring only: the tensor-core decode kernels' padded rows.
        ("ATT_TC_PAD", plan::tensor_pad()),
        // Measuring only: the tensor-core prefill kernel's scores with the queries' (1) or the
        // keys' (2) low f16 part left out (two products per block instead of three), for
        // their time (2 breaks the 1e-3 bound on SmolLM2's real q/k/v: 1.51e-3, BENCHMARKS.md);
        // 0, the default, is the kernel.
        ("ATT_TC_SPLIT", measuring_knob("KVPACK_TC_SPLIT", 2)),
        // Measuring only: the f32 prefill kernel (wgsl/attend/attend_prefill.wgsl) without
        // the codecs' reads (`KVPACK_PF_VARIANT=1`: synthetic tiles, for its floor without
        // memory traffic), or with one step left out (3: the softmax, 4: the scores, 5: the
        // output; wrong results, for each step's share of the time). 0, the default, is the
        // kernel; 2 is unused (formerly measured variants).
        ("ATT_PF_VARIANT", measuring_knob("KVPACK_PF_VARIANT", 5)),
        // Measuring only: the decode kernel (wgsl/attend/attend_core.wgsl) with the ring's
        // rows read one row per loop trip (`KVPACK_DEC_VARIANT=1`), for their share of its
        // registers, or (2) with the softmax's running maximum taken exactly in every tile
        // (no slack: the kernel before 2026-12-06), or with KIVI's codes turned into floats
        // another way (3: the bits of 1.0 as a literal, the kernel before 2026-12-07; 4: two
        // codes per mask as f16 subnormals; wgsl/attend/attend_core.wgsl, DEC_ONE_WG,
        // DEC_PAIRS). 0, the default, is the kernel.
        ("ATT_DEC_VARIANT", measuring_knob("KVPACK_DEC_VARIANT", 4)),
        // Measuring only: when the f16-rows tensor-core decode kernel loads the next tile
        // (`KVPACK_TC_PF`: 0, the default, before the tile's first barrier; 1, after it; 2, no
        // prefetch).
        ("ATT_TC_PF", measuring_knob("KVPACK_TC_PF", 2)),
        // Measuring only: which sides of a whole tile the tensor-core prefill kernel loads a
        // tile ahead, and where (`KVPACK_TC_PREF`: 1, both, after the current tile's staging;
        // 2, both, before its P·V̂; 3, neither; 4, the keys; 5, the values). 0, the default:
        // the sides read as stored f16 rows (wgsl/attend/attend_prefill_tc.wgsl, TC_PREF_AT).
        ("ATT_TC_PREF", measuring_knob("KVPACK_TC_PREF", 5)),
        // Measuring: the tensor-core prefill kernel's tile-loop barriers (`KVPACK_TC_BAR`: 1,
        // the rescale flag read after one barrier instead of workgroupUniformLoad's two; 2, 1
        // without the barrier after the score step; 3, 2 without the barrier after P·V̂: 2 and
        // 3 are races, for what those barriers cost). 0, the default, is the kernel.
        ("ATT_TC_BAR", measuring_knob("KVPACK_TC_BAR", 3)),
    ];
    for (name, value) in k.attend_spec().into_iter().chain(v.attend_spec()) {
        if !spec.iter().any(|(n, _)| *n == name) {
            spec.push((name, value));
        }
    }
    registry::Specialization(spec)
}

/// Builds the attention pipelines a layer's calls will use ([`crate::KvLayer::prepare`]): for
/// the (key, value) codec pair on `choice`, the decode kernel (every call of
/// [`super::AttendKernel::Auto`] and `Decode`), the prefill kernel where the key codec does not
/// transform the query, and the merge, each with the one specialization every call of the layer
/// gets ([`specialization`]: head width `dim`, the device's subgroup width class, whether the
/// layer has a ring (`ring`, fixed for its life), whether it evicts (`positions`: its keys'
/// positions read from the key segment, fixed for its life) and the codecs' constants; never a
/// length). A
/// kernel that no call could run (the pair has no GPU hooks, or its workgroup storage exceeds
/// the device's, as [`plan_for`] checks) is not built: such calls fail before any pipeline.
pub fn prepare(
    ctx: &Context,
    k: &dyn Codec,
    v: &dyn Codec,
    choice: PathChoice,
    dim: usize,
    ring: bool,
    positions: bool,
) -> Result<()> {
    let paths = match AttendPaths::resolve(ctx, k, v, choice) {
        Ok(p) => p,
        // Every call is refused the same way, before any pipeline: nothing to build.
        Err(Error::PathUnavailable { .. }) => return Ok(()),
        Err(e) => return Err(e),
    };
    let value_dim = v.value_dim();
    // Only `dim` and the options' defaults matter to the checks and the specialization.
    let call = Call {
        tq: 1,
        hq: 1,
        hkv: 1,
        dim,
        tokens: 1,
        opts: Default::default(),
    };
    if call.check(value_dim).is_err() {
        return Ok(());
    }
    let spec = specialization(&call, k, v, wide_subgroups(ctx), ring, positions);
    let (kh, vh) = (k.attend_hooks(), v.attend_hooks());
    let limit = ctx.max_workgroup_storage_size() as usize;
    let decode = plan::workgroup_bytes(dim, k.attend_prep_width(), value_dim)
        + k.attend_workgroup_bytes()
        + v.attend_workgroup_bytes();
    let mut any = false;
    if decode <= limit {
        gpu::pipeline::pipeline(ctx, kernel::partials(kh, vh), paths.partials, &spec)?;
        any = true;
    }
    let prefill_fits = plan::prefill_workgroup_bytes(dim, value_dim.max(dim)) <= limit;
    if let (Some(def), Some(path), true) = (kernel::prefill(kh, vh), paths.prefill, prefill_fits) {
        gpu::pipeline::pipeline(ctx, def, path, &spec)?;
        any = true;
    }
    // The tensor-core kernel where Auto may pick it (prefill chunks).
    let tensor_fits = plan::tensor_workgroup_bytes(dim, value_dim) <= limit;
    if let (Some(def), Some(Ok(path)), true) = (kernel::tensor(kh, vh), &paths.tensor, tensor_fits)
    {
        gpu::pipeline::pipeline(ctx, def, *path, &spec)?;
        any = true;
    }
    // The tensor-core decode kernel is not built here: only calls that ask for it
    // (`AttendKernel::TensorDecode`) run it, and they build it on first use.
    if any {
        gpu::pipeline::pipeline(ctx, kernel::merge(kh, vh), paths.merge, &spec)?;
    }
    Ok(())
}

/// Whether both codecs' tile hooks serve the tensor-core decode kernel, with the value side's
/// groups and whether both sides are f16 rows, or why not ([`Codec::attend_tiles`]).
pub fn tiles(k: &dyn Codec, v: &dyn Codec) -> std::result::Result<plan::Tiles, String> {
    k.attend_tiles()?;
    Ok(plan::Tiles {
        groups: v.attend_tiles()?,
        rows: kernel::tensor_decode_rows(k.attend_hooks(), v.attend_hooks()),
    })
}

/// Plans a call on `ctx`'s device for `paths` (the decode, prefill or tensor-core kernel:
/// [`Call::split_kernel`]).
pub fn plan_for(
    ctx: &Context,
    paths: &AttendPaths,
    call: &Call,
    shape: &CacheShape,
    k: &dyn Codec,
    v: &dyn Codec,
) -> Result<Plan> {
    let limit = ctx.max_workgroup_storage_size() as usize;
    let tensor = match &paths.tensor {
        // Emulated tensor cores run only where asked for by name (Auto never picks them).
        Some(Ok(_))
            if ctx.tensor_cores_emulated() && call.opts.kernel == super::AttendKernel::Auto =>
        {
            Err("the tensor-core kernel is emulated on this handle (asked for by name only)".into())
        }
        Some(Ok(_)) => Ok(()),
        Some(Err(reason)) => Err(reason.clone()),
        None => Err(format!(
            "{} keys transform the query",
            k.attend_hooks().name
        )),
    };
    // Asked only for calls that want the tensor-core decode kernel (every other call would
    // build a reason string for nothing).
    let tiles = if call.opts.kernel != super::AttendKernel::TensorDecode {
        Err(String::new())
    } else {
        match &paths.tensor_decode {
            Some(Ok(_)) => tiles(k, v),
            Some(Err(reason)) => Err(reason.clone()),
            None => tiles(k, v).map(|t| plan::Tiles { groups: 0, ..t }),
        }
    };
    let split_kernel = call.split_kernel(shape, limit, &tensor, &tiles)?;
    let prefill = split_kernel != plan::SplitKernel::Decode;
    // The decode kernel's own storage plus what the codecs' hooks declare (e.g. TurboQuant's
    // centroids); the prefill kernel's is checked by `Call::prefill`.
    let need = plan::workgroup_bytes(call.dim, k.attend_prep_width(), shape.value_dim)
        + k.attend_workgroup_bytes()
        + v.attend_workgroup_bytes();
    if !prefill && need > limit {
        return Err(Error::Limit {
            what: "attention workgroup storage",
            needed: need as u64,
            limit: limit as u64,
        });
    }
    let plan = plan::plan_kernel(
        call,
        shape,
        kernel_target(ctx, split_kernel),
        ctx.max_storage_binding_size(),
        split_kernel,
    )?;
    if let Some(cap) = plan::split_cap(ctx.adapter_info()) {
        let longest = plan
            .dispatches
            .iter()
            .map(|d| {
                let p = &d.params;
                let codec = p.split_c.min(p.c_end - p.tok0);
                let ring = p.split_r.min(p.tok_end - p.r0);
                codec.max(ring) as usize
            })
            .max()
            .unwrap_or(0);
        if longest > cap {
            return Err(Error::Limit {
                what: "tokens per attention split on lavapipe (its shader loops end after 65,535 iterations)",
                needed: longest as u64,
                limit: cap as u64,
            });
        }
    }
    Ok(plan)
}

/// Workgroups a call on `kernel` aims at on this device ([`plan::split_target`]): the decode
/// kernel scaled to its workgroup size (`KVPACK_ATT_WG`, measuring only), the tensor-core
/// prefill kernel the target itself (one wave, [`plan::Call::wave_tokens`]), the others twice
/// the target. For the tensor-core decode kernel (one subgroup per workgroup) twice the target
/// measured faster than four times (as many subgroups as the decode kernel's): H200, 32k
/// tokens, 512 against 256 tokens per split, f16 211 against 244 µs, KIVI-4 657 against 699
/// (benches/results/h200-2026-12-04-tcdirect).
pub fn kernel_target(ctx: &Context, kernel: plan::SplitKernel) -> usize {
    let target = plan::split_target(ctx.adapter_info());
    match kernel {
        plan::SplitKernel::Decode => (target * super::kernel::WORKGROUP_SIZE as usize)
            .div_ceil(super::kernel::partials_workgroup_size() as usize),
        plan::SplitKernel::Tensor => target,
        plan::SplitKernel::Prefill | plan::SplitKernel::TensorDecode => target * 2,
    }
}

/// What a layer keeps across its attention calls: the partials buffer (`[splits][Tq·Hq]`
/// records of [`plan::Plan::partial_bytes`]), grown to the largest call so far and never
/// shrunk, instead of a new buffer per call; its calls' bind groups
/// ([`gpu::bind_cache`]: the same buffers at every decode step, the uniforms' bytes in the
/// device's arena); and the kernels its codec pair resolved to, per path choice.
#[derive(Debug, Default)]
pub struct AttendScratch {
    partials: std::sync::Mutex<Option<wgpu::Buffer>>,
    groups: gpu::bind_cache::BindGroupCache,
    paths: std::sync::Mutex<Vec<(PathChoice, AttendPaths)>>,
}

impl AttendScratch {
    /// [`AttendPaths::resolve`] for the layer's codec pair on `choice`, resolved once per
    /// choice (an error is not kept: it is resolved again at the next call).
    fn paths(
        &self,
        ctx: &Context,
        k: &dyn Codec,
        v: &dyn Codec,
        choice: PathChoice,
    ) -> Result<AttendPaths> {
        let mut kept = self.paths.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, p)) = kept.iter().find(|(c, _)| *c == choice) {
            return Ok(p.clone());
        }
        let p = AttendPaths::resolve(ctx, k, v, choice)?;
        kept.push((choice, p.clone()));
        Ok(p)
    }

    /// A partials buffer of at least `bytes`: the kept one, or a new one of at least twice
    /// its size (within the binding limit), kept instead. One layer's calls run in queue
    /// order, so one buffer serves them all: wgpu orders a pass after the writes of the
    /// passes recorded before it, in one encoder or in earlier submissions.
    fn partials(&self, ctx: &Context, bytes: u64) -> Result<wgpu::Buffer> {
        let mut kept = self.partials.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = kept.as_ref().filter(|b| b.size() >= bytes) {
            return Ok(b.clone());
        }
        let grown = kept.as_ref().map_or(bytes, |b| b.size() * 2);
        let size = grown.min(ctx.max_storage_binding_size()).max(bytes);
        let b = gpu::storage_buffer(ctx, "kvpack attention partials", size)?;
        *kept = Some(b.clone());
        Ok(b)
    }
}

/// Records one call: `q` `[Tq, Hq, D]` f32 → `out` `[Tq, Hq, D]` f32 (device buffers). Its
/// bind groups are kept in `scratch` for the layer's next calls ([`gpu::bind_cache`]; they
/// hold `q` and `out` alive until the layer's next few calls no longer use them).
#[allow(clippy::too_many_arguments)]
pub fn encode<'a>(
    ctx: &Context,
    enc: &mut wgpu::CommandEncoder,
    choice: PathChoice,
    call: &Call,
    shape: &CacheShape,
    sides: [&SideBuffers<'a>; 2],
    placeholder: &'a wgpu::Buffer,
    q: &'a wgpu::Buffer,
    out: &'a wgpu::Buffer,
    scratch: &AttendScratch,
) -> Result<()> {
    let io = [q, out];
    encode_with(
        ctx,
        enc,
        choice,
        call,
        shape,
        sides,
        placeholder,
        io,
        scratch,
        true,
    )
}

/// [`encode`], with the bind groups kept in `scratch` (`keep`) or made for this call only
/// (the blocking [`run`]: its query and output buffers are new at every call).
#[allow(clippy::too_many_arguments)]
fn encode_with<'a>(
    ctx: &Context,
    enc: &mut wgpu::CommandEncoder,
    choice: PathChoice,
    call: &Call,
    shape: &CacheShape,
    sides: [&SideBuffers<'a>; 2],
    placeholder: &'a wgpu::Buffer,
    [q, out]: [&'a wgpu::Buffer; 2],
    scratch: &AttendScratch,
    keep: bool,
) -> Result<()> {
    let bytes = (call.tq * call.hq * call.dim * 4) as u64;
    gpu::check_buffer(q, "attention queries", bytes)?;
    gpu::check_buffer(out, "attention output", bytes)?;
    let [ks, vs] = sides;
    let (k, v) = (ks.codec, vs.codec);
    let paths = scratch.paths(ctx, k, v, choice)?;
    let plan = plan_for(ctx, &paths, call, shape, k, v)?;
    let (dispatches, merge) = dispatch_plans(call, &plan, k, v, wide_subgroups(ctx), shape.ring)?;
    let split_path = match plan.kernel {
        plan::SplitKernel::Prefill => paths.prefill.ok_or_else(|| no_prefill(k))?,
        plan::SplitKernel::Tensor => match paths.tensor.clone() {
            Some(Ok(p)) => p,
            Some(Err(reason)) => {
                return Err(Error::PathUnavailable {
                    kernel: "attend_prefill_tc",
                    requested: choice.to_string(),
                    reason,
                });
            }
            None => return Err(no_prefill(k)),
        },
        plan::SplitKernel::TensorDecode => match paths.tensor_decode.clone() {
            Some(Ok(p)) => p,
            Some(Err(reason)) => {
                return Err(Error::PathUnavailable {
                    kernel: "attend_decode_tc",
                    requested: choice.to_string(),
                    reason,
                });
            }
            None => return Err(no_tiles(k, v)),
        },
        plan::SplitKernel::Decode => paths.partials,
    };
    let partials = match plan.merge {
        Some(_) => Some(scratch.partials(ctx, plan.partial_bytes)?),
        None => None,
    };
    let ring = |s: &SideBuffers<'a>| s.ring.unwrap_or(placeholder);
    let mut items: Vec<(KernelPath, DispatchPlan, Vec<Bind<'_>>)> = Vec::new();
    let mut uniforms = Vec::new();
    for d in &plan.dispatches {
        let kseg = ks.segments.get(d.segment);
        let vseg = vs.segments.get(d.segment);
        uniforms.push((
            gpu::uniforms::uniform(
                ctx,
                "kvpack key codec uniform",
                &k.attend_uniform(kseg.map(|r| r.ranges)),
            )?,
            gpu::uniforms::uniform(
                ctx,
                "kvpack value codec uniform",
                &v.attend_uniform(vseg.map(|r| r.ranges)),
            )?,
        ));
    }
    for ((d, dp), (ku, vu)) in plan.dispatches.iter().zip(dispatches).zip(&uniforms) {
        let seg = |s: &SideBuffers<'a>| match s.segments.get(d.segment) {
            Some(r) => Bind::from(r.buffer),
            None => Bind::from(placeholder),
        };
        let tables = |s: &SideBuffers<'a>| Bind::from(s.tables);
        let binds = vec![
            Bind::from(ku),
            Bind::from(vu),
            Bind::from(q),
            Bind::from(partials.as_ref().unwrap_or(out)),
            seg(ks),
            tables(ks),
            seg(vs),
            tables(vs),
            Bind::from(ring(ks)),
            Bind::from(ring(vs)),
            // The 16-byte views of the same four (wgsl/attend/attend_core.wgsl, F16_V4).
            seg(ks),
            seg(vs),
            Bind::from(ring(ks)),
            Bind::from(ring(vs)),
        ];
        items.push((split_path, dp, binds));
    }
    if let (Some(mp), Some(p)) = (merge, partials.as_ref()) {
        let (ku, vu) = &uniforms[uniforms.len() - 1];
        items.push((
            paths.merge,
            mp,
            vec![
                Bind::from(ku),
                Bind::from(vu),
                Bind::from(p),
                Bind::from(out),
                Bind::from(placeholder),
                Bind::from(placeholder),
                Bind::from(placeholder),
                Bind::from(vs.tables),
                Bind::from(placeholder),
                Bind::from(placeholder),
                Bind::from(placeholder),
                Bind::from(placeholder),
                Bind::from(placeholder),
                Bind::from(placeholder),
            ],
        ));
    }
    if !keep {
        return gpu::encode_plans_in_one_pass(ctx, enc, &items, None);
    }
    scratch.groups.begin_call();
    gpu::encode_plans_in_one_pass(ctx, enc, &items, Some(&scratch.groups))
}

/// The error for a prefill-kernel plan whose key codec transforms the query.
fn no_prefill(k: &dyn Codec) -> Error {
    Error::Config(format!(
        "the prefill attention kernel does not serve {} keys (the codec transforms the query); use the decode kernel",
        k.attend_hooks().name
    ))
}

/// The error for a tensor-core decode plan whose codecs have no tile hooks.
fn no_tiles(k: &dyn Codec, v: &dyn Codec) -> Error {
    Error::PathUnavailable {
        kernel: "attend_decode_tc",
        requested: "tensor-decode".into(),
        reason: tiles(k, v)
            .err()
            .unwrap_or_else(|| "the pair has no tile hooks".into()),
    }
}

/// The kernel plans of a planned call: one per dispatch (bindings: see [`kernel`]), then the
/// merge's, if any. A prefill plan for a key codec that transforms the query is
/// [`Error::Config`].
pub fn dispatch_plans(
    call: &Call,
    plan: &Plan,
    k: &dyn Codec,
    v: &dyn Codec,
    wide: bool,
    ring: bool,
) -> Result<(Vec<DispatchPlan>, Option<DispatchPlan>)> {
    let spec = specialization(call, k, v, wide, ring, plan.positions);
    let (kh, vh) = (k.attend_hooks(), v.attend_hooks());
    let def = match plan.kernel {
        plan::SplitKernel::Prefill => kernel::prefill(kh, vh).ok_or_else(|| no_prefill(k))?,
        plan::SplitKernel::Tensor => kernel::tensor(kh, vh).ok_or_else(|| no_prefill(k))?,
        plan::SplitKernel::TensorDecode => {
            kernel::tensor_decode(kh, vh).ok_or_else(|| no_tiles(k, v))?
        }
        plan::SplitKernel::Decode => kernel::partials(kh, vh),
    };
    let partials = plan
        .dispatches
        .iter()
        .map(|d| DispatchPlan {
            kernel: def,
            spec: spec.clone(),
            uniform: bytemuck::bytes_of(&d.params).to_vec(),
            workgroups: d.workgroups,
        })
        .collect();
    let merge = plan.merge.map(|(params, workgroups)| DispatchPlan {
        kernel: kernel::merge(kh, vh),
        spec,
        uniform: bytemuck::bytes_of(&params).to_vec(),
        workgroups,
    });
    Ok((partials, merge))
}

/// Blocking attention on host queries.
#[allow(clippy::too_many_arguments)]
pub fn run(
    ctx: &Context,
    choice: PathChoice,
    call: &Call,
    shape: &CacheShape,
    sides: [&SideBuffers<'_>; 2],
    placeholder: &wgpu::Buffer,
    q: &[f32],
    scratch: &AttendScratch,
) -> Result<Vec<f32>> {
    let bytes = (q.len() * 4) as u64;
    let qb = gpu::upload(ctx, "kvpack attention queries", bytemuck::cast_slice(q))?;
    let ob = gpu::storage_buffer(ctx, "kvpack attention output", bytes)?;
    gpu::submit_blocking(ctx, "attention", |enc| {
        let io = [&qb, &ob];
        encode_with(
            ctx,
            enc,
            choice,
            call,
            shape,
            sides,
            placeholder,
            io,
            scratch,
            false,
        )
    })?;
    let out: Vec<f32> = bytemuck::pod_collect_to_vec(&gpu::readback(ctx, &ob, bytes)?);
    if let Some(i) = out.iter().position(|x| !x.is_finite()) {
        return Err(Error::Gpu {
            during: "attention",
            message: format!(
                "non-finite attention output at flat index {i} (inputs were finite: a kernel fault)"
            ),
        });
    }
    Ok(out)
}
