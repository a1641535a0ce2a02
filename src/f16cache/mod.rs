//! The uncompressed f16 cache: the speed and quality baseline every codec is measured
//! against, with the same API as [`crate::KiviLayer`] (append, attend, memory) on the CPU or
//! the GPU. Attention reads it through the f16 codec (`wgsl/common/attend_codec_f16.wgsl`).
//!
//! GPU storage: K and V rows `[token][H·D]` as f16 pairs in u32 words, in segments of at most
//! `segment_tokens` rows (each within the storage-binding limit); the last segment grows
//! geometrically by device copies, so the history is never re-uploaded.

use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::attention::{self, AttendOptions};
use crate::context::{Context, PathChoice};
use crate::cpu::attend::TokenSource;
use crate::error::{Error, Result};
use crate::gpu::{self, registry};
use crate::kivi::{Input, Memory, MemoryReport};

/// One layer's f16 K/V cache.
pub struct F16Layer {
    heads: usize,
    dim: usize,
    tokens: usize,
    store: Store,
}

impl std::fmt::Debug for F16Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("F16Layer")
            .field("heads", &self.heads)
            .field("dim", &self.dim)
            .field("tokens", &self.tokens)
            .finish()
    }
}

enum Store {
    Cpu { k: Vec<f16>, v: Vec<f16> },
    Gpu(Box<GpuRows>),
}

struct Segment {
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    cap: usize,
}

struct GpuRows {
    ctx: Context,
    choice: PathChoice,
    segment_tokens: usize,
    segments: Vec<Segment>,
}

/// `[H·D]` rows as u32 words (two f16 per word, odd rows padded).
fn row_words(heads: usize, dim: usize) -> usize {
    (heads * dim).div_ceil(2)
}

struct View<'a> {
    heads: usize,
    dim: usize,
    tokens: usize,
    k: &'a [f16],
    v: &'a [f16],
}

impl TokenSource for View<'_> {
    fn tokens(&self) -> usize {
        self.tokens
    }
    fn heads(&self) -> usize {
        self.heads
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn key(&self, j: usize, h: usize, out: &mut [f32]) {
        // Slice conversion: F16C/NEON instructions where the CPU has them.
        self.k[(j * self.heads + h) * self.dim..][..self.dim].convert_to_f32_slice(out);
    }
    fn value(&self, j: usize, h: usize, out: &mut [f32]) {
        self.v[(j * self.heads + h) * self.dim..][..self.dim].convert_to_f32_slice(out);
    }
}

impl F16Layer {
    /// An empty cache on `ctx`'s default path.
    pub fn new(ctx: &Context, heads: usize, dim: usize) -> Result<Self> {
        Self::with_path(ctx, heads, dim, ctx.path())
    }

    /// An empty cache on an explicit path (an error when it cannot run here).
    pub fn with_path(ctx: &Context, heads: usize, dim: usize, choice: PathChoice) -> Result<Self> {
        if heads == 0 || dim == 0 || heads * dim > (1 << 20) {
            return Err(Error::Shape {
                what: "cache",
                message: format!("heads ({heads}) and dim ({dim}) must be positive and small"),
            });
        }
        let store = if ctx.resolve(&registry::ATTEND_F16, choice)?.is_gpu() {
            let bytes = (row_words(heads, dim) * 4) as u64;
            let segment_tokens = (ctx.max_storage_binding_size() / bytes).min(1 << 24) as usize;
            if segment_tokens == 0 {
                return Err(Error::Limit {
                    what: "one f16 row",
                    needed: bytes,
                    limit: ctx.max_storage_binding_size(),
                });
            }
            Store::Gpu(Box::new(GpuRows {
                ctx: ctx.clone(),
                choice,
                segment_tokens,
                segments: Vec::new(),
            }))
        } else {
            Store::Cpu {
                k: Vec::new(),
                v: Vec::new(),
            }
        };
        Ok(Self {
            heads,
            dim,
            tokens: 0,
            store,
        })
    }

    /// Tokens held.
    pub fn len(&self) -> usize {
        self.tokens
    }

    /// True before the first append.
    pub fn is_empty(&self) -> bool {
        self.tokens == 0
    }

