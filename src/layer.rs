//! [`KvLayer`]: one layer's cache, whatever the method, and [`Layer`], its one
//! implementation: a key codec and a value codec over the shared store.
//!
//! The layer owns the token count and the residual window R; each side (keys, values) is
//! stored by its codec in a `store::cpu::CpuSide` or a
//! `store::gpu::GpuSide`. Appends validate first (shapes, NaN/Inf, f16 range, the
//! token limit), then run both sides' phase 1 (encode and allocate), then commit both: an
//! error anywhere before the commit leaves the layer as it was.

use std::sync::Arc;

use half::f16;

use crate::attention::{self, AttendOptions};
use crate::codec::Codec;
use crate::context::{Context, PathChoice};
use crate::cpu::attend::{Positions, SideView};
use crate::error::{Error, Result};
use crate::gpu;
use crate::method::Method;
use crate::store::cpu::CpuSide;
use crate::store::gpu::{GpuSide, NewRows};
use crate::store::gpu_input::{self, GpuInput};
use crate::store::{
    Geometry, Input, Memory, MemoryReport, Side, SideWords, Snapshot, check_token_limit,
    quantized_len,
};

/// One layer's cache, whatever the method: what a model's attention needs from it. Lets
/// tools and models swap methods (and the f16 baseline) without knowing their storage.
pub trait KvLayer: Send + Sync + std::fmt::Debug {
    /// Appends `[n, H, D]` K and V (blocking on GPU paths). On any error nothing changes.
    fn append(&mut self, k: Input<'_>, v: Input<'_>) -> Result<()>;
    /// [`KvLayer::append`] recorded into the caller's encoder (GPU layers). The layer counts
    /// the tokens at once: submit the encoder before the next call that reads or appends,
    /// and never drop it unsubmitted. Recorded while an [`KvLayer::encode_append_gpu`] is
    /// unsynced, its window writes wait on that append's GPU check (and are rolled back with
    /// it if it was rejected).
    fn encode_append(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        k: Input<'_>,
        v: Input<'_>,
    ) -> Result<()>;
    /// Appends `n` tokens of K and V that live in the application's device buffers (see
    /// [`GpuInput`] for the layout and what is checked), blocking like [`KvLayer::append`],
    /// and with its exact result: the same stored words as the host append of the same
    /// values, and the same errors, [`Error::NonFinite`] (NaN, ±Inf, beyond f16) with the
    /// same index and value, and the codecs' own row checks (per-vector norms). The values are
    /// converted and checked on the GPU; only a status word (and, for a rejected norm, one
    /// token's row) is read back. Buffer problems are typed errors before anything runs:
    /// [`Error::Config`] for a buffer without `STORAGE` usage or of another device,
    /// [`Error::Shape`] for a misaligned offset or K and V of different token counts,
    /// [`Error::LengthMismatch`] for a range past the buffer's end, [`Error::Limit`] for one
    /// beyond a storage binding. On any error nothing changes. On the CPU path:
    /// [`Error::PathUnavailable`] (kvpack never reads an app's buffer back behind its back).
    fn append_gpu(&mut self, k: GpuInput<'_>, v: GpuInput<'_>) -> Result<()>;
    /// [`KvLayer::append_gpu`] recorded into the caller's encoder: no submit, no readback.
    /// The layer counts the tokens at once (submit the encoder before the next call that
    /// reads or appends, never drop it unsubmitted). Buffer problems are the same typed errors,
    /// returned before anything is recorded; a configuration that needs the blocking append's
    /// status check is refused as by [`KvLayer::encode_append`].
    ///
    /// **Values are checked on the GPU.** If this append's input holds a value the host
    /// append would refuse (NaN, ±Inf, beyond f16, or a vector norm the codec cannot store),
    /// the GPU marks the layer's input status *rejected*, and every write to the residual
    /// window of this append and of every append recorded after it (host or GPU input) is
    /// skipped; tokens stored before it keep their words. The layer learns it at its next
    /// sync: [`KvLayer::sync`] (or the blocking `append`/`append_gpu`, which sync first) rolls
    /// the layer back to the tokens it held before the rejected append, forgetting the
    /// appends recorded after it (buffers they grew stay: `memory().held` may be larger), and
    /// returns the error the host append would have returned.
    /// Until then `len()` and `memory()` count the rejected tokens, the readers that read
    /// stored words back (`snapshot`, `attend`, `reconstruct`, `attend_reference`) return
    /// that error without changing anything, and attention recorded with `encode_attend`
    /// reads unspecified values for the rejected tokens.
    fn encode_append_gpu(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        k: GpuInput<'_>,
        v: GpuInput<'_>,
    ) -> Result<()>;
    /// Reads the input status of the appends recorded by [`KvLayer::encode_append_gpu`] since
    /// the last sync (blocking; a no-op when there are none, and on the CPU path): `Ok` when
    /// every one was stored, else rolls the layer back to the tokens it held before the first
    /// rejected one and returns its error (see there). Their encoders must have been submitted.
    fn sync(&mut self) -> Result<()>;
    /// Attention of host queries `[Tq, Hq, D]` (query row i at position T − Tq + i) over the
    /// cache as stored; `[Tq, Hq, D]` f32.
    fn attend(&self, q: &[f32], hq: usize, opts: &AttendOptions) -> Result<Vec<f32>>;
    /// Attention recorded into the caller's encoder (GPU paths): `q` `[tq, Hq, D]` f32 and
    /// `out` `[tq, Hq, D]` f32 are device buffers.
    fn encode_attend(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        q: &wgpu::Buffer,
        tq: usize,
        hq: usize,
        opts: &AttendOptions,
        out: &wgpu::Buffer,
    ) -> Result<()>;
    /// Bytes held and the ratio against f16.
    fn memory(&self) -> MemoryReport;
    /// Tokens held (per KV head: under eviction, every head holds the same number).
    fn len(&self) -> usize;
    /// Tokens appended: the position of the next token ([`KvLayer::len`] unless the layer
    /// evicts, [`crate::policy`]).
    fn appended(&self) -> usize {
        self.len()
    }
    /// The eviction policy's state (scores, positions, counters) of a layer that evicts
    /// ([`crate::policy::EvictingLayer`]; saved with the cache), else `None`.
    fn eviction_state(&self) -> Option<crate::policy::layer::EvictionState> {
        None
    }
    /// True before the first append.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A CPU copy of the stored words (read back on GPU paths): for tests and tools.
    fn snapshot(&self) -> Result<Snapshot>;
    /// The reconstruction of the whole cache as f32 `[T, H, D]` (K̂, V̂): decoded blocks,
    /// then the f16 window (tests and tools; attention never does this).
    fn reconstruct(&self) -> Result<(Vec<f32>, Vec<f32>)>;
    /// The reconstruction of one side (`[T, H, D]` f32), e.g. the values of a cache whose
    /// keys have none (QJL: [`crate::Error::Config`] for its keys).
    fn reconstruct_side(&self, side: crate::store::Side) -> Result<Vec<f32>>;
    /// The CPU reference of attention over this layer's stored words (read back on GPU
    /// paths): what [`KvLayer::attend`] must agree with.
    fn attend_reference(&self, q: &[f32], hq: usize, opts: &AttendOptions) -> Result<Vec<f32>>;
    /// The method.
    fn method(&self) -> &Method;
    /// The fixed shape: KV heads and head width.
    fn geometry(&self) -> Geometry;
    /// The model layer its codecs drew per-layer tables for ([`Method::layer_at`]; 0 for a
    /// lone layer): saved with the cache so that a loaded layer decodes with the same tables.
    fn index(&self) -> usize;
    /// The codec of one side (what it stores, its settings and tables).
    fn codec(&self, side: Side) -> &dyn Codec;
    /// The path the key side's and the value side's kernels run on.
    fn paths(&self) -> [crate::path::KernelPath; 2];
    /// The attention kernels this layer runs and their paths (the CPU reference: none).
    fn attend_kernels(&self) -> Result<Vec<(&'static str, crate::path::KernelPath)>>;
    /// The method, the path of each side and the residual window, in words.
    fn describe(&self) -> String;
    /// Builds every GPU pipeline this layer's appends and attention calls will use, so that
    /// none of them compiles a shader (and waits for it) later: the store's kernels (GPU-input
    /// conversion and checks, the conditional ring writes), each codec's encode kernels, and
    /// the attention kernels (decode, prefill where the key codec serves it, merge) with the
    /// one specialization every call of this layer gets (head width, the device's subgroup
    /// width class, whether the layer has a ring, the codecs' constants: never a length).
    /// Blocking; [`KvLayer::prepare_async`] builds them on a thread of its own. Call it once
    /// after making the layer (layers of the same method and geometry on one context share
    /// their pipelines: preparing the first prepares them all). `Ok` with nothing to do on
    /// the CPU path. Not covered: the GPU reconstruction kernels of
    /// [`KvLayer::reconstruct`] (a tool, built on its first call). A kernel the device
    /// rejects is [`Error::Shader`].
    fn prepare(&self) -> Result<()> {
        Ok(())
    }
    /// [`KvLayer::prepare`] on a thread of kvpack's own: returns at once with a
    /// [`crate::Preparing`], a future of prepare's result (await it, poll it once per frame,
    /// or [`crate::Preparing::wait`]). Calls made before it finishes stay correct: a pipeline
    /// not yet built is built by the call that needs it (which may then wait for it).
    fn prepare_async(&self) -> crate::Preparing {
        crate::Preparing::ready(self.prepare())
    }
}

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
        self.prepare_job_with(None)
    }

    /// [`Self::prepare_job`] that also builds `extra`'s pipeline (eviction's scoring kernel,
    /// specialized as its plan says).
    pub(crate) fn prepare_job_with(
        &self,
        extra: Option<(
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
            if let Some((def, spec)) = &extra {
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

    /// The error for a GPU-input append under key centering.
    fn centered_gpu_input(&self, call: &str) -> Error {
        Error::Config(format!(
            "{call}: key centering (`center=calib`) is applied to host appends only; append \
             from host memory or use a method without centering"
        ))
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

    /// Checks both sides' device inputs (see [`GpuInput`]) before anything is recorded.
    fn check_gpu_inputs<'a>(
        &self,
        k: &GpuInput<'a>,
        v: &GpuInput<'a>,
    ) -> Result<[gpu_input::Bound<'a>; 2]> {
        if v.tokens != k.tokens {
            return Err(Error::Shape {
                what: "v",
                message: format!("v has {} tokens, k has {}", v.tokens, k.tokens),
            });
        }
        check_token_limit(self.tokens, k.tokens)?;
        let row = self.g.token_elems();
        let kb = gpu_input::check_input(&self.ctx, "k", k, row)?;
        let vb = gpu_input::check_input(&self.ctx, "v", v, row)?;
        if let (Store::Gpu(s), true) = (&self.store, k.tokens > 0) {
            let placeholder = s.sides[0].placeholder();
            gpu_input::check_device(&self.ctx, "k", &kb, placeholder)?;
            gpu_input::check_device(&self.ctx, "v", &vb, placeholder)?;
        }
        Ok([kb, vb])
    }

    /// The CPU path's refusal of device input.
    fn gpu_input_on_cpu(&self, call: &str) -> Error {
        Error::PathUnavailable {
            kernel: self.codecs[0].method(),
            requested: PathChoice::Cpu.to_string(),
            reason: format!(
                "{call}() reads the application's GPU buffers; this layer runs on the CPU \
                 (append host values with append())"
            ),
        }
    }

    /// One scratch buffer of f16 rows per side for `n` tokens.
    fn scratch_rows(&self, n: usize) -> Result<[wgpu::Buffer; 2]> {
        let bytes = (n * self.g.row_words() * 4) as u64;
        Ok([
            gpu::storage_buffer(&self.ctx, "kvpack converted keys", bytes)?,
            gpu::storage_buffer(&self.ctx, "kvpack converted values", bytes)?,
        ])
    }

    /// The input status's words (blocking).
    fn read_input_status(&self, s: &GpuStore) -> Result<Vec<u32>> {
        let bytes = gpu_input::status_bytes(self.g);
        Ok(bytemuck::pod_collect_to_vec(&gpu::readback(
            &self.ctx,
            &s.input_status,
            bytes,
        )?))
    }

    /// The error of a rejected append, if the input status holds one.
    fn status_error(&self, words: &[u32]) -> Option<Error> {
        (words[gpu_input::status::REJECTED] != 0).then(|| {
            gpu_input::rejected_error(words, self.g, |side, first, row| {
                self.codecs[side].check_rows(first, row)
            })
        })
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

    fn side_words(&self, i: usize) -> Result<SideWords> {
        let q = quantized_len(self.tokens, self.residual, self.codecs[i].block_tokens());
        Ok(match &self.store {
            Store::Cpu(sides) => SideWords {
                quantized: q,
                streams: sides[i].streams.clone(),
                residual: sides[i].resid.clone(),
            },
            Store::Gpu(s) => SideWords {
                quantized: q,
                streams: s.sides[i].read_streams(&*self.codecs[i], q)?,
                residual: s.sides[i].read_ring(q, self.tokens)?,
            },
        })
    }

    fn check_attend(&self, q_len: usize, hq: usize, opts: &AttendOptions) -> Result<usize> {
        attention::check_query(q_len, hq, self.g.heads, self.g.dim, self.tokens, opts)
    }

    fn call(&self, tq: usize, hq: usize, opts: &AttendOptions) -> attention::plan::Call {
        attention::plan::Call {
            tq,
            hq,
            hkv: self.g.heads,
            dim: self.g.dim,
            tokens: self.tokens,
            opts: *opts,
        }
    }

    /// What the attention kernels read of the GPU store: both sides' segments and rings, and
    /// the cache's shape.
    fn attend_inputs<'a>(
        &'a self,
        s: &'a GpuStore,
        at: Option<&Positions<'_>>,
    ) -> (
        [attention::gpu::SideBuffers<'a>; 2],
        attention::plan::CacheShape,
    ) {
        let side = |i: usize| {
            let g = &s.sides[i];
            attention::gpu::SideBuffers {
                codec: &*self.codecs[i],
                segments: g.segments.iter().map(|seg| seg.at(0, &g.tables)).collect(),
                ring: g.ring.as_ref().map(|r| &r.buffer),
                tables: &g.tables,
            }
        };
        let shape = attention::plan::CacheShape {
            qk: self.quantized_len(Side::Keys),
            qv: self.quantized_len(Side::Values),
            seg_tokens: s.sides[0].seg_blocks * self.codecs[0].block_tokens(),
            ring_cap: [0, 1].map(|i| s.sides[i].ring.as_ref().map_or(1, |r| r.cap)),
            row_words: self.g.row_words(),
            value_dim: self.codecs[1].value_dim(),
            value_space_out: self.codecs[1].attend_value_space_out(),
            key_prep: self.codecs[0].attend_hooks().k_prep,
            ring: self.has_ring(),
            positions: s.positions.then(|| attention::plan::KeyPositions {
                offset: s.sides[0].positions_offset().unwrap_or(0),
                rows: at.map_or(0, |p| p.table.len() / self.g.heads),
                evicted: at.map_or(0, |p| p.appended - self.tokens),
            }),
        };
        ([side(0), side(1)], shape)
    }

    /// Attention on the GPU store for host queries (blocking), reusing the layer's partials.
    fn run_gpu(
        ctx: &Context,
        s: &GpuStore,
        call: &attention::plan::Call,
        shape: &attention::plan::CacheShape,
        sides: &[attention::gpu::SideBuffers<'_>; 2],
        q: &[f32],
    ) -> Result<Vec<f32>> {
        attention::gpu::run(
            ctx,
            s.choice,
            call,
            shape,
            [&sides[0], &sides[1]],
            s.sides[0].placeholder(),
            q,
            &s.scratch,
        )
    }

    fn cpu_attend(
        &self,
        snap: Option<&Snapshot>,
        q: &[f32],
        hq: usize,
        opts: &AttendOptions,
    ) -> Result<Vec<f32>> {
        self.cpu_attend_at(snap, None, q, hq, opts)
    }

    /// The CPU reference of attention, the held tokens at `positions` (`None`: token j at j).
    fn cpu_attend_at(
        &self,
        snap: Option<&Snapshot>,
        positions: Option<&Positions<'_>>,
        q: &[f32],
        hq: usize,
        opts: &AttendOptions,
    ) -> Result<Vec<f32>> {
        let views = |s: &Snapshot| -> Result<Vec<f32>> {
            let k = SideView::new(&*self.codecs[0], &s.keys);
            let v = SideView::new(&*self.codecs[1], &s.values);
            Ok(crate::cpu::attend::attend_at(
                &k,
                &v,
                self.tokens,
                positions,
                q,
                hq,
                opts,
            ))
        };
        match (&self.store, snap) {
            (Store::Cpu(sides), None) => {
                let side = |i: usize| SideView {
                    codec: &*self.codecs[i],
                    words: sides[i].streams.iter().map(Vec::as_slice).collect(),
                    quantized: quantized_len(
                        self.tokens,
                        self.residual,
                        self.codecs[i].block_tokens(),
                    ),
                    residual: &sides[i].resid,
                };
                Ok(crate::cpu::attend::attend_at(
                    &side(0),
                    &side(1),
                    self.tokens,
                    positions,
                    q,
                    hq,
                    opts,
                ))
            }
            (_, Some(s)) => views(s),
            (Store::Gpu(_), None) => views(&self.snapshot()?),
        }
    }

    /// Whether the layer's words live on the GPU.
    pub(crate) fn on_gpu(&self) -> bool {
        matches!(self.store, Store::Gpu(_))
    }

    /// Eviction (`crate::policy`): the CPU reference of attention over the held tokens at
    /// `positions` (query rows at the last positions of `positions.appended`). Checks the
    /// query like [`KvLayer::attend`], the row count against the tokens appended.
    pub(crate) fn attend_positions(
        &self,
        q: &[f32],
        hq: usize,
        opts: &AttendOptions,
        positions: &Positions<'_>,
    ) -> Result<Vec<f32>> {
        self.check_positions_query(q, hq, opts, positions)?;
        match &self.store {
            Store::Gpu(s) if s.positions => {
                let (sides, shape) = self.attend_inputs(s, Some(positions));
                let call = attention::plan::Call {
                    tokens: self.tokens,
                    ..self.call(q.len() / (hq * self.g.dim), hq, opts)
                };
                Self::run_gpu(&self.ctx, s, &call, &shape, &sides, q)
            }
            _ => self.cpu_attend_at(None, Some(positions), q, hq, opts),
        }
    }

    /// [`KvLayer::append_gpu`], returning the converted f16 key rows `[n][row_words]` u32
    /// of the tokens it appended (`None` for none): eviction scores them on the device.
    pub(crate) fn append_gpu_rows(
        &mut self,
        k: GpuInput<'_>,
        v: GpuInput<'_>,
    ) -> Result<Option<wgpu::Buffer>> {
        if !matches!(self.store, Store::Gpu(_)) {
            return Err(self.gpu_input_on_cpu("append_gpu"));
        }
        if self.center.is_some() {
            return Err(self.centered_gpu_input("append_gpu"));
        }
        self.sync()?;
        let bound = self.check_gpu_inputs(&k, &v)?;
        let n = k.tokens;
        if n == 0 {
            return Ok(None);
        }
        let rows = self.scratch_rows(n)?;
        let Store::Gpu(s) = &self.store else {
            unreachable!("checked above")
        };
        gpu::submit_blocking(&self.ctx, "append (convert input)", |enc| {
            enc.clear_buffer(&s.input_status, 0, None);
            gpu_input::record_convert(
                &self.ctx,
                enc,
                self.g,
                self.tokens,
                n,
                [&bound[0], &bound[1]],
                [&rows[0], &rows[1]],
                s.norm_checks,
                &s.input_status,
            )
        })?;
        let words = self.read_input_status(s)?;
        if words[gpu_input::status::REJECTED] != 0 {
            let e = self.status_error(&words);
            gpu::submit_blocking(&self.ctx, "append (clear input status)", |enc| {
                enc.clear_buffer(&s.input_status, 0, None);
                Ok(())
            })?;
            return Err(e.unwrap_or_else(|| Error::Gpu {
                during: "append",
                message: "rejected input without an error (a kvpack bug)".into(),
            }));
        }
        self.append_rows(
            [
                NewRows::Device {
                    buffer: &rows[0],
                    tokens: n,
                },
                NewRows::Device {
                    buffer: &rows[1],
                    tokens: n,
                },
            ],
            n,
        )?;
        let [keys, _] = rows;
        Ok(Some(keys))
    }

    /// [`KvLayer::encode_append_gpu`], returning the buffer its converted f16 key rows
    /// `[n][row_words]` u32 are recorded into (`None` for no tokens): eviction records its
    /// scoring of them after the append.
    pub(crate) fn encode_append_gpu_rows(
        &mut self,
        enc: &mut wgpu::CommandEncoder,
        k: GpuInput<'_>,
        v: GpuInput<'_>,
    ) -> Result<Option<wgpu::Buffer>> {
        if !matches!(self.store, Store::Gpu(_)) {
            return Err(self.gpu_input_on_cpu("encode_append_gpu"));
        }
        if self.center.is_some() {
            return Err(self.centered_gpu_input("encode_append_gpu"));
        }
        let bound = self.check_gpu_inputs(&k, &v)?;
        let n = k.tokens;
        if n == 0 {
            return Ok(None);
        }
        let rows = self.scratch_rows(n)?;
        let (t, r) = (self.tokens, self.residual);
        let Store::Gpu(s) = &mut self.store else {
            unreachable!("checked above")
        };
        let new = |i: usize| NewRows::Device {
            buffer: &rows[i],
            tokens: n,
        };
        let p = [
            s.sides[0].prepare(&*self.codecs[0], r, t, new(0))?,
            s.sides[1].prepare(&*self.codecs[1], r, t, new(1))?,
        ];
        for (codec, p) in self.codecs.iter().zip(&p) {
            if codec.needs_status() && GpuSide::encodes(p) {
                return Err(Error::Config(format!(
                    "{} {}: this configuration can overflow its parameter storage and needs the status check of \
                     the blocking append_gpu(); encode_append_gpu() records without reading back",
                    codec.method(),
                    codec.side().name()
                )));
            }
        }
        // From the first command recorded on, the layer reads the input status at its next
        // sync (even if recording fails below: a conversion already recorded may flag it).
        s.unsynced = true;
        gpu_input::record_convert(
            &self.ctx,
            enc,
            self.g,
            t,
            n,
            [&bound[0], &bound[1]],
            [&rows[0], &rows[1]],
            s.norm_checks,
            &s.input_status,
        )?;
        for ((side, codec), p) in s.sides.iter().zip(&self.codecs).zip(&p) {
            side.record_encode(&**codec, p, enc)?;
        }
        for (side, p) in s.sides.iter().zip(&p) {
            side.record_commit(p, enc, Some(&s.input_status))?;
        }
        let [pk, pv] = p;
        s.sides[0].apply(pk);
        s.sides[1].apply(pv);
        self.tokens += n;
        let [keys, _] = rows;
        Ok(Some(keys))
    }

    /// [`KvLayer::encode_attend`] over held tokens at `positions` (eviction: the table's rows
    /// are already in the positions stream, written at each eviction); `q` holds `tq` rows
    /// checked against the tokens appended.
    #[allow(clippy::too_many_arguments)] // encode_attend's arguments and the positions
    pub(crate) fn encode_attend_positions(
        &self,
        enc: &mut wgpu::CommandEncoder,
        q: &wgpu::Buffer,
        tq: usize,
        hq: usize,
        opts: &AttendOptions,
        out: &wgpu::Buffer,
        positions: &Positions<'_>,
    ) -> Result<()> {
        attention::check_query(
            tq * hq * self.g.dim,
            hq,
            self.g.heads,
            self.g.dim,
            positions.appended,
            opts,
        )?;
        self.encode_attend_at(enc, q, tq, hq, opts, out, Some(positions))
    }

    /// Records attention on the GPU store (checked by the caller).
    #[allow(clippy::too_many_arguments)]
    fn encode_attend_at(
        &self,
        enc: &mut wgpu::CommandEncoder,
        q: &wgpu::Buffer,
        tq: usize,
        hq: usize,
        opts: &AttendOptions,
        out: &wgpu::Buffer,
        positions: Option<&Positions<'_>>,
    ) -> Result<()> {
        let Store::Gpu(s) = &self.store else {
            return Err(Error::PathUnavailable {
                kernel: "attend",
                requested: PathChoice::Cpu.to_string(),
                reason: "encode_attend() records GPU work; this layer runs on the CPU".into(),
            });
        };
        let (sides, shape) = self.attend_inputs(s, positions.filter(|_| s.positions));
        attention::gpu::encode(
            &self.ctx,
            enc,
            s.choice,
            &self.call(tq, hq, opts),
            &shape,
            [&sides[0], &sides[1]],
            s.sides[0].placeholder(),
            q,
            out,
            &s.scratch,
        )
    }

    /// The CPU reference of [`Self::attend_positions`] on any path (GPU words read back).
    pub(crate) fn attend_positions_reference(
        &self,
        q: &[f32],
        hq: usize,
        opts: &AttendOptions,
        positions: &Positions<'_>,
    ) -> Result<Vec<f32>> {
        self.check_positions_query(q, hq, opts, positions)?;
        self.cpu_attend_at(None, Some(positions), q, hq, opts)
    }

    /// The checks of an attention call over held tokens at `positions`: nothing unsynced, q's
    /// shape against the tokens appended, finite values.
    fn check_positions_query(
        &self,
        q: &[f32],
        hq: usize,
        opts: &AttendOptions,
        positions: &Positions<'_>,
    ) -> Result<()> {
        self.check_unsynced()?;
        attention::check_query(
            q.len(),
            hq,
            self.g.heads,
            self.g.dim,
            positions.appended,
            opts,
        )?;
        attention::check_finite(q)
    }

    /// Eviction (`crate::policy`): drops whole units of `unit` tokens (a multiple of both
    /// sides' block sizes) from the quantized tokens of both sides: of the first `keep_of`
    /// units (all quantized on both sides), head h keeps `keep[h]` (ascending, one count for
    /// every head); later tokens move down; the residual window stays. CPU path only: on a
    /// GPU path [`Error::PathUnavailable`] (no GPU compaction kernel yet), nothing changed.
    pub(crate) fn evict_units(
        &mut self,
        unit: usize,
        keep_of: usize,
        keep: &[Vec<usize>],
    ) -> Result<()> {
        let kept = keep.first().map_or(keep_of, Vec::len);
        let ok = keep.len() == self.g.heads
            && keep.iter().all(|k| {
                k.len() == kept
                    && k.windows(2).all(|w| w[0] < w[1])
                    && k.iter().all(|&u| u < keep_of)
            })
            && self
                .codecs
                .iter()
                .all(|c| unit.is_multiple_of(c.block_tokens()))
            && keep_of * unit
                <= Side::ALL
                    .iter()
                    .map(|&s| self.quantized_len(s))
                    .min()
                    .unwrap_or(0);
        if !ok {
            return Err(Error::Config(format!(
                "eviction: a keep list that this layer cannot apply (unit {unit}, of {keep_of}); a kvpack bug"
            )));
        }
        self.check_unsynced()?;
        let qs = Side::ALL.map(|side| self.quantized_len(side));
        match &mut self.store {
            Store::Cpu(sides) => {
                for (side, codec) in sides.iter_mut().zip(&self.codecs) {
                    side.compact(&**codec, unit, keep_of, keep);
                }
            }
            Store::Gpu(s) => {
                // Segment 0 only (checked on both sides before either moves anything).
                if let Some(side) = s.sides.iter().find(|side| side.segments.len() > 1) {
                    return Err(Error::PathUnavailable {
                        kernel: "evict_compact",
                        requested: s.choice.to_string(),
                        reason: format!(
                            "eviction over {} segments: compaction moves units within segment 0 \
                             only in this version",
                            side.segments.len()
                        ),
                    });
                }
                for ((side, codec), q) in s.sides.iter().zip(&self.codecs).zip(qs) {
                    side.compact(&**codec, s.choice, unit, keep_of, keep, q, self.tokens)?;
                }
            }
        }
        self.tokens -= (keep_of - kept) * unit;
        Ok(())
    }

    /// Eviction: gives the key side a positions stream (`attention::plan::KeyPositions`) in
    /// every segment, and builds attention for it (`ATT_POS = 1`); an empty GPU layer only
    /// (a CPU layer has nothing to do: its positions are host tables). [`Error::Limit`] where
    /// a segment with the stream no longer fits a binding.
    pub(crate) fn enable_positions(&mut self) -> Result<()> {
        let Store::Gpu(s) = &mut self.store else {
            return Ok(());
        };
        if self.tokens > 0 {
            return Err(Error::Config(
                "eviction: positions are enabled on an empty layer (a kvpack bug)".into(),
            ));
        }
        let words = self.g.heads * self.codecs[0].block_tokens();
        let k = &*self.codecs[0];
        if !GpuSide::fits_with_positions(&self.ctx, k, s.sides[0].seg_blocks, words) {
            // Fewer blocks per segment on both sides (they split at the same tokens).
            let unit = lcm(k.block_tokens(), self.codecs[1].block_tokens());
            let mut blocks = s.sides[0].seg_blocks;
            while blocks > 0 && !GpuSide::fits_with_positions(&self.ctx, k, blocks, words) {
                blocks = blocks * 7 / 8;
            }
            let tokens = blocks * k.block_tokens() / unit * unit;
            if tokens == 0 {
                return Err(Error::Limit {
                    what: "one block of keys with its positions in a segment",
                    needed: words as u64 * 4,
                    limit: self.ctx.max_storage_binding_size(),
                });
            }
            for (side, c) in s.sides.iter_mut().zip(&self.codecs) {
                side.seg_blocks = tokens / c.block_tokens();
            }
        }
        s.sides[0].pos_words = words;
        s.positions = true;
        Ok(())
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

    /// Eviction: the first `table.len() / H` held slots' positions (`[rows][H]`), written into
    /// segment 0's positions stream (nothing on the CPU path).
    pub(crate) fn write_positions(&self, table: &[u32]) -> Result<()> {
        match &self.store {
            Store::Gpu(s) => s.sides[0].write_positions(table),
            Store::Cpu(_) => Ok(()),
        }
    }
}

impl KvLayer for Layer {
    fn append(&mut self, k: Input<'_>, v: Input<'_>) -> Result<()> {
        self.sync()?;
        let (k16, v16) = self.validate(k, v)?;
        self.check_rows([&k16, &v16])?;
        if k16.is_empty() {
            return Ok(());
        }
        let n = k16.len() / self.g.token_elems();
        self.append_rows([NewRows::Host(&k16), NewRows::Host(&v16)], n)
    }

    fn append_gpu(&mut self, k: GpuInput<'_>, v: GpuInput<'_>) -> Result<()> {
        self.append_gpu_rows(k, v).map(|_| ())
    }

    fn encode_append_gpu(
        &mut self,
        enc: &mut wgpu::CommandEncoder,
        k: GpuInput<'_>,
        v: GpuInput<'_>,
    ) -> Result<()> {
        self.encode_append_gpu_rows(enc, k, v).map(|_| ())
    }

    fn sync(&mut self) -> Result<()> {
        let Store::Gpu(s) = &self.store else {
            return Ok(());
        };
        if !s.unsynced {
            return Ok(());
        }
        let words = self.read_input_status(s)?;
        let err = self.status_error(&words);
        if err.is_some() {
            gpu::submit_blocking(&self.ctx, "sync (clear input status)", |enc| {
                enc.clear_buffer(&s.input_status, 0, None);
                Ok(())
            })?;
            self.tokens = words[gpu_input::status::T_OLD] as usize;
        }
        if let Store::Gpu(s) = &mut self.store {
            s.unsynced = false;
        }
        err.map_or(Ok(()), Err)
    }

    fn encode_append(
        &mut self,
        enc: &mut wgpu::CommandEncoder,
        k: Input<'_>,
        v: Input<'_>,
    ) -> Result<()> {
        let (k16, v16) = self.validate(k, v)?;
        self.check_rows([&k16, &v16])?;
        let Store::Gpu(s) = &mut self.store else {
            return Err(Error::PathUnavailable {
                kernel: self.codecs[0].method(),
                requested: PathChoice::Cpu.to_string(),
                reason: "encode_append() records GPU work; this layer runs on the CPU".into(),
            });
        };
        if k16.is_empty() {
            return Ok(());
        }
        let (t, r) = (self.tokens, self.residual);
        let rows = [&k16[..], &v16[..]];
        let p = [
            s.sides[0].prepare(&*self.codecs[0], r, t, NewRows::Host(rows[0]))?,
            s.sides[1].prepare(&*self.codecs[1], r, t, NewRows::Host(rows[1]))?,
        ];
        for (codec, p) in self.codecs.iter().zip(&p) {
            if codec.needs_status() && GpuSide::encodes(p) {
                return Err(Error::Config(format!(
                    "{} {}: this configuration can overflow its parameter storage and needs the status check of \
                     the blocking append(); encode_append() records without reading back",
                    codec.method(),
                    codec.side().name()
                )));
            }
        }
        for ((side, codec), p) in s.sides.iter().zip(&self.codecs).zip(&p) {
            side.record_encode(&**codec, p, enc)?;
        }
        // While a recorded GPU-input append is unsynced, the window's writes are conditional
        // on its input status (see encode_append_gpu).
        let conditional = s.unsynced.then_some(&s.input_status);
        for (side, p) in s.sides.iter().zip(&p) {
            side.record_commit(p, enc, conditional)?;
        }
        let [pk, pv] = p;
        s.sides[0].apply(pk);
        s.sides[1].apply(pv);
        self.tokens += k16.len() / self.g.token_elems();
        Ok(())
    }

    fn attend(&self, q: &[f32], hq: usize, opts: &AttendOptions) -> Result<Vec<f32>> {
        self.check_unsynced()?;
        self.check_attend(q.len(), hq, opts)?;
        attention::check_finite(q)?;
        match &self.store {
            Store::Cpu(_) => self.cpu_attend(None, q, hq, opts),
            Store::Gpu(s) => {
                let (sides, shape) = self.attend_inputs(s, None);
                let call = self.call(q.len() / (hq * self.g.dim), hq, opts);
                Self::run_gpu(&self.ctx, s, &call, &shape, &sides, q)
            }
        }
    }

    fn encode_attend(
        &self,
        enc: &mut wgpu::CommandEncoder,
        q: &wgpu::Buffer,
        tq: usize,
        hq: usize,
        opts: &AttendOptions,
        out: &wgpu::Buffer,
    ) -> Result<()> {
        self.check_attend(tq * hq * self.g.dim, hq, opts)?;
        self.encode_attend_at(enc, q, tq, hq, opts, out, None)
    }

    fn memory(&self) -> MemoryReport {
        let t = self.tokens;
        let (mut held, mut payload) = (Memory::default(), Memory::default());
        let mut q_min = t;
        for (i, c) in self.codecs.iter().enumerate() {
            let side = c.side();
            let q = quantized_len(t, self.residual, c.block_tokens());
            q_min = q_min.min(q);
            let blocks = q / c.block_tokens();
            for st in c.streams() {
                payload.add_stream(side, st.kind, (blocks * st.words_per_block * 4) as u64);
            }
            payload.residual += ((t - q) * self.g.token_elems() * 2) as u64;
            let tables = (c.tables().len() * 4) as u64;
            payload.tables += tables;
            match &self.store {
                Store::Cpu(sides) => {
                    let (per, resid) = sides[i].held();
                    for (st, b) in c.streams().iter().zip(per) {
                        held.add_stream(side, st.kind, b);
                    }
                    held.residual += resid;
                    held.tables += tables;
                }
                Store::Gpu(s) => {
                    let (per, ring, tables, positions) = s.sides[i].held(c.streams().len());
                    for (st, b) in c.streams().iter().zip(per) {
                        held.add_stream(side, st.kind, b);
                    }
                    held.residual += ring;
                    held.tables += tables;
                    held.eviction += positions;
                }
            }
        }
        MemoryReport::new(
            t,
            q_min,
            held,
            payload,
            (2 * t * self.g.token_elems() * 2) as u64,
        )
    }

    fn len(&self) -> usize {
        self.tokens
    }

    fn snapshot(&self) -> Result<Snapshot> {
        self.check_unsynced()?;
        Ok(Snapshot {
            tokens: self.tokens,
            keys: self.side_words(0)?,
            values: self.side_words(1)?,
        })
    }

    fn reconstruct(&self) -> Result<(Vec<f32>, Vec<f32>)> {
        Ok((
            self.reconstruct_side(crate::store::Side::Keys)?,
            self.reconstruct_side(crate::store::Side::Values)?,
        ))
    }

    fn reconstruct_side(&self, side: crate::store::Side) -> Result<Vec<f32>> {
        self.check_unsynced()?;
        let row = self.g.token_elems();
        let mut out = vec![0f32; self.tokens * row];
        let gpu_side = match &self.store {
            Store::Gpu(s) => Some(s),
            Store::Cpu(_) => None,
        };
        let i = match side {
            crate::store::Side::Keys => 0,
            crate::store::Side::Values => 1,
        };
        {
            let c = &self.codecs[i];
            let gb = c.block_tokens();
            let q = quantized_len(self.tokens, self.residual, gb);
            let x = &mut out;
            match gpu_side {
                Some(s) if c.gpu_decodes() => {
                    let side = &s.sides[i];
                    let seg_tokens = side.seg_blocks * gb;
                    // Pieces whose f32 output fits one binding.
                    let piece = ((self.ctx.max_storage_binding_size() / (row * 4) as u64) as usize
                        / gb)
                        .max(1)
                        * gb;
                    let mut a = 0;
                    while a < q {
                        let si = a / seg_tokens;
                        let b = ((si + 1) * seg_tokens).min(q).min(a + piece);
                        let bytes = ((b - a) * row * 4) as u64;
                        let buf = gpu::storage_buffer(&self.ctx, "kvpack reconstruction", bytes)?;
                        let seg = &side.segments[si];
                        gpu::submit_blocking(&self.ctx, "reconstruct", |enc| {
                            c.decode_gpu(
                                &self.ctx,
                                enc,
                                &seg.at((a - si * seg_tokens) / gb, &side.tables),
                                (b - a) / gb,
                                &buf,
                            )
                        })?;
                        let back = gpu::readback(&self.ctx, &buf, bytes)?;
                        x[a * row..b * row].copy_from_slice(bytemuck::cast_slice(&back));
                        a = b;
                    }
                    let resid = s.sides[i].read_ring(q, self.tokens)?;
                    for (o, r) in x[q * row..].iter_mut().zip(resid) {
                        *o = r.to_f32();
                    }
                }
                _ => {
                    let w = self.side_words(i)?;
                    c.decode(&w.words(), q / gb, &mut x[..q * row])?;
                    for (o, r) in x[q * row..].iter_mut().zip(&w.residual) {
                        *o = r.to_f32();
                    }
                }
            }
        }
        if let (0, Some(mu)) = (i, &self.center) {
            crate::store::center::add_back(&mut out, mu);
        }
        Ok(out)
    }

    fn attend_reference(&self, q: &[f32], hq: usize, opts: &AttendOptions) -> Result<Vec<f32>> {
        self.check_unsynced()?;
        self.check_attend(q.len(), hq, opts)?;
        attention::check_finite(q)?;
        self.cpu_attend(None, q, hq, opts)
    }

    fn method(&self) -> &Method {
        &self.method
    }

    fn geometry(&self) -> Geometry {
        self.g
    }

    fn index(&self) -> usize {
        self.index
    }

    fn codec(&self, side: Side) -> &dyn Codec {
        &*self.codecs[side as usize]
    }

    fn paths(&self) -> [crate::path::KernelPath; 2] {
        [self.codecs[0].path(), self.codecs[1].path()]
    }

    fn attend_kernels(&self) -> Result<Vec<(&'static str, crate::path::KernelPath)>> {
        let Store::Gpu(s) = &self.store else {
            return Ok(Vec::new());
        };
        let (k, v) = (&*self.codecs[0], &*self.codecs[1]);
        let paths = attention::gpu::AttendPaths::resolve(&self.ctx, k, v, s.choice)?;
        let (kh, vh) = (k.attend_hooks(), v.attend_hooks());
        let mut out = vec![(attention::kernel::partials(kh, vh).name, paths.partials)];
        if let (Some(def), Some(path)) = (attention::kernel::prefill(kh, vh), paths.prefill) {
            out.push((def.name, path));
        }
        if let (Some(def), Some(Ok(path))) = (attention::kernel::tensor(kh, vh), &paths.tensor) {
            out.push((def.name, *path));
        }
        out.push((attention::kernel::merge(kh, vh).name, paths.merge));
        Ok(out)
    }

    fn prepare(&self) -> Result<()> {
        self.prepare_job().map_or(Ok(()), |job| job())
    }

    fn prepare_async(&self) -> crate::Preparing {
        match self.prepare_job() {
            Some(job) => crate::Preparing::spawn(job),
            None => crate::Preparing::ready(Ok(())),
        }
    }

    fn describe(&self) -> String {
        let side = |c: &Arc<dyn Codec>| {
            let s = c.settings();
            format!(
                "{} {}{} on {}{}",
                c.side().name(),
                c.method(),
                if s.is_empty() {
                    String::new()
                } else {
                    format!(" {s}")
                },
                c.path(),
                c.attend_note().map_or(String::new(), |n| format!(" ({n})"))
            )
        };
        let fallbacks = self.ctx.msl_fallbacks();
        let note = if fallbacks.is_empty()
            || !self
                .codecs
                .iter()
                .any(|c| c.path() == crate::path::KernelPath::Msl)
        {
            String::new()
        } else {
            let names: Vec<&str> = fallbacks.iter().map(|(k, _)| *k).collect();
            format!(
                "; the Metal driver rejected the MSL of {} (they run their {} kernels: see \
                 Context::msl_fallbacks)",
                names.join(", "),
                crate::gpu::msl_fallback::FALLBACK
            )
        };
        format!(
            "{}; {}; residual window {} tokens{note}",
            side(&self.codecs[0]),
            side(&self.codecs[1]),
            self.residual
        )
    }
}
