//! One side of a layer on a GPU path: the codec's streams in segment buffers and the f16
//! residual window in a ring, all on the device. Nothing dequantized is ever kept.
//!
//! **Segments.** Quantized tokens live in segments of at most `seg_blocks` blocks, sized so
//! that one segment buffer fits the device's storage-binding limit (a cache outgrows any single
//! binding). A segment is **one buffer** holding every stream of the codec, stream `s` at a
//! byte range aligned for binding: `[stream 0: cap · w0 words][pad][stream 1: cap · w1]...`,
//! `cap` the segment's capacity in blocks. The last segment grows by `store::grown_capacity`
//! into a new buffer; its history moves by device copies, never a re-upload.
//!
//! **Ring.** The f16 rows `[H·D/2 words]` of tokens `[Q, T)`: token `s` sits in row
//! `s % cap`. The ring starts empty and grows like the segments, up to `R + G − 1` rows (a
//! cache of 51 tokens holds 51 rows plus the growth slack, not `R + G`); growing re-lays the
//! live rows into the new buffer by device copies.
//!
//! **Appends** (`GpuSide::prepare` → `GpuSide::record_encode` →
//! `GpuSide::record_commit` → `GpuSide::apply`): every buffer the append needs (grown
//! segments, a grown ring) is allocated in `prepare`, inside out-of-memory error scopes, and
//! host rows are staged there ([`crate::gpu::staging`]: a slot of the device's arena, or a
//! buffer of their own past `staging::LARGE` bytes), before anything is recorded; `apply`
//! swaps the new buffers in. A failure before `apply` leaves the side exactly as it was.

use half::f16;

use super::input::{f16_rows_to_words, words_to_f16_rows};
use super::{Geometry, grown_capacity, quantized_len};
use crate::codec::{Codec, EncodeSource, SegmentRef};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::gpu;

/// Builds the pipelines `codec`'s GPU encode uses ([`crate::KvLayer::prepare`]) by recording
/// the encode of one block from scratch buffers into an encoder that is dropped unsubmitted:
/// the codec picks its kernels and their specialization as every append does (both are fixed
/// for its life; only the uniform and the workgroup count change with the tokens), and nothing
/// runs. A shader the device rejects is [`Error::Shader`].
pub(crate) fn prepare_encode(ctx: &Context, codec: &dyn Codec) -> Result<()> {
    let gpu = gpu::gpu_of(ctx, "prepare")?;
    let g = codec.geometry();
    let words: Vec<usize> = codec.streams().iter().map(|s| s.words_per_block).collect();
    let (ranges, size) = layout(&words, 1, ctx.storage_offset_alignment());
    let segment = gpu::storage_buffer(ctx, "kvpack prepare segment", size)?;
    let rows_bytes = (codec.block_tokens() * g.row_words() * 4) as u64;
    let rows = gpu::storage_buffer(ctx, "kvpack prepare rows", rows_bytes)?;
    let tables_bytes = (codec.tables().len() * 4) as u64;
    let tables = gpu::storage_buffer(ctx, "kvpack prepare tables", tables_bytes)?;
    let status = gpu::storage_buffer(ctx, "kvpack prepare status", 4)?;
    let src = EncodeSource {
        ring: &rows,
        ring_tokens: 1,
        incoming: &rows,
        incoming_at: 0,
        inc_start: 0,
        t_old: 0,
        start: 0,
        tables: &tables,
    };
    let dst = SegmentRef {
        buffer: &segment,
        ranges: &ranges,
        block: 0,
        tables: &tables,
    };
    // Whatever the dry recording itself trips over (nothing is submitted) stays in this scope;
    // a pipeline the device rejects is returned by `encode_gpu` as `Error::Shader`.
    let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
    let mut enc = gpu
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("kvpack prepare (never submitted)"),
        });
    let recorded = codec.encode_gpu(ctx, &mut enc, &src, &dst, 1, &status);
    drop(enc);
    if let Some(e) = pollster::block_on(scope.pop()) {
        log::debug!("kvpack: prepare's dry encode of {}: {e}", codec.method());
    }
    recorded
}

/// One segment buffer and its stream ranges.
#[derive(Debug)]
pub(crate) struct Segment {
    pub buffer: wgpu::Buffer,
    /// Capacity in blocks.
    pub cap: usize,
    /// Byte (offset, size) of each stream.
    pub ranges: Vec<(u64, u64)>,
}

impl Segment {
    /// This segment from `block` on, with the side's `tables`.
    pub(crate) fn at<'a>(&'a self, block: usize, tables: &'a wgpu::Buffer) -> SegmentRef<'a> {
        SegmentRef {
            buffer: &self.buffer,
            ranges: &self.ranges,
            block,
            tables,
        }
    }
}

