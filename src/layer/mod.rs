//! [`KvLayer`]: one layer's cache, whatever the method, and [`Layer`], its one
//! implementation: a key codec and a value codec over the shared store.
//!
//! The layer owns the token count and the residual window R; each side (keys, values) is
//! stored by its codec in a `store::cpu::CpuSide` or a
//! `store::gpu::GpuSide`. Appends validate first (shapes, NaN/Inf, f16 range, the
//! token limit), then run both sides' phase 1 (encode and allocate), then commit both: an
//! error anywhere before the commit leaves the layer as it was.

mod attend;
pub(crate) use attend::HeldRows;
mod device_input;
mod evict;
mod kv_impl;
mod kv_layer;

pub use kv_layer::KvLayer;

use std::sync::Arc;

use half::f16;

use crate::attention;
use crate::codec::Codec;
use crate::context::{Context, PathChoice};
use crate::error::{Error, Result};
use crate::gpu;
use crate::method::Method;
use crate::store::cpu::CpuSide;
use crate::store::gpu::{GpuSide, NewRows};
use crate::store::gpu_input;
use crate::store::{Geometry, Input, Side, Snapshot, check_token_limit, quantized_len};

struct GpuStore {
    sides: [GpuSide; 2],
    choice: PathChoice,
    /// The input status of appends from device buffers (`store::gpu_input`).
    input_status: wgpu::Buffer,
    /// Appends recorded by `encode_append_gpu` since the last sync.
    unsynced: bool,
    /// Per side: whether its codec refuses rows whose per-vector norm f16 cannot hold.
    norm_checks: [bool; 2],
    /// Whether the key side holds positions (a layer under eviction: `Layer::enable_positions`).
    positions: bool,
    /// Attention's partials buffer, kept across calls.
    scratch: attention::gpu::AttendScratch,
}

enum Store {
    Cpu([CpuSide; 2]),
    Gpu(Box<GpuStore>),
}

impl Method {
    /// A new empty layer of this method for `heads` KV heads of width `dim` on `path` (a lone
    /// layer: index 0, see [`Method::layer_at`]).
    pub fn layer(
        &self,
        ctx: &Context,
        heads: usize,
        dim: usize,
        path: PathChoice,
    ) -> Result<Box<dyn KvLayer>> {
        self.layer_at(ctx, 0, heads, dim, path)
    }

    /// [`Method::layer`] for layer `index` of a model (codecs with per-layer random tables,
    /// TurboQuant's rotation signs, draw them for this index).
    pub fn layer_at(
        &self,
        ctx: &Context,
        index: usize,
        heads: usize,
        dim: usize,
        path: PathChoice,
    ) -> Result<Box<dyn KvLayer>> {
        if self.eviction().is_some() {
            let layer = Layer::new_at(ctx, index, heads, dim, &self.with_eviction(None), path)?;
            return Ok(Box::new(crate::policy::EvictingLayer::new(
                layer,
                self.clone(),
                index,
            )?));
        }
        Ok(Box::new(Layer::new_at(ctx, index, heads, dim, self, path)?))
    }
}

/// One layer's cache: see the module docs.
pub struct Layer {
    ctx: Context,
    /// The model layer its codecs drew per-layer tables for ([`Layer::new_at`]).
    index: usize,
    method: Method,
    g: Geometry,
    residual: usize,
    codecs: [Arc<dyn Codec>; 2],
    tokens: usize,
    store: Store,
    /// Key centering's μ `[H·D]` of this layer (`crate::store::center`).
    center: Option<Vec<f32>>,
}

impl std::fmt::Debug for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Layer")
            .field("method", &self.method.to_string())
            .field("geometry", &self.g)
            .field("tokens", &self.tokens)
            .finish()
    }
}

/// Least common multiple.
pub(crate) fn lcm(a: usize, b: usize) -> usize {
    let gcd = |mut x: usize, mut y: usize| {
        while y != 0 {
            (x, y) = (y, x % y);
        }
        x
    };
    a / gcd(a, b) * b
}

impl Layer {
    /// An empty layer of `method` for `heads` KV heads of width `dim` on `choice` (an error
    /// when a kernel cannot run there): a lone layer, index 0 ([`Layer::new_at`]).
    pub fn new(
        ctx: &Context,
        heads: usize,
        dim: usize,
        method: &Method,
        choice: PathChoice,
    ) -> Result<Self> {
        Self::new_at(ctx, 0, heads, dim, method, choice)
    }

