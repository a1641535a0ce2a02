//! GPU attention: one partial-attention dispatch per region of the cache (a KIVI segment,
//! KIVI's f16 residual ring, an f16 cache segment), each splitting its tokens into chunks
//! (flash-decoding), then `attend_merge`. Kernels: `wgsl/attend/attend_core.wgsl` (core),
//! `wgsl/attend/attend_{kivi,f16}.wgsl` (codecs), `wgsl/attend/attend_{workgroup,subgroup}.wgsl` (entry points).

use crate::codecs::kivi::layout::{Layout, ParamStorage};
use crate::context::{Context, KernelPath, PathChoice};
use crate::error::{Error, Result};
use crate::gpu::{self, Bind, DispatchPlan, registry};

use super::AttendOptions;

/// Uniform block of the attention kernels.
/// Keep in sync with `AttendParams` in wgsl/attend/attend_params.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[allow(missing_docs)]
pub struct AttendParams {
    pub tq: u32,
    pub hq: u32,
    pub hkv: u32,
    pub dim: u32,
    pub qgroup: u32,
    pub q_pos0: u32,
    pub window: u32,
    pub sinks: u32,
    pub scale: f32,
    pub chunk_tokens: u32,
    pub n_chunks: u32,
    pub chunk_base: u32,
    pub nc_total: u32,
    pub region_start: u32,
    pub region_end: u32,
    pub seg_offset: u32,
    pub ring_tokens: u32,
    pub kbits: u32,
    pub kgroup: u32,
    pub kgroup_words: u32,
    pub vbits: u32,
    pub vgroup: u32,
    pub vgroup_words: u32,
    pub vrow_words: u32,
    pub vn_groups: u32,
    pub row_words: u32,
    pub pad0: u32,
    pub pad1: u32,
}

/// Largest head width and query-group size the attention kernels hold in workgroup memory.
pub const D_MAX: usize = 256;
/// Largest Hq / Hkv.
pub const QGROUP_MAX: usize = 8;
/// Most query vectors (query rows × Hq/Hkv heads) one workgroup scores against each loaded
/// key and value (the MSL core's bound too).
pub const QVECTORS_MAX: usize = 16;

/// How the attention kernels read one side of a layer (a closed set until every codec plugs
/// into the shared core through hooks of its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttendKind {
    /// KIVI packed codes with this layout (the side's fields).
    Kivi(Layout),
    /// f16 rows.
    F16,
}

/// Where a region's tokens are stored.
#[derive(Clone, Copy, Debug)]
pub enum Source<'a> {
    /// KIVI packed codes of one segment.
    Kivi {
        /// Geometry of the cache.
        layout: &'a Layout,
        /// `[blocks][H][D][key_group_words]`.
        key_codes: Bind<'a>,
        /// Key (scale, lo) words.
        key_params: Bind<'a>,
        /// `[tokens][H][value_row_words]`.
        value_codes: Bind<'a>,
        /// Value (scale, lo) words.
        value_params: Bind<'a>,
    },
    /// f16 rows `[rows][H·D/2 words]`.
    F16 {
        /// K rows.
        k_rows: Bind<'a>,
        /// V rows.
        v_rows: Bind<'a>,
        /// u32 words per row.
        row_words: usize,
        /// Ring capacity (token pos in row pos % ring), or 0 for linear rows.
        ring_tokens: usize,
    },
}

/// Tokens `[start, end)` of the cache, stored in `source` from row `seg_offset` on (linear
/// sources).
#[derive(Clone, Copy, Debug)]
pub struct Region<'a> {
    /// First absolute position.
    pub start: usize,
    /// One past the last.
    pub end: usize,
    /// Row of `start` inside the source's buffers.
    pub seg_offset: usize,
    /// The storage.
    pub source: Source<'a>,
}

