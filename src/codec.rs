//! The [`Codec`] trait: how one side (keys or values) of a layer stores its tokens and how
//! attention reads them. A layer ([`crate::layer::Layer`]) pairs a key codec with a value
//! codec (any with any) over the shared store ([`crate::store`]); everything a codec does not
//! define (segments, residual window, appends, memory, snapshots, the attention core) is
//! written once there.
//!
//! A codec instance is built for one side, one geometry and one path (its kernels resolved
//! on a [`Context`]) by its row of the method table ([`crate::method`]). What it defines:
//! - its storage: the block size `G` along tokens ([`Codec::block_tokens`]), the streams of
//!   one block ([`Codec::streams`]: u32 words per block, all heads), and per-layer tables
//!   uploaded once ([`Codec::tables`]);
//! - the CPU reference: [`Codec::encode`] whole blocks, [`Codec::decode`] them back (tools
//!   and tests; a codec without a reconstruction returns an error);
//! - its GPU kernels: [`Codec::encode_gpu`] (reads the side's residual ring and the incoming
//!   rows, writes whole blocks into a segment) and [`Codec::decode_gpu`];
//! - attention's four hooks (docs/contracts/attention.md): [`Codec::prepare_query`],
//!   [`Codec::score`] (keys), [`Codec::value`] (values) and [`Codec::finish_output`] on the
//!   CPU, and the same on the GPU ([`Codec::attend_hooks`]: its `attend_k`/`attend_v` sources
//!   composed with the shared core, its specialization and uniform).

use std::fmt;

use half::f16;

use crate::attention::kernel::AttendHooks;
use crate::context::{Context, KernelPath};
use crate::error::{Error, Result};
use crate::store::memory::StreamKind;
use crate::store::{Geometry, Side};

/// One stream of a codec's stored form: `words_per_block` u32 words per block of
/// [`Codec::block_tokens`] tokens (all heads), blocks stored one after another.
///
/// **Per-head layout** (what eviction's compaction moves, `crate::store::compact`): a block
/// is `rows` rows of `words_per_block / rows` words each; row r holds every head's bits one
/// after another, head h at bits `[h·head_bits, (h+1)·head_bits)` from the row's first bit
/// (LSB-first), the rest of the row padding. Every codec's stream is of this form: head-major
/// blocks (`rows` 1: KIVI keys, TurboQuant, QJL, VecInfer, f16) or a block of token rows each
/// head-major (`rows` = G: KIVI values); f16 norms take 16 bits per head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stream {
    /// What it holds (`codes`, `params`, `norms`, ...).
    pub name: &'static str,
    /// How memory reports count it.
    pub kind: StreamKind,
    /// u32 words per block.
    pub words_per_block: usize,
    /// Rows per block (each row: every head's bits, head-major).
    pub rows: usize,
    /// Bits of one head in one row.
    pub head_bits: usize,
}

impl Stream {
    /// A stream of `rows` rows per block, each `heads` × `head_words` whole words.
    pub const fn words(
        name: &'static str,
        kind: StreamKind,
        heads: usize,
        rows: usize,
        head_words: usize,
    ) -> Self {
        Self {
            name,
            kind,
            words_per_block: rows * heads * head_words,
            rows,
            head_bits: 32 * head_words,
        }
    }

    /// A stream of one row per block holding `halves` f16 values per head, two per word
    /// (the row padded to a whole word).
    pub const fn halves(name: &'static str, kind: StreamKind, heads: usize, halves: usize) -> Self {
        Self {
            name,
            kind,
            words_per_block: (heads * halves).div_ceil(2),
            rows: 1,
            head_bits: 16 * halves,
        }
    }
}