    /// [`Layer::new`] for layer `index` of a model (codecs with per-layer random tables draw
    /// them for this index).
    pub fn new_at(
        ctx: &Context,
        index: usize,
        heads: usize,
        dim: usize,
        method: &Method,
        choice: PathChoice,
    ) -> Result<Self> {
        if let Some(e) = method.eviction() {
            return Err(Error::Config(format!(
                "`{method}`: a Layer does not evict; make a layer under eviction ({}) with \
                 Method::layer / Method::layer_at",
                e.policy.name()
            )));
        }
        let g = Geometry::new(heads, dim)?;
        let r = method.residual();
        let center = method.center().map(|c| c.mean(index, g)).transpose()?;
        let codecs = [
            method.key().build(ctx, g, r, index, choice)?,
            method.value().build(ctx, g, r, index, choice)?,
        ];
        if codecs[0].path().is_gpu() != codecs[1].path().is_gpu() {
            return Err(Error::Config(
                "keys and values must both run on the CPU or both on the GPU".into(),
            ));
        }
        let store = if codecs[0].path().is_gpu() {
            // Both sides split their segments at the same tokens.
            let unit = lcm(codecs[0].block_tokens(), codecs[1].block_tokens());
            let mut seg_tokens = usize::MAX;
            for c in &codecs {
                seg_tokens =
                    seg_tokens.min(GpuSide::max_segment_blocks(ctx, &**c)? * c.block_tokens());
            }
            let seg_tokens = seg_tokens / unit * unit;
            if seg_tokens == 0 {
                return Err(Error::Limit {
                    what: "one block of both sides in a segment",
                    needed: unit as u64,
                    limit: seg_tokens as u64,
                });
            }
            let side =
                |c: &Arc<dyn Codec>| GpuSide::new(ctx, &**c, r, seg_tokens / c.block_tokens());
            // A row of f16's largest value: a codec whose row check refuses it checks the
            // per-vector norm (`crate::codec::check_row_norms`), which GPU input repeats.
            let big = vec![f16::MAX; g.token_elems()];
            let norm_checks = [0, 1].map(|i| g.dim > 1 && codecs[i].check_rows(0, &big).is_err());
            Store::Gpu(Box::new(GpuStore {
                sides: [side(&codecs[0])?, side(&codecs[1])?],
                choice,
                input_status: gpu::storage_buffer(
                    ctx,
                    "kvpack input status",
                    gpu_input::status_bytes(g),
                )?,
                unsynced: false,
                norm_checks,
                positions: false,
                scratch: Default::default(),
            }))
        } else {
            Store::Cpu([CpuSide::new(&*codecs[0]), CpuSide::new(&*codecs[1])])
        };
        Ok(Self {
            ctx: ctx.clone(),
            index,
            method: method.clone(),
            g,
            residual: r,
            codecs,
            tokens: 0,
            store,
            center,
        })
    }

    /// A layer of `method` (its codecs drawn for model layer `index`, [`Layer::new_at`]) for
    /// `heads` KV heads of width `dim` on `choice` holding the words of `snapshot` (taken on any path: stored words are the same everywhere), as
    /// [`KvLayer::snapshot`] of a layer that appended them would return; the next appends,
    /// attention and snapshots continue from there. The snapshot is checked first
    /// ([`Snapshot::check`]: lengths, the quantized count, finite values): one that no layer
    /// of this method and geometry could hold is an error, and no layer is made.
    pub fn from_snapshot(
        ctx: &Context,
        index: usize,
        heads: usize,
        dim: usize,
        method: &Method,
        choice: PathChoice,
        snapshot: &Snapshot,
    ) -> Result<Self> {
        let mut layer = Self::new_at(ctx, index, heads, dim, method, choice)?;
        layer.restore_words(snapshot)?;
        Ok(layer)
    }

    /// Fills this empty layer with the words of `snapshot` (checked first, as
    /// [`Layer::from_snapshot`] says; after an error the layer may hold one side's words and
    /// is dropped by every caller). Eviction restores
    /// through this after enabling positions on the empty layer, so that segment 0 is laid
    /// out with its positions stream.
    pub(crate) fn restore_words(&mut self, snapshot: &Snapshot) -> Result<()> {
        if self.tokens > 0 {
            return Err(Error::Config(
                "a snapshot is restored into an empty layer (a kvpack bug)".into(),
            ));
        }
        snapshot.check([&*self.codecs[0], &*self.codecs[1]], self.residual)?;
        let t = snapshot.tokens;
        let sides = [&snapshot.keys, &snapshot.values];
        match &mut self.store {
            Store::Cpu(s) => {
                *s = [
                    CpuSide::restore(&self.ctx, sides[0])?,
                    CpuSide::restore(&self.ctx, sides[1])?,
                ];
            }
            Store::Gpu(s) => {
                for (i, side) in s.sides.iter_mut().enumerate() {
                    side.restore(&*self.codecs[i], t, sides[i])?;
                }
            }
        }
        self.tokens = t;
        Ok(())
    }