/// The shape of one attention call.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    /// Query rows.
    pub tq: usize,
    /// Query heads.
    pub hq: usize,
    /// KV heads.
    pub hkv: usize,
    /// Head width.
    pub dim: usize,
    /// Tokens in the cache (T).
    pub tokens: usize,
    /// Options.
    pub opts: AttendOptions,
}

impl Call {
    /// Validates what the kernels can hold.
    pub fn check(&self) -> Result<()> {
        if self.dim > D_MAX || self.hq / self.hkv > QGROUP_MAX {
            return Err(Error::Config(format!(
                "GPU attention supports head width <= {D_MAX} and Hq/Hkv <= {QGROUP_MAX} (got D = {}, Hq/Hkv = {})",
                self.dim,
                self.hq / self.hkv
            )));
        }
        Ok(())
    }

    /// Tokens per chunk when each workgroup takes `rows_per_workgroup` query rows, a multiple
    /// of the 32-token tile. A per-call value, never a pipeline specialization.
    pub fn chunk_tokens(&self, rows_per_workgroup: usize) -> usize {
        if let Some(c) = self.opts.chunk_tokens {
            return c;
        }
        // About 1024 partial workgroups per region (chunks × KV heads × row blocks), 32..=1024
        // tokens each. Measured on the H200 with the default kernel (decode, 32/8 heads,
        // benches/results/sweeps/, the "8 KiB wg" arms): at 32k tokens 256-token chunks (1024
        // workgroups) took 200 µs, 512 217 µs, 1024 310 µs; at 128k 1024-token chunks 547 µs,
        // 512 568 µs, 256 627 µs; at 1k 32-token chunks (one tile per workgroup) 70 µs, 64
        // 79 µs, 128 107 µs.
        let per_chunk_wgs = self.hkv * self.tq.div_ceil(rows_per_workgroup.max(1));
        let chunks = (1024 / per_chunk_wgs.max(1)).max(1);
        self.tokens.div_ceil(chunks).clamp(32, 1024).div_ceil(32) * 32
    }

    /// Workgroup storage (bytes) of a partial-attention workgroup holding `vectors` query
    /// vectors (wgsl/attend/attend_core.wgsl: qsh, red, psh, m/l/corr, scratch).
    pub fn workgroup_bytes(&self, vectors: usize) -> usize {
        4 * (vectors * self.dim + vectors * 4 * 32 + vectors * 32 + 3 * vectors + 128)
    }

    /// Query rows each partial-attention workgroup takes (its K/V loads serve all of them):
    /// 1 for decode; for Tq > 1 the largest power of two ≤ Tq whose query vectors (rows ×
    /// Hq/Hkv) stay within [`QVECTORS_MAX`] and whose workgroup storage, plus `stage_bytes`
    /// of codec staging, fits `max_workgroup_storage` bytes. A pipeline specialization from
    /// the set {1, 2, 4, 8, 16}, chosen by the call's Tq, never by the sequence length.
    pub fn rows_per_workgroup(&self, max_workgroup_storage: u32, stage_bytes: usize) -> usize {
        let qg = self.hq / self.hkv;
        let fits = |rows: usize| {
            self.workgroup_bytes(rows * qg) + stage_bytes <= max_workgroup_storage as usize
        };
        let mut rows = 1;
        while rows * 2 <= self.tq && rows * 2 * qg <= QVECTORS_MAX && fits(rows * 2) {
            rows *= 2;
        }
        rows
    }
}

/// Workgroup bytes of one staged KIVI tile (wgsl/attend/attend_kivi.wgsl): 32 tokens'
/// slice of every channel's key stream, the block's key parameters, 32 value rows and their
/// parameters.
pub fn kivi_stage_bytes(l: &Layout, dim: usize) -> usize {
    let pw = l.params.words();
    4 * (dim * l.key_bits as usize
        + dim * pw
        + 32 * l.value_row_words()
        + 32 * l.value_groups() * pw)
}