/// The residual ring.
#[derive(Debug)]
pub(crate) struct Ring {
    pub buffer: wgpu::Buffer,
    /// Capacity in rows (tokens).
    pub cap: usize,
}

/// Stored words of one side on the GPU (see the module docs).
#[derive(Debug)]
pub(crate) struct GpuSide {
    ctx: Context,
    g: Geometry,
    /// Blocks per full segment.
    pub seg_blocks: usize,
    pub segments: Vec<Segment>,
    pub ring: Option<Ring>,
    /// The codec's tables (one word when it has none).
    pub tables: wgpu::Buffer,
    tables_bytes: u64,
    /// Zero-cleared before an encode; the codec's kernels may flag it.
    status: wgpu::Buffer,
    /// Bound where a dispatch needs a buffer that carries nothing (no ring yet, no incoming rows).
    placeholder: wgpu::Buffer,
    /// Words per block of a positions stream after the codec's streams in every segment (the
    /// key side of a layer under eviction: `[tokens][H]` u32, `attention::plan::KeyPositions`;
    /// only segment 0's is read); 0: none.
    pub pos_words: usize,
}

/// The byte ranges of `cap` blocks of each stream in one segment buffer, and its size.
fn layout(words_per_block: &[usize], cap: usize, align: u64) -> (Vec<(u64, u64)>, u64) {
    // Every stream starts on a 16-byte boundary at least (the attention kernels read f16 rows
    // and KIVI's key params as 16-byte words: wgsl/attend/attend_core.wgsl, F16_V4).
    let align = align.max(16);
    let mut at = 0u64;
    let mut ranges = Vec::with_capacity(words_per_block.len());
    for &w in words_per_block {
        at = at.div_ceil(align) * align;
        let size = ((cap * w * 4) as u64).max(4);
        ranges.push((at, size));
        at += size;
    }
    (ranges, at)
}

/// One encode dispatch's tokens `[a, b)` (whole blocks inside one segment) and where the
/// incoming rows `[first, b)` are (`None` when every token comes from the ring).
struct Piece {
    a: usize,
    b: usize,
    first: usize,
    /// The rows: a buffer, the byte of its first row and that row's token.
    incoming: Option<(wgpu::Buffer, u64, usize)>,
}

/// One append's new f16 rows `[n][H][D]`: host values (staged by `GpuSide::prepare`) or
/// rows already on the device (`[tokens][H·D/2 words]` from byte `offset`, the first row the
/// append's first token: what `super::gpu_input`'s conversion writes, or both sides' host
/// rows staged together by [`stage_pair`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum NewRows<'a> {
    Host(&'a [f16]),
    Device {
        buffer: &'a wgpu::Buffer,
        offset: u64,
        tokens: usize,
    },
}

/// Whether f16 rows of `row` values are their words' bytes as they lie in host memory (an
/// even `row` on a little-endian host: value e in the low half of word e / 2), so that they
/// are staged without packing ([`f16_rows_to_words`]).
fn rows_lie_as_words(row: usize) -> bool {
    row.is_multiple_of(2) && cfg!(target_endian = "little")
}

/// `rows` with both sides' host rows staged together ([`stage_pair`]: one write) where they
/// can be, as device rows of the staged slot, which `keep` holds; else `rows` as they are.
pub(crate) fn stage_rows<'a>(
    ctx: &Context,
    row: usize,
    rows: [NewRows<'a>; 2],
    keep: &'a mut Option<wgpu::Buffer>,
) -> Result<[NewRows<'a>; 2]> {
    let (NewRows::Host(k), NewRows::Host(v)) = (rows[0], rows[1]) else {
        return Ok(rows);
    };
    let Some((buffer, [ok, ov])) = stage_pair(ctx, row, k, v)? else {
        return Ok(rows);
    };
    let tokens = k.len() / row.max(1);
    let buffer: &'a wgpu::Buffer = keep.insert(buffer);
    Ok([
        NewRows::Device {
            buffer,
            offset: ok,
            tokens,
        },
        NewRows::Device {
            buffer,
            offset: ov,
            tokens,
        },
    ])
}