    /// The work of [`KvLayer::prepare`], owning what it needs (for a thread of its own);
    /// `None` on the CPU path.
    fn prepare_job(&self) -> Option<impl FnOnce() -> Result<()> + Send + 'static> {
        self.prepare_job_with(Vec::new())
    }

    /// [`Self::prepare_job`] that also builds `extra`'s pipelines (eviction's scoring and selection kernels,
    /// specialized as its plan says).
    pub(crate) fn prepare_job_with(
        &self,
        extra: Vec<(
            &'static crate::gpu::registry::KernelDef,
            crate::gpu::registry::Specialization,
        )>,
    ) -> Option<impl FnOnce() -> Result<()> + Send + 'static> {
        let Store::Gpu(s) = &self.store else {
            return None;
        };
        let ctx = self.ctx.clone();
        let codecs = self.codecs.clone();
        let (choice, norms, ring, dim) = (s.choice, s.norm_checks, self.has_ring(), self.g.dim);
        let positions = s.positions;
        Some(move || {
            gpu::gpu_of(&ctx, "prepare")?;
            gpu_input::prepare(&ctx, norms, ring)?;
            for c in &codecs {
                crate::store::gpu::prepare_encode(&ctx, &**c)?;
            }
            if positions {
                // A layer under eviction: its compaction kernel.
                let def = &crate::policy::kernels::EVICT_COMPACT;
                let path = ctx.resolve(def, choice)?;
                gpu::pipeline::pipeline(&ctx, def, path, &Default::default())?;
            }
            for (def, spec) in &extra {
                let path = ctx.resolve(def, choice)?;
                gpu::pipeline::pipeline(&ctx, def, path, spec)?;
            }
            attention::gpu::prepare(&ctx, &*codecs[0], &*codecs[1], choice, dim, ring, positions)
        })
    }

    /// Whether either side can hold rows in a residual ring (`R + G − 1 > 0`; fixed for the
    /// layer's life).
    pub fn has_ring(&self) -> bool {
        self.codecs
            .iter()
            .any(|c| self.residual + c.block_tokens() > 1)
    }

    /// A KIVI layer (both sides) with `cfg`.
    pub fn kivi(
        ctx: &Context,
        heads: usize,
        dim: usize,
        cfg: &crate::codecs::kivi::KiviConfig,
        choice: PathChoice,
    ) -> Result<Self> {
        Self::new(ctx, heads, dim, &Method::kivi(cfg)?, choice)
    }

    /// The uncompressed f16 layer.
    pub fn f16(ctx: &Context, heads: usize, dim: usize, choice: PathChoice) -> Result<Self> {
        Self::new(ctx, heads, dim, &Method::f16(), choice)
    }

    /// The fixed shape.
    pub fn geometry(&self) -> Geometry {
        self.g
    }

    /// The residual window R.
    pub fn residual(&self) -> usize {
        self.residual
    }

    /// The codec of one side.
    pub fn codec(&self, side: Side) -> &dyn Codec {
        &*self.codecs[side as usize]
    }

    /// Tokens of `side` in its codec's stored form (`Q` of that side).
    pub fn quantized_len(&self, side: Side) -> usize {
        quantized_len(
            self.tokens,
            self.residual,
            self.codecs[side as usize].block_tokens(),
        )
    }

    /// Checks shapes, values and the token limit, and rounds to f16 (nothing is stored).
    fn validate(&self, k: Input<'_>, v: Input<'_>) -> Result<(Vec<f16>, Vec<f16>)> {
        let row = self.g.token_elems();
        if !k.len().is_multiple_of(row) {
            return Err(Error::Shape {
                what: "k",
                message: format!(
                    "{} values is not a whole number of [H={}, D={}] rows",
                    k.len(),
                    self.g.heads,
                    self.g.dim
                ),
            });
        }
        if v.len() != k.len() {
            return Err(Error::Shape {
                what: "v",
                message: format!("v has {} values, k has {}", v.len(), k.len()),
            });
        }
        check_token_limit(self.tokens, k.len() / row)?;
        let k16 = match &self.center {
            None => k.to_f16("k")?,
            Some(mu) => {
                // The input is checked as given (NaN, ±Inf, beyond f16), then centered.
                let x: Vec<f32> = match k {
                    Input::F32(x) => {
                        k.to_f16("k")?;
                        x.to_vec()
                    }
                    Input::F16(_) => k.to_f16("k")?.iter().map(|h| h.to_f32()).collect(),
                };
                Input::F32(&crate::store::center::subtract(&x, mu)).to_f16("k (centered)")?
            }
        };
        Ok((k16, v.to_f16("v")?))
    }

    /// Key centering's μ `[H·D]`, if the method centers keys.
    pub fn center_mean(&self) -> Option<&[f32]> {
        self.center.as_deref()
    }

    /// Each side's codec checks the rows it will store ([`Codec::check_rows`]).
    fn check_rows(&self, rows: [&[f16]; 2]) -> Result<()> {
        for (c, r) in self.codecs.iter().zip(rows) {
            c.check_rows(self.tokens, r)?;
        }
        Ok(())
    }

    fn append_rows(&mut self, rows: [NewRows<'_>; 2], n: usize) -> Result<()> {
        let (t, r) = (self.tokens, self.residual);
        match &mut self.store {
            Store::Cpu(sides) => {
                let (NewRows::Host(k), NewRows::Host(v)) = (rows[0], rows[1]) else {
                    return Err(Error::Gpu {
                        during: "append",
                        message: "device rows on the CPU path (a kvpack bug)".into(),
                    });
                };
                let pk = sides[0].prepare(&self.ctx, &*self.codecs[0], r, t, k)?;
                let pv = sides[1].prepare(&self.ctx, &*self.codecs[1], r, t, v)?;
                sides[0].commit(pk);
                sides[1].commit(pv);
            }
            Store::Gpu(s) => {
                let mut staged = None;
                let row = self.g.token_elems();
                let rows = crate::store::gpu::stage_rows(&self.ctx, row, rows, &mut staged)?;
                let p = [
                    s.sides[0].prepare(&*self.codecs[0], r, t, rows[0])?,
                    s.sides[1].prepare(&*self.codecs[1], r, t, rows[1])?,
                ];
                let checked: Vec<usize> = (0..2)
                    .filter(|&i| self.codecs[i].needs_status() && GpuSide::encodes(&p[i]))
                    .collect();
                let ctx = self.ctx.clone();
                let sides = &s.sides;
                let encode = |enc: &mut wgpu::CommandEncoder| -> Result<()> {
                    for ((side, codec), p) in sides.iter().zip(&self.codecs).zip(&p) {
                        side.record_encode(&**codec, p, enc)?;
                    }
                    Ok(())
                };
                let commit = |enc: &mut wgpu::CommandEncoder| -> Result<()> {
                    for (side, p) in sides.iter().zip(&p) {
                        side.record_commit(p, enc, None)?;
                    }
                    Ok(())
                };
                if checked.is_empty() {
                    gpu::submit_blocking(&ctx, "append", |enc| {
                        encode(enc)?;
                        commit(enc)
                    })?;
                } else {
                    // Phase 1, then the status words, then the commit.
                    gpu::submit_blocking(&ctx, "append (encode)", encode)?;
                    for &i in &checked {
                        let status = s.sides[i].read_status()?;
                        if status != 0 {
                            return Err(self.codecs[i].status_error(
                                status,
                                quantized_len(t, r, self.codecs[i].block_tokens()),
                            ));
                        }
                    }
                    gpu::submit_blocking(&ctx, "append (commit)", commit)?;
                }
                let [pk, pv] = p;
                s.sides[0].apply(pk);
                s.sides[1].apply(pv);
            }
        }
        self.tokens += n;
        Ok(())
    }

    /// For the readers (`&self`): the error of a rejected unsynced append, if any.
    fn check_unsynced(&self) -> Result<()> {
        let unsynced = match &self.store {
            Store::Gpu(s) if s.unsynced => Some(s),
            _ => None,
        };
        if let Some(s) = unsynced {
            let words = self.read_input_status(s)?;
            if let Some(e) = self.status_error(&words) {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Whether the layer's words live on the GPU.
    pub(crate) fn on_gpu(&self) -> bool {
        matches!(self.store, Store::Gpu(_))
    }

    /// The context the layer runs on.
    pub(crate) fn context(&self) -> &Context {
        &self.ctx
    }

    /// The path choice of a GPU layer's store (`None` on the CPU path).
    pub(crate) fn gpu_choice(&self) -> Option<PathChoice> {
        match &self.store {
            Store::Gpu(s) => Some(s.choice),
            Store::Cpu(_) => None,
        }
    }
}
