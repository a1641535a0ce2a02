//! The [`Codec`] of one TurboQuant side (MSE or RVQ, keys or values): per token, per head,
//! the norm and the codes of the rotated unit vector (streams `codes` and `norms`, tables
//! `signs` and `codebooks`: [`super::layout`]). Attention reads the codes in the rotated
//! space: keys through the rotated query, values accumulated there and inverse-rotated once
//! per output row (docs/contracts/turboquant.md, "Attention on TurboQuant codes").

use std::sync::Arc;

use half::f16;

use super::config::TqSide;
use super::kernels;
use super::layout::{Layout, norm_at};
use super::plans;
use crate::attention::kernel::AttendHooks;
use crate::codec::{Codec, EncodeSource, SegmentRef, Stream, Words};
use crate::context::{Context, KernelPath, PathChoice};
use crate::cpu::common::splitmix::{sign_table, signs_packed};
use crate::cpu::turboquant::codebook::{Codebook, codebook, rvq_codebook};
use crate::cpu::turboquant::rotation::inv_sqrt;
use crate::cpu::turboquant::turboquant_dequant::reconstruct;
use crate::cpu::turboquant::turboquant_quant::quantize_vector;
use crate::cpu::turboquant::{attend_k, attend_v};
use crate::error::{Error, Result};
use crate::gpu::{self, Bind};
use crate::store::memory::StreamKind;
use crate::store::{Geometry, Side};

/// The largest P the GPU kernels are written for (their register arrays and unrolled loops).
pub const GPU_MAX_P: usize = 1024;

/// One TurboQuant side (see the module docs).
#[derive(Debug)]
pub struct TurboQuantCodec {
    cfg: TqSide,
    l: Layout,
    layer: usize,
    quant: KernelPath,
    dequant: KernelPath,
    streams: [Stream; 2],
    /// The codebooks of the stages.
    books: Vec<Arc<Codebook>>,
    /// Their f32 centroids (what the hooks look up).
    centroids: Vec<Vec<f32>>,
    /// ±1 signs `[H][P]` of this side's stream.
    signs: Vec<f32>,
    /// The tables uploaded for the kernels ([`super::layout`]).
    tables: Vec<u32>,
}

impl TurboQuantCodec {
    /// The codec of `cfg` for layer `layer` (its signs' stream index) of geometry `g`, its
    /// kernels resolved on `ctx` for `choice`. Errors: bits or D out of range, a path the
    /// device cannot run, or a GPU path beyond what the kernels hold.
    pub fn new(
        ctx: &Context,
        cfg: TqSide,
        g: Geometry,
        layer: usize,
        choice: PathChoice,
    ) -> Result<Self> {
        let l = Layout::new(g.heads, g.dim, cfg.bits, cfg.variant.stages())?;
        let quant = ctx.resolve(&kernels::TURBOQUANT_QUANT, choice)?;
        let dequant = ctx.resolve(&kernels::TURBOQUANT_DEQUANT, choice)?;
        if quant.is_gpu() {
            crate::codec::require_gpu(ctx, "turboquant cache")?;
            check_gpu(ctx, &l, quant)?;
        }
        let mut books = vec![codebook(l.padded, l.bits)?];
        if l.stages == 2 {
            books.push(rvq_codebook(l.padded, l.bits)?);
        }
        let (seed, stream) = (cfg.seed, cfg.sign_stream());
        let signs = sign_table(seed, layer as u64, l.heads, stream, l.padded);
        let tables = tables_of(seed, layer as u64, stream, &l, &books);
        Ok(Self {
            cfg,
            l,
            layer,
            quant,
            dequant,
            streams: [
                Stream::words(
                    "codes",
                    StreamKind::Codes,
                    l.heads,
                    1,
                    l.code_words() / l.heads,
                ),
                Stream::halves("norms", StreamKind::Params, l.heads, 1),
            ],
            centroids: books.iter().map(|b| b.centroids.clone()).collect(),
            books,
            signs,
            tables,
        })
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.l
    }

    /// The layer index its signs were drawn for.
    pub fn layer(&self) -> usize {
        self.layer
    }

    /// The ±1 signs `[P]` of head `h`.
    pub fn head_signs(&self, h: usize) -> &[f32] {
        &self.signs[h * self.l.padded..(h + 1) * self.l.padded]
    }

    /// The codebooks of its stages.
    pub fn codebooks(&self) -> &[Arc<Codebook>] {
        &self.books
    }
}