/// Where a GPU encode reads the f16 rows `[H·D/2 words]` of the tokens it quantizes: token
/// `s < t_old` is row `s % ring_tokens` of `ring` (the side's residual window), token
/// `s ≥ t_old` is row `s − inc_start` of `incoming` from byte `incoming_at` (this append's
/// rows: a slot of the device's staging arena, [`crate::gpu::staging`], or a buffer of their
/// own). Kernels bind `incoming` from that byte ([`EncodeSource::incoming_bind`]).
#[derive(Clone, Copy, Debug)]
pub struct EncodeSource<'a> {
    /// The residual ring (a placeholder when no token comes from it).
    pub ring: &'a wgpu::Buffer,
    /// Its capacity in rows (at least 1).
    pub ring_tokens: usize,
    /// This append's rows (a placeholder when no token comes from it).
    pub incoming: &'a wgpu::Buffer,
    /// The byte of `incoming` its first row is at (a multiple of the device's storage offset
    /// alignment).
    pub incoming_at: u64,
    /// Absolute token of `incoming`'s first row.
    pub inc_start: usize,
    /// Tokens before this one are in the ring.
    pub t_old: usize,
    /// Absolute token of the first token encoded (a multiple of the block size).
    pub start: usize,
    /// The codec's tables ([`Codec::tables`]; a placeholder word when it has none).
    pub tables: &'a wgpu::Buffer,
}

impl<'a> EncodeSource<'a> {
    /// The storage binding of the incoming rows: `incoming` from `incoming_at` (row 0 of the
    /// binding is the row of token `inc_start`).
    pub fn incoming_bind(&self) -> crate::gpu::Bind<'a> {
        crate::gpu::Bind {
            buffer: self.incoming,
            offset: self.incoming_at,
            size: None,
        }
    }

    /// Where its rows are, for the codecs' dispatch plans.
    pub fn rows(&self) -> SourceRows {
        SourceRows {
            start: self.start,
            t_old: self.t_old,
            inc_start: self.inc_start,
            ring_tokens: self.ring_tokens,
        }
    }
}

/// Where an encode dispatch reads its tokens (the plans' half of [`EncodeSource`]): token s
/// comes from ring row `s % ring_tokens` when `s < t_old`, else from the incoming buffer's row
/// `s − inc_start`. Every codec's plans take it (KIVI's and TurboQuant's name it
/// `QuantSource`, QJL's and VecInfer's `EncodeFrom`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceRows {
    /// Absolute token of the first token encoded.
    pub start: usize,
    /// Tokens before this one are in the ring.
    pub t_old: usize,
    /// Absolute token of the incoming buffer's first row.
    pub inc_start: usize,
    /// Rows of the ring (at least 1).
    pub ring_tokens: usize,
}

/// One segment of a side's stored words on the GPU: one buffer, each stream at its byte
/// range, the blocks of tokens `[first_token, first_token + cap)`.
#[derive(Clone, Copy, Debug)]
pub struct SegmentRef<'a> {
    /// The buffer.
    pub buffer: &'a wgpu::Buffer,
    /// Byte offset and size of each stream inside it (offsets aligned for binding).
    pub ranges: &'a [(u64, u64)],
    /// The first block a dispatch reads or writes, counted from the segment's start.
    pub block: usize,
    /// The codec's tables ([`Codec::tables`]; a placeholder word when it has none).
    pub tables: &'a wgpu::Buffer,
}

impl<'a> SegmentRef<'a> {
    /// Stream `s` as a binding.
    pub fn stream(&self, s: usize) -> crate::gpu::Bind<'a> {
        let (offset, size) = self.ranges[s];
        crate::gpu::Bind::range(self.buffer, offset, size)
    }
}

/// The stored words of one side as the CPU sees them: per stream, the words of the blocks
/// `[0, quantized / G)`.
pub type Words<'a> = [&'a [u32]];