    /// Appends `[n, H, D]` K and V (rounded to f16; NaN/Inf rejected). On error nothing
    /// changes.
    pub fn append(&mut self, k: Input<'_>, v: Input<'_>) -> Result<()> {
        let (k16, v16) = self.validate(k, v)?;
        let n = k16.len() / (self.heads * self.dim);
        if n == 0 {
            return Ok(());
        }
        match &mut self.store {
            Store::Cpu { k, v } => {
                crate::cache::extend_tight(k, &k16);
                crate::cache::extend_tight(v, &v16);
            }
            Store::Gpu(g) => {
                let ctx = g.ctx.clone();
                gpu::submit_blocking(&ctx, "f16 cache append", |enc| {
                    g.encode_append(enc, self.tokens, self.heads, self.dim, &k16, &v16)
                })?
            }
        }
        self.tokens += n;
        Ok(())
    }

    /// Checks shapes, values and the token limit, and rounds to f16 (nothing is stored).
    fn validate(&self, k: Input<'_>, v: Input<'_>) -> Result<(Vec<f16>, Vec<f16>)> {
        let row = self.heads * self.dim;
        if k.len() % row != 0 || v.len() != k.len() {
            return Err(Error::Shape {
                what: "k/v",
                message: format!(
                    "k has {} and v {} values; both must be whole [H={}, D={}] rows",
                    k.len(),
                    v.len(),
                    self.heads,
                    self.dim
                ),
            });
        }
        crate::cache::check_token_limit(self.tokens, k.len() / row)?;
        Ok((k.to_f16("k")?, v.to_f16("v")?))
    }

    /// [`Self::append`] recorded into the caller's encoder (GPU layers): the rows are
    /// uploaded to staging buffers now and copied into the cache by commands in `encoder`;
    /// a grown segment's history is copied on the device by the same commands. The layer
    /// counts the tokens at once, so the caller must submit `encoder` before the next call
    /// that reads or appends (the same contract as [`crate::KiviLayer::encode_append`]).
    /// Input errors change nothing; a CPU layer is `Error::PathUnavailable`.
    pub fn encode_append(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        k: Input<'_>,
        v: Input<'_>,
    ) -> Result<()> {
        let (k16, v16) = self.validate(k, v)?;
        let Store::Gpu(g) = &mut self.store else {
            return Err(Error::PathUnavailable {
                kernel: registry::ATTEND_F16.name,
                requested: PathChoice::Cpu.to_string(),
                reason: "encode_append() records GPU work; this layer runs on the CPU".into(),
            });
        };
        if k16.is_empty() {
            return Ok(());
        }
        g.encode_append(encoder, self.tokens, self.heads, self.dim, &k16, &v16)?;
        self.tokens += k16.len() / (self.heads * self.dim);
        Ok(())
    }

    /// Attention of `q` `[Tq, Hq, D]` over the cache (see [`crate::KiviLayer::attend`]).
    pub fn attend(&self, q: &[f32], hq: usize, opts: &AttendOptions) -> Result<Vec<f32>> {
        attention::check_query(q.len(), hq, self.heads, self.dim, self.tokens, opts)?;
        attention::check_finite(q)?;
        match &self.store {
            Store::Cpu { k, v } => {
                let view = View {
                    heads: self.heads,
                    dim: self.dim,
                    tokens: self.tokens,
                    k,
                    v,
                };
                Ok(crate::cpu::attend::attend(&view, q, hq, opts))
            }
            Store::Gpu(g) => {
                let paths = attention::gpu::AttendPaths::resolve(&g.ctx, g.choice)?;
                let call = self.call(q.len() / (hq * self.dim), hq, opts);
                attention::gpu::run(
                    &g.ctx,
                    &paths,
                    &call,
                    &g.regions(self.tokens, self.heads, self.dim),
                    q,
                )
            }
        }
    }

    /// Attention recorded into the caller's encoder (GPU paths), q and out on the device.
    pub fn encode_attend(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        q: &wgpu::Buffer,
        tq: usize,
        hq: usize,
        opts: &AttendOptions,
        out: &wgpu::Buffer,
    ) -> Result<()> {
        attention::check_query(
            tq * hq * self.dim,
            hq,
            self.heads,
            self.dim,
            self.tokens,
            opts,
        )?;
        let Store::Gpu(g) = &self.store else {
            return Err(Error::PathUnavailable {
                kernel: registry::ATTEND_F16.name,
                requested: "cpu".into(),
                reason: "encode_attend() records GPU work; this cache runs on the CPU".into(),
            });
        };
        let paths = attention::gpu::AttendPaths::resolve(&g.ctx, g.choice)?;
        attention::gpu::encode(
            &g.ctx,
            encoder,
            &paths,
            &self.call(tq, hq, opts),
            &g.regions(self.tokens, self.heads, self.dim),
            q,
            out,
        )
    }