/// The tables of a layout ([`super::layout`]): the packed signs of stream `stream` per head,
/// then each stage's centroids, boundaries and one f32::MAX pad (TurboQuant-Prod appends its
/// sketch after these).
pub(crate) fn tables_of(
    seed: u64,
    layer: u64,
    stream: u64,
    l: &Layout,
    books: &[Arc<Codebook>],
) -> Vec<u32> {
    let mut tables = Vec::with_capacity(l.table_words());
    for h in 0..l.heads {
        tables.extend(signs_packed(seed, layer, h as u64, stream, l.padded));
    }
    for b in books {
        tables.extend(b.centroids.iter().map(|c| c.to_bits()));
        tables.extend(b.boundaries.iter().map(|c| c.to_bits()));
        tables.push(f32::MAX.to_bits());
    }
    debug_assert_eq!(tables.len(), l.table_words());
    tables
}

/// What a GPU path can hold: P up to [`GPU_MAX_P`], the quantize kernel's workgroup memory,
/// subgroups of at least 8 lanes for the subgroup variant.
fn check_gpu(ctx: &Context, l: &Layout, path: KernelPath) -> Result<()> {
    if l.padded > GPU_MAX_P {
        return Err(Error::Limit {
            what: "TurboQuant's padded head width P on a GPU path",
            needed: l.padded as u64,
            limit: GPU_MAX_P as u64,
        });
    }
    let need = plans::quant_workgroup_bytes(l, path) as u64;
    let limit = u64::from(ctx.max_workgroup_storage_size());
    if need > limit {
        return Err(Error::Limit {
            what: "turboquant_quant workgroup storage",
            needed: need,
            limit,
        });
    }
    if path == KernelPath::WgslSubgroup
        && ctx
            .adapter_info()
            .is_some_and(|i| i.subgroup_min_size > 0 && i.subgroup_min_size < 8)
    {
        return Err(Error::PathUnavailable {
            kernel: kernels::TURBOQUANT_QUANT.name,
            requested: path.to_string(),
            reason: "the subgroup variant needs subgroups of at least 8 lanes".into(),
        });
    }
    Ok(())
}