/// The specialization every attention partial kernel shares: head width and query-group size,
/// fixed for a cache's (and model's) life, and query rows per workgroup (a small set, from
/// Tq); never the sequence length.
fn shape_spec(call: &Call, rows: usize) -> registry::Specialization {
    registry::Specialization(vec![
        ("ATT_DIM", call.dim as u32),
        ("ATT_QG", (call.hq / call.hkv) as u32),
        ("ATT_ROWS", rows as u32),
        // 1 when every subgroup of the device is at least 32 wide: the subgroup variant's
        // slice reductions then need no workgroup memory or barrier (set by `encode`).
        ("ATT_SG_WIDE", 0),
    ])
}

/// The kernels one attention call runs on, resolved for a path choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttendPaths {
    /// `attend_kivi`.
    pub kivi: KernelPath,
    /// `attend_f16`.
    pub f16: KernelPath,
    /// `attend_merge`.
    pub merge: KernelPath,
}

impl AttendPaths {
    /// Resolves the three kernels for `choice`.
    pub fn resolve(ctx: &Context, choice: PathChoice) -> Result<Self> {
        Ok(Self {
            kivi: ctx.resolve(&registry::ATTEND_KIVI, choice)?,
            f16: ctx.resolve(&registry::ATTEND_F16, choice)?,
            merge: ctx.resolve(&registry::ATTEND_MERGE, choice)?,
        })
    }
}

fn base_params(call: &Call, chunk: usize, nc_total: usize) -> AttendParams {
    AttendParams {
        tq: call.tq as u32,
        hq: call.hq as u32,
        hkv: call.hkv as u32,
        dim: call.dim as u32,
        qgroup: (call.hq / call.hkv) as u32,
        q_pos0: (call.tokens - call.tq) as u32,
        window: call.opts.window.unwrap_or(0) as u32,
        sinks: call.opts.sinks as u32,
        scale: call.opts.scale.unwrap_or(1.0 / (call.dim as f32).sqrt()),
        chunk_tokens: chunk as u32,
        nc_total: nc_total as u32,
        ..Default::default()
    }
}

/// How a region is stored, without its buffers: what [`plans_for`] needs of a [`Source`].
#[derive(Clone, Copy, Debug)]
pub enum SourceKind<'a> {
    /// KIVI packed codes of one segment with this geometry.
    Kivi(&'a Layout),
    /// f16 rows.
    F16 {
        /// u32 words per row.
        row_words: usize,
        /// Ring capacity (token pos in row pos % ring), or 0 for linear rows.
        ring_tokens: usize,
    },
}

/// A [`Region`] without its buffers (kernel tests and the MSL emulator plan from these).
#[derive(Clone, Copy, Debug)]
pub struct RegionDesc<'a> {
    /// First absolute position.
    pub start: usize,
    /// One past the last.
    pub end: usize,
    /// Row of `start` inside the source's buffers.
    pub seg_offset: usize,
    /// How the source stores its tokens.
    pub kind: SourceKind<'a>,
}

impl<'a> Region<'a> {
    /// This region's description (no buffers).
    pub fn desc(&self) -> RegionDesc<'a> {
        RegionDesc {
            start: self.start,
            end: self.end,
            seg_offset: self.seg_offset,
            kind: match self.source {
                Source::Kivi { layout, .. } => SourceKind::Kivi(layout),
                Source::F16 {
                    row_words,
                    ring_tokens,
                    ..
                } => SourceKind::F16 {
                    row_words,
                    ring_tokens,
                },
            },
        }
    }
}

/// The device limits a call's plans depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanLimits {
    /// Largest storage binding (bytes): the partials must fit.
    pub max_binding: u64,
    /// Workgroup storage (bytes): bounds the query rows per workgroup.
    pub max_workgroup_storage: u32,
}

impl PlanLimits {
    /// The limits of `ctx`'s device (WebGPU's defaults for a CPU context).
    pub fn of(ctx: &Context) -> Self {
        Self {
            max_binding: ctx.max_storage_binding_size(),
            max_workgroup_storage: ctx.max_workgroup_storage_size(),
        }
    }
}

