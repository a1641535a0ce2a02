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
use crate::cpu::attend::SideView;
use crate::error::{Error, Result};
use crate::gpu;
use crate::method::Method;
use crate::store::cpu::CpuSide;
use crate::store::gpu::GpuSide;
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
    /// and never drop it unsubmitted.
    fn encode_append(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        k: Input<'_>,
        v: Input<'_>,
    ) -> Result<()>;
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
    /// Tokens held.
    fn len(&self) -> usize;
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
}

struct GpuStore {
    sides: [GpuSide; 2],
    choice: PathChoice,
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
fn lcm(a: usize, b: usize) -> usize {
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
        let g = Geometry::new(heads, dim)?;
        let r = method.residual();
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
            Store::Gpu(Box::new(GpuStore {
                sides: [side(&codecs[0])?, side(&codecs[1])?],
                choice,
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
        snapshot.check([&*layer.codecs[0], &*layer.codecs[1]], layer.residual)?;
        let t = snapshot.tokens;
        let sides = [&snapshot.keys, &snapshot.values];
        match &mut layer.store {
            Store::Cpu(s) => {
                *s = [
                    CpuSide::restore(ctx, sides[0])?,
                    CpuSide::restore(ctx, sides[1])?,
                ];
            }
            Store::Gpu(s) => {
                for (i, side) in s.sides.iter_mut().enumerate() {
                    side.restore(&*layer.codecs[i], t, sides[i])?;
                }
            }
        }
        layer.tokens = t;
        Ok(layer)
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
        Ok((k.to_f16("k")?, v.to_f16("v")?))
    }

    /// Each side's codec checks the rows it will store ([`Codec::check_rows`]).
    fn check_rows(&self, rows: [&[f16]; 2]) -> Result<()> {
        for (c, r) in self.codecs.iter().zip(rows) {
            c.check_rows(self.tokens, r)?;
        }
        Ok(())
    }

    fn append_rows(&mut self, rows: [&[f16]; 2]) -> Result<()> {
        let (t, r) = (self.tokens, self.residual);
        match &mut self.store {
            Store::Cpu(sides) => {
                let pk = sides[0].prepare(&self.ctx, &*self.codecs[0], r, t, rows[0])?;
                let pv = sides[1].prepare(&self.ctx, &*self.codecs[1], r, t, rows[1])?;
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
                let commit = |enc: &mut wgpu::CommandEncoder| {
                    for (side, p) in sides.iter().zip(&p) {
                        side.record_commit(p, enc);
                    }
                };
                if checked.is_empty() {
                    gpu::submit_blocking(&ctx, "append", |enc| {
                        encode(enc)?;
                        commit(enc);
                        Ok(())
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
                    gpu::submit_blocking(&ctx, "append (commit)", |enc| {
                        commit(enc);
                        Ok(())
                    })?;
                }
                let [pk, pv] = p;
                s.sides[0].apply(pk);
                s.sides[1].apply(pv);
            }
        }
        self.tokens += rows[0].len() / self.g.token_elems();
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
        };
        ([side(0), side(1)], shape)
    }

    fn cpu_attend(
        &self,
        snap: Option<&Snapshot>,
        q: &[f32],
        hq: usize,
        opts: &AttendOptions,
    ) -> Result<Vec<f32>> {
        let views = |s: &Snapshot| -> Result<Vec<f32>> {
            let k = SideView::new(&*self.codecs[0], &s.keys);
            let v = SideView::new(&*self.codecs[1], &s.values);
            Ok(crate::cpu::attend::attend(&k, &v, self.tokens, q, hq, opts))
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
                Ok(crate::cpu::attend::attend(
                    &side(0),
                    &side(1),
                    self.tokens,
                    q,
                    hq,
                    opts,
                ))
            }
            (_, Some(s)) => views(s),
            (Store::Gpu(_), None) => views(&self.snapshot()?),
        }
    }
}

impl KvLayer for Layer {
    fn append(&mut self, k: Input<'_>, v: Input<'_>) -> Result<()> {
        let (k16, v16) = self.validate(k, v)?;
        self.check_rows([&k16, &v16])?;
        if k16.is_empty() {
            return Ok(());
        }
        self.append_rows([&k16, &v16])
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
            s.sides[0].prepare(&*self.codecs[0], r, t, rows[0])?,
            s.sides[1].prepare(&*self.codecs[1], r, t, rows[1])?,
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
        for (side, p) in s.sides.iter().zip(&p) {
            side.record_commit(p, enc);
        }
        let [pk, pv] = p;
        s.sides[0].apply(pk);
        s.sides[1].apply(pv);
        self.tokens += k16.len() / self.g.token_elems();
        Ok(())
    }

    fn attend(&self, q: &[f32], hq: usize, opts: &AttendOptions) -> Result<Vec<f32>> {
        self.check_attend(q.len(), hq, opts)?;
        attention::check_finite(q)?;
        match &self.store {
            Store::Cpu(_) => self.cpu_attend(None, q, hq, opts),
            Store::Gpu(s) => {
                let (sides, shape) = self.attend_inputs(s);
                let call = self.call(q.len() / (hq * self.g.dim), hq, opts);
                attention::gpu::run(
                    &self.ctx,
                    s.choice,
                    &call,
                    &shape,
                    [&sides[0], &sides[1]],
                    s.sides[0].placeholder(),
                    q,
                )
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
        let Store::Gpu(s) = &self.store else {
            return Err(Error::PathUnavailable {
                kernel: "attend",
                requested: PathChoice::Cpu.to_string(),
                reason: "encode_attend() records GPU work; this layer runs on the CPU".into(),
            });
        };
        let (sides, shape) = self.attend_inputs(s);
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
        )
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
                    let (per, ring, tables) = s.sides[i].held(c.streams().len());
                    for (st, b) in c.streams().iter().zip(per) {
                        held.add_stream(side, st.kind, b);
                    }
                    held.residual += ring;
                    held.tables += tables;
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
        Ok(out)
    }

    fn attend_reference(&self, q: &[f32], hq: usize, opts: &AttendOptions) -> Result<Vec<f32>> {
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
        out.push((attention::kernel::merge(kh, vh).name, paths.merge));
        Ok(out)
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
        format!(
            "{}; {}; residual window {} tokens",
            side(&self.codecs[0]),
            side(&self.codecs[1]),
            self.residual
        )
    }
}