impl Codec for TurboQuantCodec {
    fn method(&self) -> &'static str {
        self.cfg.variant.name()
    }

    /// `bits=B,seed=0x…` (the seed always: the spec wants it in the cache's description).
    fn settings(&self) -> String {
        format!("bits={},seed={:#x}", self.cfg.bits, self.cfg.seed)
    }

    fn side(&self) -> Side {
        self.cfg.side
    }

    fn geometry(&self) -> Geometry {
        Geometry {
            heads: self.l.heads,
            dim: self.l.dim,
        }
    }

    fn path(&self) -> KernelPath {
        self.quant
    }

    fn block_tokens(&self) -> usize {
        1
    }

    fn streams(&self) -> &[Stream] {
        &self.streams
    }

    fn tables(&self) -> &[u32] {
        &self.tables
    }

    fn check_words(&self, words: &Words<'_>, _blocks: usize) -> Result<()> {
        // Norms: f16 halves (the padding half of an odd head count is zero, hence finite).
        crate::codec::check_f16_streams(&[("stored turboquant norms", words[1])])
    }

    fn check_rows(&self, first: usize, rows: &[f16]) -> Result<()> {
        let what = format!("TurboQuant {}", self.cfg.side.name());
        crate::codec::check_row_norms(rows, self.geometry(), first, &what)
    }

    fn encode(
        &self,
        first: usize,
        blocks: usize,
        x: &dyn Fn(usize, usize, usize) -> f32,
        out: &mut [Vec<u32>],
    ) -> Result<()> {
        let [codes, norms] = out else {
            return Err(Error::LengthMismatch {
                what: "turboquant streams",
                expected: 2,
                actual: out.len(),
            });
        };
        let l = &self.l;
        *codes = Vec::with_capacity(blocks * l.code_words());
        *norms = vec![0u32; blocks * l.norm_words()];
        let books: Vec<&Codebook> = self.books.iter().map(|b| &**b).collect();
        let mut row = vec![0f32; l.dim];
        for t in 0..blocks {
            for h in 0..l.heads {
                for (d, r) in row.iter_mut().enumerate() {
                    *r = x(t, h, d);
                }
                let n = quantize_vector(&row, self.head_signs(h), &books, first + t, h, codes)?;
                norms[t * l.norm_words() + h / 2] |= u32::from(n.to_bits()) << (16 * (h % 2));
            }
        }
        Ok(())
    }

    fn decode(&self, words: &Words<'_>, blocks: usize, out: &mut [f32]) -> Result<()> {
        let l = &self.l;
        let mut yhat = vec![0f32; l.padded];
        for t in 0..blocks {
            for h in 0..l.heads {
                attend_k::decode(l, words[0], &self.centroids, t, h, &mut yhat);
                let n = f16::from_f32(norm_at(words[1], l.norm_words(), t, h));
                let x = reconstruct(&yhat, self.head_signs(h), n, l.dim)?;
                out[(t * l.heads + h) * l.dim..][..l.dim].copy_from_slice(&x);
            }
        }
        Ok(())
    }

    fn encode_gpu(
        &self,
        ctx: &Context,
        enc: &mut wgpu::CommandEncoder,
        src: &EncodeSource<'_>,
        dst: &SegmentRef<'_>,
        blocks: usize,
        _status: &wgpu::Buffer,
    ) -> Result<()> {
        let plan = plans::plan_quant(&self.l, self.quant, blocks, src.rows(), dst.block);
        gpu::encode_plan_bound(
            ctx,
            enc,
            self.quant,
            &plan,
            &[
                Bind::from(src.ring),
                src.incoming_bind(),
                dst.stream(0),
                dst.stream(1),
                Bind::from(src.tables),
            ],
        )
    }

    fn gpu_decodes(&self) -> bool {
        true
    }

    fn decode_gpu(
        &self,
        ctx: &Context,
        enc: &mut wgpu::CommandEncoder,
        src: &SegmentRef<'_>,
        blocks: usize,
        out: &wgpu::Buffer,
    ) -> Result<()> {
        let plan = plans::plan_dequant(&self.l, blocks, src.block);
        gpu::encode_plan_bound(
            ctx,
            enc,
            self.dequant,
            &plan,
            &[
                src.stream(0),
                src.stream(1),
                Bind::from(src.tables),
                Bind::from(out),
            ],
        )
    }

    fn prepare_query(&self, h: usize, q: &[f32], out: &mut Vec<f32>) {
        attend_k::prepare_query(q, self.head_signs(h), out);
    }

    fn score(
        &self,
        words: &Words<'_>,
        preps: &[Vec<f32>],
        j: usize,
        h: usize,
        scratch: &mut Vec<f32>,
        out: &mut [f32],
    ) {
        attend_k::score(
            &self.l,
            words[0],
            words[1],
            &self.centroids,
            preps,
            j,
            h,
            scratch,
            out,
        );
    }

    fn value_dim(&self) -> usize {
        self.l.padded
    }

    fn value(&self, words: &Words<'_>, j: usize, h: usize, out: &mut [f32]) {
        attend_v::value(&self.l, words[0], words[1], &self.centroids, j, h, out);
    }

    fn finish_output(&self, h: usize, acc: &[f32], out: &mut [f32]) {
        attend_v::finish(acc, self.head_signs(h), out);
    }

    fn row(&self, words: &Words<'_>, j: usize, h: usize, out: &mut [f32]) {
        let l = &self.l;
        let mut yhat = vec![0f32; l.padded];
        attend_k::decode(l, words[0], &self.centroids, j, h, &mut yhat);
        let n = f16::from_f32(norm_at(words[1], l.norm_words(), j, h));
        // Lengths are the layout's: the reconstruction cannot fail.
        if let Ok(x) = reconstruct(&yhat, self.head_signs(h), n, l.dim) {
            out.copy_from_slice(&x);
        }
    }

    fn attend_hooks(&self) -> &'static AttendHooks {
        &kernels::ATTEND_HOOKS
    }

    fn attend_spec(&self) -> Vec<(&'static str, u32)> {
        let l = &self.l;
        let c = inv_sqrt(l.padded).to_bits();
        let (p, lg, b, s) = (
            l.padded as u32,
            plans::log2(l.padded),
            l.bits,
            l.stages as u32,
        );
        match self.cfg.side {
            Side::Keys => vec![
                ("ATT_KTQ_P", p),
                ("ATT_KTQ_LOG2P", lg),
                ("ATT_KTQ_BITS", b),
                ("ATT_KTQ_STAGES", s),
                ("ATT_KTQ_C", c),
            ],
            Side::Values => vec![
                ("ATT_VTQ_P", p),
                ("ATT_VTQ_LOG2P", lg),
                ("ATT_VTQ_BITS", b),
                ("ATT_VTQ_STAGES", s),
                ("ATT_VTQ_C", c),
            ],
        }
    }

    /// `codes`, `norms` (the streams' first words), two pad words, then the stages' centroids
    /// (f32, `[S][2^b]`: the MSL hooks read them from this constant buffer; the WGSL hooks
    /// from workgroup memory).
    fn attend_uniform(&self, ranges: Option<&[(u64, u64)]>) -> Vec<u8> {
        let mut w: Vec<u32> = match ranges {
            Some(r) => r.iter().map(|(o, _)| (*o / 4) as u32).collect(),
            None => vec![0, 0],
        };
        w.resize(4, 0);
        for c in &self.centroids {
            w.extend(c.iter().map(|x| x.to_bits()));
        }
        bytemuck::cast_slice(&w).to_vec()
    }

    fn attend_value_space_out(&self) -> bool {
        false
    }

    fn attend_prep_width(&self) -> usize {
        match self.cfg.side {
            Side::Keys => 8 * (self.l.padded / 8).max(1),
            Side::Values => 0,
        }
    }

    fn attend_workgroup_bytes(&self) -> usize {
        self.l.stages * self.l.levels() * 4
    }
}