/// One side of a layer's cache: see the module docs.
pub trait Codec: Send + Sync + fmt::Debug {
    /// The method-table name this codec belongs to (`f16`, `kivi`, ...).
    fn method(&self) -> &'static str;
    /// Its settings in the method grammar (`bits=4,group=32,params=f16`), for `describe()`.
    fn settings(&self) -> String;
    /// The side it stores.
    fn side(&self) -> Side;
    /// The layer's shape.
    fn geometry(&self) -> Geometry;
    /// The path its kernels run on (the CPU reference or one GPU path).
    fn path(&self) -> KernelPath;
    /// Tokens per block (G): a side quantizes whole blocks.
    fn block_tokens(&self) -> usize;
    /// The streams of one block.
    fn streams(&self) -> &[Stream];
    /// Per-layer constants (u32 words) the kernels read; uploaded once, counted as tables.
    fn tables(&self) -> &[u32] {
        &[]
    }

    /// Checks one append's f16 rows `[n][H][D]` (absolute tokens `first..first + n`) before
    /// anything is stored, on every path alike: input that the codec's stored form cannot
    /// hold once these tokens leave the residual window (e.g. TurboQuant's per-token norm
    /// beyond f16) is refused at entry. Default: nothing to check.
    fn check_rows(&self, first: usize, rows: &[f16]) -> Result<()> {
        let _ = (first, rows);
        Ok(())
    }

    /// CPU reference: encodes `blocks` whole blocks whose first token is the absolute token
    /// `first`; `x(t, h, d)` is the f16-rounded input of token `first + t`. `out[s]` receives
    /// `blocks · words_per_block` words of stream `s` (its previous content is replaced).
    fn encode(
        &self,
        first: usize,
        blocks: usize,
        x: &dyn Fn(usize, usize, usize) -> f32,
        out: &mut [Vec<u32>],
    ) -> Result<()>;

    /// Checks stored words that did not come from this codec's encode (a restored snapshot, a
    /// loaded file) for what its encode never writes: `words` holds `blocks` blocks of each
    /// stream (their lengths are already checked). Default: every word is acceptable. A codec
    /// whose words hold floats rejects NaN and ±Inf here, as appends reject them on entry.
    fn check_words(&self, words: &Words<'_>, blocks: usize) -> Result<()> {
        let _ = (words, blocks);
        Ok(())
    }