/// The plans of one call: partials per region, then the merge; and the partials' size.
/// Chunks grow until the partials fit in `limits.max_binding` bytes (an error when even one
/// chunk per region does not fit).
pub fn plans(
    call: &Call,
    regions: &[Region<'_>],
    limits: PlanLimits,
) -> Result<(Vec<DispatchPlan>, DispatchPlan, u64)> {
    let descs: Vec<RegionDesc<'_>> = regions.iter().map(Region::desc).collect();
    plans_for(call, &descs, limits)
}

/// [`plans`] from region descriptions: one partials plan per non-empty region, in order
/// (binding 3.. of each is its region's buffers), then the merge.
pub fn plans_for(
    call: &Call,
    regions: &[RegionDesc<'_>],
    limits: PlanLimits,
) -> Result<(Vec<DispatchPlan>, DispatchPlan, u64)> {
    call.check()?;
    let max_binding = limits.max_binding;
    let wg_limit = limits.max_workgroup_storage as usize;
    let base = call.workgroup_bytes(call.hq / call.hkv);
    if base > wg_limit {
        return Err(Error::Limit {
            what: "attention workgroup storage",
            needed: base as u64,
            limit: wg_limit as u64,
        });
    }
    // Stage KIVI tiles in workgroup memory when asked, where the layout allows it (a 32-token
    // tile inside one key block) and one query row still fits beside the stage.
    let stage_of = |r: &RegionDesc<'_>| match r.kind {
        SourceKind::Kivi(l) if l.key_group % 32 == 0 && r.seg_offset % 32 == 0 => {
            Some(kivi_stage_bytes(l, call.dim))
                .filter(|&b| base + b <= wg_limit && call.opts.stage_tiles == Some(true))
        }
        _ => None,
    };
    let stage_max = regions.iter().filter_map(stage_of).max().unwrap_or(0);
    let rows = call.rows_per_workgroup(limits.max_workgroup_storage, stage_max);
    let per_chunk = (call.tq * call.hq * (call.dim + 2) * 4) as u64;
    let count = |chunk: usize| -> usize {
        regions
            .iter()
            .map(|r| (r.end - r.start).div_ceil(chunk))
            .sum()
    };
    let mut chunk = call.chunk_tokens(rows);
    while count(chunk) as u64 * per_chunk > max_binding {
        let longest = regions.iter().map(|r| r.end - r.start).max().unwrap_or(0);
        if chunk >= longest {
            return Err(Error::Limit {
                what: "attention partials (one chunk per cache region)",
                needed: count(chunk) as u64 * per_chunk,
                limit: max_binding,
            });
        }
        chunk = (chunk * 2).min(longest.div_ceil(32) * 32);
    }
    let nc_total = count(chunk);
    let mut out = Vec::new();
    let mut base = 0;
    for r in regions.iter().filter(|r| r.end > r.start) {
        let n_chunks = (r.end - r.start).div_ceil(chunk);
        let mut p = AttendParams {
            n_chunks: n_chunks as u32,
            chunk_base: base as u32,
            region_start: r.start as u32,
            region_end: r.end as u32,
            seg_offset: r.seg_offset as u32,
            ..base_params(call, chunk, nc_total)
        };
        let (def, spec) = match r.kind {
            SourceKind::Kivi(l) => {
                p.kbits = l.key_bits;
                p.kgroup = l.key_group as u32;
                p.kgroup_words = l.key_group_words() as u32;
                p.vbits = l.value_bits;
                p.vgroup = l.value_group as u32;
                p.vgroup_words = l.value_group_words() as u32;
                p.vrow_words = l.value_row_words() as u32;
                p.vn_groups = l.value_groups() as u32;
                let f16 = u32::from(l.params == ParamStorage::F16);
                let mut spec = shape_spec(call, rows);
                spec.0.extend([
                    ("ATT_STAGE", u32::from(stage_of(r).is_some())),
                    ("PARAMS_F16", f16),
                    ("ATT_KBITS", l.key_bits),
                    ("ATT_KGROUP", l.key_group as u32),
                    ("ATT_VBITS", l.value_bits),
                    ("ATT_VGROUP", l.value_group as u32),
                ]);
                (&registry::ATTEND_KIVI, spec)
            }
            SourceKind::F16 {
                row_words,
                ring_tokens,
            } => {
                p.row_words = row_words as u32;
                p.ring_tokens = ring_tokens as u32;
                (&registry::ATTEND_F16, shape_spec(call, rows))
            }
        };
        out.push(DispatchPlan {
            kernel: def,
            spec,
            uniform: bytemuck::bytes_of(&p).to_vec(),
            workgroups: (call.tq.div_ceil(rows) * call.hkv * n_chunks) as u64,
        });
        base += n_chunks;
    }
    let merge = DispatchPlan {
        kernel: &registry::ATTEND_MERGE,
        spec: registry::Specialization::default(),
        uniform: bytemuck::bytes_of(&base_params(call, chunk, nc_total)).to_vec(),
        workgroups: (call.tq * call.hq) as u64,
    };
    let partial_bytes = (call.tq * call.hq * nc_total.max(1) * (call.dim + 2) * 4) as u64;
    Ok((out, merge, partial_bytes))
}

/// Records one attention call: `q` `[Tq, Hq, D]` f32 → `out` `[Tq, Hq, D]` f32, both GPU
/// buffers of the caller's (the app keeps its tensors on its device).
pub fn encode(
    ctx: &Context,
    encoder: &mut wgpu::CommandEncoder,
    paths: &AttendPaths,
    call: &Call,
    regions: &[Region<'_>],
    q: &wgpu::Buffer,
    out: &wgpu::Buffer,
) -> Result<()> {
    let bytes = (call.tq * call.hq * call.dim * 4) as u64;
    gpu::check_buffer(q, "attention queries", bytes)?;
    gpu::check_buffer(out, "attention output", bytes)?;
    let (mut partial_plans, merge, partial_bytes) = plans(call, regions, PlanLimits::of(ctx))?;
    if ctx
        .adapter_info()
        .is_some_and(|i| i.subgroup_min_size >= 32)
    {
        for plan in &mut partial_plans {
            for (name, v) in &mut plan.spec.0 {
                if *name == "ATT_SG_WIDE" {
                    *v = 1;
                }
            }
        }
    }
    let partials = gpu::storage_buffer(ctx, "kvpack attention partials", partial_bytes)?;
    for (plan, r) in partial_plans
        .iter()
        .zip(regions.iter().filter(|r| r.end > r.start))
    {
        match r.source {
            Source::Kivi {
                key_codes,
                key_params,
                value_codes,
                value_params,
                ..
            } => gpu::encode_plan_bound(
                ctx,
                encoder,
                paths.kivi,
                plan,
                &[
                    Bind::from(q),
                    Bind::from(&partials),
                    key_codes,
                    key_params,
                    value_codes,
                    value_params,
                ],
            )?,
            Source::F16 { k_rows, v_rows, .. } => gpu::encode_plan_bound(
                ctx,
                encoder,
                paths.f16,
                plan,
                &[Bind::from(q), Bind::from(&partials), k_rows, v_rows],
            )?,
        }
    }
    gpu::encode_plan(ctx, encoder, paths.merge, &merge, &[&partials, out])
}

/// Blocking attention on host queries.
pub fn run(
    ctx: &Context,
    paths: &AttendPaths,
    call: &Call,
    regions: &[Region<'_>],
    q: &[f32],
) -> Result<Vec<f32>> {
    let bytes = (q.len() * 4) as u64;
    let qb = gpu::upload(ctx, "kvpack attention queries", bytemuck::cast_slice(q))?;
    let ob = gpu::storage_buffer(ctx, "kvpack attention output", bytes)?;
    gpu::submit_blocking(ctx, "attention", |enc| {
        encode(ctx, enc, paths, call, regions, &qb, &ob)
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