/// Both sides' host rows (`row` f16 values each) in one slot of the device's staging arena,
/// the value rows at the next multiple of the storage offset alignment after the key rows:
/// one write instead of two. `None` where a side's rows are not their words' bytes as they
/// lie (an odd `row`, a big-endian host) or both together pass [`gpu::staging::LARGE`]:
/// then each side is staged (or given a buffer) on its own by [`GpuSide::prepare`].
fn stage_pair(
    ctx: &Context,
    row: usize,
    k: &[f16],
    v: &[f16],
) -> Result<Option<(wgpu::Buffer, [u64; 2])>> {
    let align = ctx.storage_offset_alignment().max(4);
    let kb = (k.len() * 2) as u64;
    let v_at = kb.div_ceil(align) * align;
    let total = v_at + (v.len() * 2) as u64;
    if !rows_lie_as_words(row) || total > gpu::staging::LARGE {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(total as usize);
    bytes.extend_from_slice(bytemuck::cast_slice(k));
    bytes.resize(v_at as usize, 0);
    bytes.extend_from_slice(bytemuck::cast_slice(v));
    let st = gpu::staging::stage(ctx, "kvpack appended rows", &bytes)?;
    Ok(Some((st.buffer, [st.offset, st.offset + v_at])))
}

/// A compaction's allocations ([`GpuSide::compact_work`]): the kernel path, per stream of
/// segment 0 (plan, scratch, byte offset, bytes kept), the ring's rotation scratch, and the
/// quantized and total tokens with the tokens evicted.
pub(crate) struct CompactWork {
    path: crate::context::KernelPath,
    streams: Vec<(crate::gpu::DispatchPlan, wgpu::Buffer, u64, u64)>,
    ring: Option<wgpu::Buffer>,
    q: usize,
    t: usize,
    evicted: usize,
}

/// Everything one append of one side allocated (see [`GpuSide::prepare`]).
pub(crate) struct GpuPending {
    t_old: usize,
    t_new: usize,
    q_old: usize,
    q_new: usize,
    /// Grown or new segments, by index.
    segments: Vec<(usize, Segment)>,
    pieces: Vec<Piece>,
    /// A grown ring (the live rows are copied into it by the commit).
    ring: Option<Ring>,
    /// The rows that stay in the window, `[max(Q_new, T_old), T_new)` (or more): the buffer,
    /// the byte of its first row (host rows: a slot of the device's staging arena) and that
    /// row's token.
    ring_rows: Option<(wgpu::Buffer, u64, usize)>,
}

impl GpuSide {
    /// An empty side for `codec` with residual window `r`, whose segments hold at most
    /// `seg_blocks` blocks. The ring's largest size (`R + G − 1` rows) must fit one binding.
    pub(crate) fn new(
        ctx: &Context,
        codec: &dyn Codec,
        r: usize,
        seg_blocks: usize,
    ) -> Result<Self> {
        let g = codec.geometry();
        let ring_max = ((r + codec.block_tokens()).saturating_sub(1) * g.row_words() * 4) as u64;
        if ring_max > ctx.max_storage_binding_size() {
            return Err(Error::Limit {
                what: "the residual window (R + G - 1 f16 rows)",
                needed: ring_max,
                limit: ctx.max_storage_binding_size(),
            });
        }
        let tables = codec.tables();
        let (tables_buf, tables_bytes) = if tables.is_empty() {
            (gpu::storage_buffer(ctx, "kvpack no tables", 4)?, 0)
        } else {
            let b = gpu::upload(ctx, "kvpack codec tables", bytemuck::cast_slice(tables))?;
            let n = b.size();
            (b, n)
        };
        Ok(Self {
            ctx: ctx.clone(),
            g,
            seg_blocks,
            segments: Vec::new(),
            ring: None,
            tables: tables_buf,
            tables_bytes,
            status: gpu::storage_buffer(ctx, "kvpack status", 4)?,
            placeholder: gpu::storage_buffer(ctx, "kvpack placeholder", 16)?,
            pos_words: 0,
        })
    }

    /// Words per block of every stream a segment holds: the codec's, then positions (if any).
    fn stream_words(&self, codec: &dyn Codec) -> Vec<usize> {
        let mut w: Vec<usize> = codec.streams().iter().map(|s| s.words_per_block).collect();
        if self.pos_words > 0 {
            w.push(self.pos_words);
        }
        w
    }

    /// Whether a segment of `seg_blocks` blocks with a positions stream of `pos_words` words
    /// per block fits one binding.
    pub(crate) fn fits_with_positions(
        ctx: &Context,
        codec: &dyn Codec,
        seg_blocks: usize,
        pos_words: usize,
    ) -> bool {
        let mut w: Vec<usize> = codec.streams().iter().map(|s| s.words_per_block).collect();
        w.push(pos_words);
        layout(&w, seg_blocks, ctx.storage_offset_alignment()).1 <= ctx.max_storage_binding_size()
    }

    /// The word offset of segment 0's positions stream, if it has one.
    pub(crate) fn positions_offset(&self) -> Option<usize> {
        match (self.pos_words, self.segments.first()) {
            (0, _) | (_, None) => None,
            (_, Some(s)) => s.ranges.last().map(|r| (r.0 / 4) as usize),
        }
    }

    /// Writes `table` (`[rows][H]` u32) from row `row0` of segment 0's positions stream (queued:
    /// it lands before the next submission's commands).
    pub(crate) fn write_positions_at(&self, row0: usize, table: &[u32]) -> Result<()> {
        if table.is_empty() {
            return Ok(());
        }
        let (Some(at), Some(seg)) = (self.positions_offset(), self.segments.first()) else {
            return Err(Error::Gpu {
                during: "eviction",
                message: "positions for a side without a positions stream (a kvpack bug)".into(),
            });
        };
        let gpu = gpu::gpu_of(&self.ctx, "eviction")?;
        let at = at + row0 * self.g.heads;
        gpu.queue
            .write_buffer(&seg.buffer, (at * 4) as u64, bytemuck::cast_slice(table));
        Ok(())
    }

    /// Eviction's compaction on the device (`crate::policy`; the CPU twin is
    /// `CpuSide::compact`): of the first `keep_of` units of `unit` tokens (all quantized),
    /// head h keeps `keep[h]`; every stream's kept units move down (`evict_compact` into a
    /// scratch buffer, copied back), later units follow, and the ring's live rows `[q, t)`
    /// rotate to their new slots `(s − evicted) % cap`. Every buffer is allocated before
    /// anything is recorded. Only a side whose quantized tokens are all in segment 0 (budgets
    /// below a segment: [`Error::PathUnavailable`] otherwise, nothing changed). Blocking.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn compact(
        &self,
        codec: &dyn Codec,
        choice: crate::context::PathChoice,
        unit: usize,
        keep_of: usize,
        keep: &[Vec<usize>],
        q: usize,
        t: usize,
    ) -> Result<()> {
        let kept = keep.first().map_or(keep_of, Vec::len);
        let work = self.compact_work(codec, choice, unit, keep_of, kept, q, t)?;
        let mut flat: Vec<u32> = keep.iter().flatten().map(|&u| u as u32).collect();
        if flat.is_empty() {
            flat.push(0); // (every head keeps nothing: the later units still move)
        }
        let keep_buf = gpu::upload(
            &self.ctx,
            "kvpack eviction keep lists",
            bytemuck::cast_slice(&flat),
        )?;
        gpu::submit_blocking(&self.ctx, "eviction", |enc| {
            self.record_compact(enc, work, &keep_buf)
        })
    }

    /// What [`Self::compact`] allocates before anything is recorded, for `kept` of `keep_of`
    /// units per head: a plan and a scratch buffer per stream of segment 0, the ring's
    /// rotation scratch. [`Error::PathUnavailable`] past segment 0.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn compact_work(
        &self,
        codec: &dyn Codec,
        choice: crate::context::PathChoice,
        unit: usize,
        keep_of: usize,
        kept: usize,
        q: usize,
        t: usize,
    ) -> Result<CompactWork> {
        use crate::cpu::policy::evict_compact::CompactShape;
        let gb = codec.block_tokens();
        let bpu = unit / gb;
        let evicted = (keep_of - kept) * unit;
        if self.segments.len() > 1 {
            return Err(Error::PathUnavailable {
                kernel: "evict_compact",
                requested: choice.to_string(),
                reason: format!(
                    "eviction over {} segments: compaction moves units within segment 0 only \
                     in this version (a budget below {} tokens)",
                    self.segments.len(),
                    self.seg_blocks * gb
                ),
            });
        }
        let path = self
            .ctx
            .resolve(&crate::policy::kernels::EVICT_COMPACT, choice)?;
        let mut streams = Vec::new();
        if let Some(seg) = self.segments.first() {
            for (st, (offset, _)) in codec.streams().iter().zip(&seg.ranges) {
                let shape = CompactShape {
                    row_words: st.words_per_block / st.rows,
                    unit_rows: bpu * st.rows,
                    head_bits: st.head_bits,
                    heads: self.g.heads,
                    kept,
                    keep_of,
                    words: q / gb * st.words_per_block,
                };
                let plan = crate::policy::kernels::plan_compact(&shape, (*offset / 4) as usize)?;
                let bytes =
                    ((shape.words - (keep_of - kept) * bpu * st.words_per_block) * 4) as u64;
                let scratch =
                    gpu::storage_buffer(&self.ctx, "kvpack eviction scratch", bytes.max(4))?;
                streams.push((plan, scratch, *offset, bytes));
            }
        }
        Ok(CompactWork {
            path,
            streams,
            ring: self.ring_rotation(q, t, evicted)?,
            q,
            t,
            evicted,
        })
    }

    /// Records `work` with the keep lists `[H][kept]` u32 in `keep` (on the device).
    pub(crate) fn record_compact(
        &self,
        enc: &mut wgpu::CommandEncoder,
        work: CompactWork,
        keep: &wgpu::Buffer,
    ) -> Result<()> {
        if let Some(seg) = self.segments.first() {
            for (plan, scratch, _, _) in &work.streams {
                gpu::encode_plan(
                    &self.ctx,
                    enc,
                    work.path,
                    plan,
                    &[&seg.buffer, keep, scratch],
                )?;
            }
            for (_, scratch, offset, bytes) in &work.streams {
                if *bytes > 0 {
                    enc.copy_buffer_to_buffer(scratch, 0, &seg.buffer, *offset, *bytes);
                }
            }
        }
        self.record_ring_rotation(enc, work.ring, work.q, work.t, work.evicted);
        Ok(())
    }

    /// Segment 0's buffer and its positions stream's first word, if it has one.
    pub(crate) fn positions_stream(&self) -> Option<(&wgpu::Buffer, usize)> {
        Some((&self.segments.first()?.buffer, self.positions_offset()?))
    }

    /// The scratch buffer of a ring rotation (its live rows `[q, t)` in order), if it moves.
    fn ring_rotation(&self, q: usize, t: usize, evicted: usize) -> Result<Option<wgpu::Buffer>> {
        match &self.ring {
            Some(r) if t > q && !evicted.is_multiple_of(r.cap) => Ok(Some(gpu::storage_buffer(
                &self.ctx,
                "kvpack eviction ring scratch",
                (t - q) as u64 * self.row_bytes(),
            )?)),
            _ => Ok(None),
        }
    }

    /// Records the ring's live rows `[q, t)` moved from slot `s % cap` to `(s − evicted) % cap`
    /// through `scratch`.
    fn record_ring_rotation(
        &self,
        enc: &mut wgpu::CommandEncoder,
        scratch: Option<wgpu::Buffer>,
        q: usize,
        t: usize,
        evicted: usize,
    ) {
        let (Some(scratch), Some(ring)) = (scratch, &self.ring) else {
            return;
        };
        let (rb, cap) = (self.row_bytes(), ring.cap);
        let mut s = q;
        while s < t {
            let run = (t - s).min(cap - s % cap);
            enc.copy_buffer_to_buffer(
                &ring.buffer,
                (s % cap) as u64 * rb,
                &scratch,
                (s - q) as u64 * rb,
                run as u64 * rb,
            );
            s += run;
        }
        let mut s = q - evicted;
        while s < t - evicted {
            let run = (t - evicted - s).min(cap - s % cap);
            enc.copy_buffer_to_buffer(
                &scratch,
                (s + evicted - q) as u64 * rb,
                &ring.buffer,
                (s % cap) as u64 * rb,
                run as u64 * rb,
            );
            s += run;
        }
    }

    /// The most blocks one segment of `codec` may hold within `max_binding` bytes (and
    /// 2^24 tokens), or the `Error::Limit` of a single block that does not fit.
    pub(crate) fn max_segment_blocks(ctx: &Context, codec: &dyn Codec) -> Result<usize> {
        let words: Vec<usize> = codec.streams().iter().map(|s| s.words_per_block).collect();
        let align = ctx.storage_offset_alignment();
        let limit = ctx.max_storage_binding_size();
        let per_block = (words.iter().sum::<usize>() * 4) as u64;
        let slack = align * words.len() as u64;
        let blocks = (limit.saturating_sub(slack) / per_block.max(1))
            .min((1 << 24) / codec.block_tokens() as u64) as usize;
        if blocks == 0 || layout(&words, blocks, align).1 > limit {
            return Err(Error::Limit {
                what: "one block of a cache segment",
                needed: per_block + slack,
                limit,
            });
        }
        Ok(blocks)
    }

    fn alloc_segment(&self, codec: &dyn Codec, cap: usize) -> Result<Segment> {
        let words = self.stream_words(codec);
        let (ranges, size) = layout(&words, cap, self.ctx.storage_offset_alignment());
        Ok(Segment {
            buffer: gpu::storage_buffer(&self.ctx, "kvpack segment", size)?,
            cap,
            ranges,
        })
    }

    /// A one-word buffer bound where a dispatch needs a binding that carries nothing.
    pub(crate) fn placeholder(&self) -> &wgpu::Buffer {
        &self.placeholder
    }

    fn row_bytes(&self) -> u64 {
        (self.g.row_words() * 4) as u64
    }

    /// Phase 1 (allocations only) of appending the f16 rows `new` `[n][H][D]` after `t_old`
    /// tokens with residual window `r`.
    pub(crate) fn prepare(
        &self,
        codec: &dyn Codec,
        r: usize,
        t_old: usize,
        new: NewRows<'_>,
    ) -> Result<GpuPending> {
        let row = self.g.token_elems();
        let (host, n) = match new {
            NewRows::Host(x) => (x, x.len() / row),
            NewRows::Device { tokens, .. } => (&[][..], tokens),
        };
        let device = match new {
            NewRows::Device { buffer, offset, .. } => Some((buffer, offset)),
            NewRows::Host(_) => None,
        };
        let gb = codec.block_tokens();
        let t_new = t_old + n;
        let (q_old, q_new) = (quantized_len(t_old, r, gb), quantized_len(t_new, r, gb));
        let ctx = &self.ctx;
        // The rows of tokens [a, b): a buffer, the byte of their first row and its token. Host
        // rows are staged in the device's arena (a decode step's token: no buffer of its own;
        // rows past `staging::LARGE` bytes get one).
        let rows =
            |label: &'static str, a: usize, b: usize| -> Result<(wgpu::Buffer, u64, usize)> {
                match device {
                    Some((buf, at)) => Ok((buf.clone(), at, t_old)),
                    None => {
                        let x = &host[(a - t_old) * row..(b - t_old) * row];
                        // Staged as they lie where they can be; else packed into words.
                        let st = if rows_lie_as_words(row) {
                            gpu::staging::stage(ctx, label, bytemuck::cast_slice(x))?
                        } else {
                            let words = f16_rows_to_words(row, x);
                            gpu::staging::stage(ctx, label, bytemuck::cast_slice(&words))?
                        };
                        Ok((st.buffer, st.offset, a))
                    }
                }
            };
        // Pieces: within one segment, and their rows within the binding limit.
        let seg_tokens = self.seg_blocks * gb;
        let per_upload = (ctx.max_storage_binding_size() / self.row_bytes()) as usize / gb * gb;
        if q_new > q_old && per_upload == 0 {
            return Err(Error::Limit {
                what: "one block of f16 rows",
                needed: self.row_bytes() * gb as u64,
                limit: ctx.max_storage_binding_size(),
            });
        }
        let mut pieces = Vec::new();
        let mut a = q_old;
        while a < q_new {
            let b = ((a / seg_tokens + 1) * seg_tokens)
                .min(q_new)
                .min(a + per_upload);
            let first = a.max(t_old);
            let incoming = if first < b {
                Some(rows("kvpack incoming rows", first, b)?)
            } else {
                None
            };
            pieces.push(Piece {
                a,
                b,
                first,
                incoming,
            });
            a = b;
        }
        // Segments: new ones, or the last one grown.
        let mut segments = Vec::new();
        let q_blocks = q_new / gb;
        for s in 0..q_blocks.div_ceil(self.seg_blocks) {
            let need = (q_blocks - s * self.seg_blocks).min(self.seg_blocks);
            let have = self.segments.get(s).map_or(0, |g| g.cap);
            if need > have {
                let cap = grown_capacity(have, need).min(self.seg_blocks);
                segments.push((s, self.alloc_segment(codec, cap)?));
            }
        }
        // Ring: the rows of [Q_new, T_new) must fit.
        let need = t_new - q_new;
        let have = self.ring.as_ref().map_or(0, |r| r.cap);
        let ring = if need > have {
            let most = (r + gb - 1).max(need);
            let cap = grown_capacity(have, need).min(most);
            Some(Ring {
                buffer: gpu::storage_buffer(
                    ctx,
                    "kvpack residual ring",
                    cap as u64 * self.row_bytes(),
                )?,
                cap,
            })
        } else {
            None
        };
        let first_kept = q_new.max(t_old);
        let ring_rows = if first_kept < t_new {
            Some(rows("kvpack residual rows", first_kept, t_new)?)
        } else {
            None
        };
        Ok(GpuPending {
            t_old,
            t_new,
            q_old,
            q_new,
            segments,
            pieces,
            ring,
            ring_rows,
        })
    }

    /// Whether this append encodes anything (and so may flag the status word, cleared first
    /// where the codec's status is read: [`Codec::needs_status`]).
    pub(crate) fn encodes(p: &GpuPending) -> bool {
        p.q_new > p.q_old
    }

    /// Records phase 1: the grown segments' history copies, then the codec's encode of every
    /// piece (reading the ring as it is) into the segments the append will commit.
    pub(crate) fn record_encode(
        &self,
        codec: &dyn Codec,
        p: &GpuPending,
        enc: &mut wgpu::CommandEncoder,
    ) -> Result<()> {
        if p.q_new == p.q_old {
            return Ok(());
        }
        let gb = codec.block_tokens();
        let q_blocks_old = p.q_old / gb;
        let wpb = self.stream_words(codec);
        for (s, seg) in &p.segments {
            if let Some(old) = self.segments.get(*s) {
                let used = q_blocks_old
                    .saturating_sub(s * self.seg_blocks)
                    .min(old.cap);
                for (st, ((from, _), (to, _))) in old.ranges.iter().zip(&seg.ranges).enumerate() {
                    let bytes = (used * wpb[st] * 4) as u64;
                    if bytes > 0 {
                        enc.copy_buffer_to_buffer(&old.buffer, *from, &seg.buffer, *to, bytes);
                    }
                }
            }
        }
        // Only a codec whose status word is read back needs it zeroed: a clear is a recorded
        // command (~5 % of a one-token f16 append's host time, benches/host_encode.rs, lavapipe).
        if codec.needs_status() {
            enc.clear_buffer(&self.status, 0, None);
        }
        let seg_tokens = self.seg_blocks * gb;
        let (ring, ring_tokens) = match &self.ring {
            Some(r) => (&r.buffer, r.cap),
            None => (&self.placeholder, 1),
        };
        for piece in &p.pieces {
            let si = piece.a / seg_tokens;
            let seg = p
                .segments
                .iter()
                .find(|(i, _)| *i == si)
                .map(|(_, s)| s)
                .or_else(|| self.segments.get(si))
                .ok_or_else(|| Error::Gpu {
                    during: "append",
                    message: format!("segment {si} missing (a kvpack bug)"),
                })?;
            let src = EncodeSource {
                ring,
                ring_tokens,
                incoming: piece.incoming.as_ref().map_or(&self.placeholder, |i| &i.0),
                incoming_at: piece.incoming.as_ref().map_or(0, |i| i.1),
                inc_start: piece.incoming.as_ref().map_or(piece.first, |i| i.2),
                t_old: p.t_old,
                start: piece.a,
                tables: &self.tables,
            };
            let dst = seg.at((piece.a - si * seg_tokens) / gb, &self.tables);
            codec.encode_gpu(
                &self.ctx,
                enc,
                &src,
                &dst,
                (piece.b - piece.a) / gb,
                &self.status,
            )?;
        }
        Ok(())
    }

    /// Reads the status word the encode left (blocking).
    pub(crate) fn read_status(&self) -> Result<u32> {
        let b = gpu::readback(&self.ctx, &self.status, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Records phase 2: the live rows re-laid into a grown ring, then the rows that stay in
    /// the window written into the (new) ring. With `conditional` (the layer's input status,
    /// while a recorded GPU-input append is unsynced) both go through `ring_write`, which
    /// skips them once an append was rejected (`super::gpu_input`).
    pub(crate) fn record_commit(
        &self,
        p: &GpuPending,
        enc: &mut wgpu::CommandEncoder,
        conditional: Option<&wgpu::Buffer>,
    ) -> Result<()> {
        let rb = self.row_bytes();
        let rw = self.g.row_words();
        let (dst, cap) = match (&p.ring, &self.ring) {
            (Some(r), _) | (None, Some(r)) => (&r.buffer, r.cap),
            (None, None) => return Ok(()),
        };
        if let (Some(new), Some(old)) = (&p.ring, &self.ring) {
            // Live rows [Q_new, T_old) move from slot s % C to s % C'.
            if let Some(status) = conditional {
                super::gpu_input::record_ring_write(
                    &self.ctx,
                    enc,
                    true,
                    (p.q_new.min(p.t_old), p.t_old),
                    (&old.buffer, 0),
                    old.cap,
                    0,
                    &new.buffer,
                    new.cap,
                    rw,
                    status,
                )?;
            } else {
                let mut s = p.q_new;
                while s < p.t_old {
                    let run = (p.t_old - s)
                        .min(old.cap - s % old.cap)
                        .min(new.cap - s % new.cap);
                    enc.copy_buffer_to_buffer(
                        &old.buffer,
                        (s % old.cap) as u64 * rb,
                        &new.buffer,
                        (s % new.cap) as u64 * rb,
                        run as u64 * rb,
                    );
                    s += run;
                }
            }
        }
        if let Some((rows, base, row0)) = &p.ring_rows {
            let first = p.q_new.max(p.t_old);
            if let Some(status) = conditional {
                return super::gpu_input::record_ring_write(
                    &self.ctx,
                    enc,
                    false,
                    (first, p.t_new),
                    (rows, *base),
                    0,
                    *row0,
                    dst,
                    cap,
                    rw,
                    status,
                );
            }
            let mut s = first;
            while s < p.t_new {
                let run = (p.t_new - s).min(cap - s % cap);
                enc.copy_buffer_to_buffer(
                    rows,
                    base + (s - *row0) as u64 * rb,
                    dst,
                    (s % cap) as u64 * rb,
                    run as u64 * rb,
                );
                s += run;
            }
        }
        Ok(())
    }

    /// Swaps in what the append allocated (after its commands were recorded).
    pub(crate) fn apply(&mut self, p: GpuPending) {
        for (s, seg) in p.segments {
            if s < self.segments.len() {
                self.segments[s] = seg;
            } else {
                self.segments.push(seg);
            }
        }
        if let Some(r) = p.ring {
            self.ring = Some(r);
        }
    }

    /// Uploads `words` (checked by the caller, [`super::SideWords::check`]) of a side holding
    /// `tokens` tokens into this empty side: full segments of `seg_blocks` blocks and a last
    /// one of exactly the blocks left, and a ring of exactly the window's rows (token `s` in
    /// row `s % cap`, as appends place it). Every buffer is allocated before any is kept: on
    /// an error the side is still empty.
    pub(crate) fn restore(
        &mut self,
        codec: &dyn Codec,
        tokens: usize,
        words: &super::SideWords,
    ) -> Result<()> {
        let gb = codec.block_tokens();
        let wpb = self.stream_words(codec);
        let blocks = words.quantized / gb;
        let mut segments = Vec::new();
        let mut first = 0;
        while first < blocks {
            let cap = (blocks - first).min(self.seg_blocks);
            let (ranges, size) = layout(&wpb, cap, self.ctx.storage_offset_alignment());
            let mut bytes = vec![0u8; size as usize];
            // (A positions stream, if any, stays zero: its owner writes it.)
            for ((offset, _), (w, stream)) in ranges.iter().zip(wpb.iter().zip(&words.streams)) {
                let part = &stream[first * w..(first + cap) * w];
                let at = *offset as usize;
                bytes[at..at + part.len() * 4].copy_from_slice(bytemuck::cast_slice(part));
            }
            segments.push(Segment {
                buffer: gpu::upload(&self.ctx, "kvpack segment", &bytes)?,
                cap,
                ranges,
            });
            first += cap;
        }
        let live = tokens - words.quantized;
        let ring = if live > 0 {
            let rows = f16_rows_to_words(self.g.token_elems(), &words.residual);
            let rw = self.g.row_words();
            let mut laid = vec![0u32; live * rw];
            for (i, row) in rows.chunks_exact(rw).enumerate() {
                let slot = (words.quantized + i) % live;
                laid[slot * rw..(slot + 1) * rw].copy_from_slice(row);
            }
            Some(Ring {
                buffer: gpu::upload(
                    &self.ctx,
                    "kvpack residual ring",
                    bytemuck::cast_slice(&laid),
                )?,
                cap: live,
            })
        } else {
            None
        };
        self.segments = segments;
        self.ring = ring;
        Ok(())
    }

    /// The stored words of the first `q` tokens (whole blocks), per stream (blocking).
    pub(crate) fn read_streams(&self, codec: &dyn Codec, q: usize) -> Result<Vec<Vec<u32>>> {
        let gb = codec.block_tokens();
        let blocks = q / gb;
        let mut out = vec![Vec::new(); codec.streams().len()];
        for (si, seg) in self.segments.iter().enumerate() {
            let first = si * self.seg_blocks;
            if first >= blocks {
                break;
            }
            let used = (blocks - first).min(seg.cap);
            for (st, (offset, _)) in seg.ranges.iter().enumerate().take(codec.streams().len()) {
                let words = used * codec.streams()[st].words_per_block;
                let bytes =
                    gpu::readback_range(&self.ctx, &seg.buffer, *offset, (words * 4) as u64)?;
                out[st].extend_from_slice(&bytemuck::pod_collect_to_vec::<u8, u32>(&bytes));
            }
        }
        Ok(out)
    }

    /// f16 rows of tokens `[q, t)` from the ring (blocking).
    pub(crate) fn read_ring(&self, q: usize, t: usize) -> Result<Vec<f16>> {
        let row = self.g.token_elems();
        let Some(ring) = &self.ring else {
            return Ok(Vec::new());
        };
        if t <= q {
            return Ok(Vec::new());
        }
        let words: Vec<u32> = bytemuck::pod_collect_to_vec(&gpu::readback(
            &self.ctx,
            &ring.buffer,
            ring.cap as u64 * self.row_bytes(),
        )?);
        let rw = self.g.row_words();
        let mut out = Vec::with_capacity((t - q) * row);
        for s in q..t {
            let slot = s % ring.cap;
            out.extend(words_to_f16_rows(
                row,
                &words[slot * rw..(slot + 1) * rw],
                1,
            ));
        }
        Ok(out)
    }

    /// Bytes held: per stream (its share of every segment, alignment padding included), the
    /// ring, the tables, a positions stream.
    pub(crate) fn held(&self, streams: usize) -> (Vec<u64>, u64, u64, u64) {
        let mut per = vec![0u64; streams + 1];
        for seg in &self.segments {
            for (st, (offset, _)) in seg.ranges.iter().enumerate() {
                let end = seg.ranges.get(st + 1).map_or(seg.buffer.size(), |r| r.0);
                per[st.min(streams)] += end - offset;
            }
        }
        let positions = per.pop().unwrap_or(0);
        let ring = self.ring.as_ref().map_or(0, |r| r.buffer.size());
        (per, ring, self.tables_bytes, positions)
    }
}