    /// CPU reference: reconstructs `blocks` blocks from `words` (each stream's words of those
    /// blocks) into `out` `[blocks·G][H][D]` f32.
    fn decode(&self, words: &Words<'_>, blocks: usize, out: &mut [f32]) -> Result<()>;

    /// Records the GPU encode of `blocks` blocks from `src` into `dst` (its `block` is the
    /// first block written). `status` is a zero-cleared word the kernels may flag.
    fn encode_gpu(
        &self,
        ctx: &Context,
        enc: &mut wgpu::CommandEncoder,
        src: &EncodeSource<'_>,
        dst: &SegmentRef<'_>,
        blocks: usize,
        status: &wgpu::Buffer,
    ) -> Result<()>;

    /// Whether [`Codec::encode_gpu`] can flag a failure in its status word (then a blocking
    /// append reads it back before it commits, and a recorded append is refused).
    fn needs_status(&self) -> bool {
        false
    }

    /// The error for a non-zero status word after encoding from absolute token `first`.
    fn status_error(&self, status: u32, first: usize) -> Error {
        Error::Gpu {
            during: "encode",
            message: format!(
                "{} {} encode flagged status {status:#x} at token {first}",
                self.method(),
                self.side().name()
            ),
        }
    }

    /// Whether the codec reconstructs on the GPU ([`Codec::decode_gpu`]); else a GPU layer's
    /// reconstruction reads the words back and runs [`Codec::decode`].
    fn gpu_decodes(&self) -> bool {
        false
    }

    /// Records the GPU reconstruction of `blocks` blocks of `src` (from its `block`) into
    /// `out` `[blocks·G][H][D]` f32 (codecs whose [`Codec::gpu_decodes`] is true).
    fn decode_gpu(
        &self,
        ctx: &Context,
        enc: &mut wgpu::CommandEncoder,
        src: &SegmentRef<'_>,
        blocks: usize,
        out: &wgpu::Buffer,
    ) -> Result<()> {
        let _ = (ctx, enc, src, blocks, out);
        Err(Error::PathUnavailable {
            kernel: self.method(),
            requested: self.path().to_string(),
            reason: "this codec has no GPU reconstruction kernel".into(),
        })
    }

    /// Attention hook 1 (keys): the query row `q` `[D]` of KV head `h` in the form
    /// [`Codec::score`] reads (default: `q` itself).
    fn prepare_query(&self, h: usize, q: &[f32], out: &mut Vec<f32>) {
        let _ = h;
        out.clear();
        out.extend_from_slice(q);
    }

    /// Attention hook 2 (keys): the estimates of ⟨q, k_j⟩ (unscaled) for quantized token `j`
    /// of head `h`, one per prepared query of the head's group (`out[i]` for `preps[i]`),
    /// from the stored words. `scratch` is the caller's reusable buffer. Default: the dot
    /// product with the reconstructed key (reconstructed once), summed in channel order.
    fn score(
        &self,
        words: &Words<'_>,
        preps: &[Vec<f32>],
        j: usize,
        h: usize,
        scratch: &mut Vec<f32>,
        out: &mut [f32],
    ) {
        scratch.resize(self.geometry().dim, 0.0);
        self.row(words, j, h, scratch);
        for (o, p) in out.iter_mut().zip(preps) {
            *o = p.iter().zip(scratch.iter()).map(|(a, b)| a * b).sum();
        }
    }

    /// Width of the space values accumulate in (default D; a rotating codec may use P).
    fn value_dim(&self) -> usize {
        self.geometry().dim
    }

    /// Attention hook 3 (values): v̂_j of head `h` in the accumulation space
    /// ([`Codec::value_dim`] floats). Default: the reconstructed value.
    fn value(&self, words: &Words<'_>, j: usize, h: usize, out: &mut [f32]) {
        self.row(words, j, h, out);
    }

    /// Attention hook 4 (values): maps a normalized accumulator `[value_dim]` of head `h` to
    /// the output `[D]` (linear). Default: identity.
    fn finish_output(&self, h: usize, acc: &[f32], out: &mut [f32]) {
        let _ = h;
        out.copy_from_slice(&acc[..out.len()]);
    }

    /// The reconstruction of one quantized token `j` of head `h` (`[D]`), for the default
    /// hooks. Codecs without a reconstruction override the hooks instead.
    fn row(&self, words: &Words<'_>, j: usize, h: usize, out: &mut [f32]);

    /// The GPU hooks of attention (`wgsl/<codec>/attend_{k,v}.wgsl`, `msl/<codec>/...`):
    /// composed with the shared core and the other side's hooks.
    fn attend_hooks(&self) -> &'static AttendHooks;

    /// The specialization constants its hook of this side reads (named per side, e.g.
    /// `ATT_KBITS` for keys), fixed for the cache's life.
    fn attend_spec(&self) -> Vec<(&'static str, u32)> {
        Vec::new()
    }

    /// Its hook's uniform (bytes, the layout of the hook file's struct) for a segment whose
    /// streams sit at these byte ranges (`None`: no segment holds quantized tokens of this
    /// dispatch). Default: the streams' first words, four u32 (zero-padded).
    fn attend_uniform(&self, ranges: Option<&[(u64, u64)]>) -> Vec<u8> {
        let words: Vec<u32> = match ranges {
            Some(r) => r.iter().map(|(o, _)| (*o / 4) as u32).collect(),
            None => Vec::new(),
        };
        let mut w = words;
        w.resize(4, 0);
        bytemuck::cast_slice(&w).to_vec()
    }

    /// Whether its value hook accumulates in the output space itself (`V_SPACE_OUT` of its
    /// hook: V_W = D, the core's lane mapping, no finish): the residual window's rows then
    /// join its accumulator and a split may hold both. A codec that accumulates in a space of
    /// its own (a rotation) says false: splits are cut at the value side's Q.
    fn attend_value_space_out(&self) -> bool {
        true
    }

    /// Workgroup memory (vec4 entries) its key hook's prepared query takes (0: it scores with
    /// the scaled query itself).
    fn attend_prep_width(&self) -> usize {
        0
    }

    /// What its GPU attention hook of this side chose on this context, for the layer's
    /// `describe()` (e.g. VecInfer's LUT precision). Default: nothing to say.
    fn attend_note(&self) -> Option<String> {
        None
    }

    /// Workgroup memory (bytes) its hook of this side declares itself (e.g. a codebook), on
    /// top of the core's: counted when a call is checked against the device's limit.
    fn attend_workgroup_bytes(&self) -> usize {
        0
    }

    /// Whether the tensor-core decode kernel (wgsl/attend/attend_decode_tc.wgsl) serves this
    /// side as configured, through its tile hooks ([`AttendHooks::wgsl_kt`] /
    /// [`AttendHooks::wgsl_vt`]), or why not. `groups`: the value groups the value side's
    /// tile splits a row into (1 for rows in the output space). Default: no tile hooks.
    fn attend_tiles(&self) -> std::result::Result<usize, String> {
        Err(format!(
            "{} has no tile hooks for the tensor-core decode kernel",
            self.attend_hooks().name
        ))
    }
}

/// The common check of a codec built for a GPU path: the context must have a device.
pub(crate) fn require_gpu(ctx: &Context, what: &'static str) -> Result<()> {
    crate::gpu::gpu_of(ctx, what).map(|_| ())
}

/// The first non-finite f16 among the halves of `words` (element 2i in the low half of word
/// i): its index and value, for codecs whose streams hold f16 values.
pub fn first_non_finite_f16(words: &[u32]) -> Option<(usize, f32)> {
    words.iter().enumerate().find_map(|(i, w)| {
        [*w as u16, (*w >> 16) as u16]
            .into_iter()
            .enumerate()
            .map(|(j, b)| (2 * i + j, f16::from_bits(b)))
            .find(|(_, x)| !x.is_finite())
            .map(|(e, x)| (e, x.to_f32()))
    })
}

/// The f16 streams `named` (what, words) all finite, else [`Error::NonFinite`] naming the
/// first stream and element that is not (the codecs that store f16 norms: TurboQuant, Prod, QJL).
pub(crate) fn check_f16_streams(named: &[(&'static str, &[u32])]) -> Result<()> {
    for &(what, words) in named {
        if let Some((index, value)) = first_non_finite_f16(words) {
            return Err(Error::NonFinite { what, index, value });
        }
    }
    Ok(())
}

/// Refuses rows `[n][heads][dim]` (f16, from token `first`) holding a vector whose L2 norm does
/// not fit f16, for the codecs that store one f16 norm per vector: the error
/// ([`crate::cpu::common::vector::store_norm`]) names `what`, the token and the head.
pub(crate) fn check_row_norms(rows: &[f16], g: Geometry, first: usize, what: &str) -> Result<()> {
    let mut x = vec![0f32; g.dim];
    for (i, v) in rows.chunks_exact(g.dim).enumerate() {
        for (o, r) in x.iter_mut().zip(v) {
            *o = r.to_f32();
        }
        crate::cpu::common::vector::store_norm(
            crate::cpu::common::vector::norm(&x),
            what,
            first + i / g.heads,
            i % g.heads,
        )?;
    }
    Ok(())
}

/// f16 rows of tokens `[first, first + n)` of an f16-rounded input closure, for codecs that
/// store f16 (the baseline codec) or tests.
pub fn rows_from(g: Geometry, n: usize, x: &dyn Fn(usize, usize, usize) -> f32) -> Vec<f16> {
    let mut out = Vec::with_capacity(n * g.token_elems());
    for t in 0..n {
        for h in 0..g.heads {
            for d in 0..g.dim {
                out.push(f16::from_f32(x(t, h, d)));
            }
        }
    }
    out
}