    fn call(&self, tq: usize, hq: usize, opts: &AttendOptions) -> attention::gpu::Call {
        attention::gpu::Call {
            tq,
            hq,
            hkv: self.heads,
            dim: self.dim,
            tokens: self.tokens,
            opts: *opts,
        }
    }

    /// Bytes held (all f16 rows count as `residual`: an f16 cache is all "residual").
    pub fn memory(&self) -> MemoryReport {
        let payload = (2 * self.tokens * row_words(self.heads, self.dim) * 4) as u64;
        let held = match &self.store {
            Store::Cpu { k, v } => ((k.capacity() + v.capacity()) * 2) as u64,
            Store::Gpu(g) => g.segments.iter().map(|s| s.k.size() + s.v.size()).sum(),
        };
        MemoryReport {
            tokens: self.tokens,
            quantized: 0,
            held: Memory {
                residual: held,
                ..Default::default()
            },
            payload: Memory {
                residual: payload,
                ..Default::default()
            },
            f16_bytes: (2 * self.tokens * self.heads * self.dim * 2) as u64,
        }
    }
}

impl GpuRows {
    fn regions(&self, t: usize, heads: usize, dim: usize) -> Vec<attention::gpu::Region<'_>> {
        let st = self.segment_tokens;
        self.segments
            .iter()
            .enumerate()
            .filter(|(i, _)| i * st < t)
            .map(|(i, s)| attention::gpu::Region {
                start: i * st,
                end: ((i + 1) * st).min(t),
                seg_offset: 0,
                source: attention::gpu::Source::F16 {
                    k_rows: &s.k,
                    v_rows: &s.v,
                    row_words: row_words(heads, dim),
                    ring_tokens: 0,
                },
            })
            .collect()
    }

    /// Records the copies that append `k`/`v` (whole f16 rows) after `t_old` tokens.
    fn encode_append(
        &mut self,
        enc: &mut wgpu::CommandEncoder,
        t_old: usize,
        heads: usize,
        dim: usize,
        k: &[f16],
        v: &[f16],
    ) -> Result<()> {
        let (row, rw) = (heads * dim, row_words(heads, dim));
        let n = k.len() / row;
        let t_new = t_old + n;
        let st = self.segment_tokens;
        let ctx = self.ctx.clone();
        // Uploads, one per piece within a segment (each within the binding limit).
        let mut pieces = Vec::new();
        let mut a = t_old;
        while a < t_new {
            let b = ((a / st + 1) * st).min(t_new);
            let words = |x: &[f16]| {
                crate::kivi::gpu_store::f16_rows_to_words(
                    row,
                    &x[(a - t_old) * row..(b - t_old) * row],
                )
            };
            let kb = gpu::upload(&ctx, "kvpack f16 rows k", bytemuck::cast_slice(&words(k)))?;
            let vb = gpu::upload(&ctx, "kvpack f16 rows v", bytemuck::cast_slice(&words(v)))?;
            pieces.push((a, b, kb, vb));
            a = b;
        }
        let bytes = |tokens: usize| (tokens * rw * 4) as u64;
        // Room: new segments, or the last one grown. Every buffer is allocated before the
        // layer changes, so a failed allocation leaves it as it was.
        let mut grown = Vec::new();
        for s in 0..t_new.div_ceil(st) {
            let need = (t_new - s * st).min(st);
            let have = self.segments.get(s).map_or(0, |g| g.cap);
            if need > have {
                let cap = crate::cache::grown_capacity(have, need).min(st);
                grown.push((
                    s,
                    Segment {
                        k: gpu::storage_buffer(&ctx, "kvpack f16 k", bytes(cap))?,
                        v: gpu::storage_buffer(&ctx, "kvpack f16 v", bytes(cap))?,
                        cap,
                    },
                ));
            }
        }
        for (s, seg) in grown {
            if let Some(old) = self.segments.get(s) {
                // The history moves on the device.
                let used = t_old.saturating_sub(s * st).min(old.cap);
                if used > 0 {
                    enc.copy_buffer_to_buffer(&old.k, 0, &seg.k, 0, bytes(used));
                    enc.copy_buffer_to_buffer(&old.v, 0, &seg.v, 0, bytes(used));
                }
                self.segments[s] = seg;
            } else {
                self.segments.push(seg);
            }
        }
        for (a, b, kb, vb) in &pieces {
            let seg = &self.segments[a / st];
            let off = bytes(a % st);
            enc.copy_buffer_to_buffer(kb, 0, &seg.k, off, bytes(b - a));
            enc.copy_buffer_to_buffer(vb, 0, &seg.v, off, bytes(b - a));
        }
        Ok(())
    }
}
