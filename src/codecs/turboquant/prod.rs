//! The [`Codec`] of TurboQuant-Prod keys (docs/contracts/turboquant.md, "TurboQuant-Prod"):
//! b bits in total, stage 1 is TurboQuant-MSE at b − 1 bits, then the m sign bits of the
//! Gaussian sketch of its residual in the rotated-back P-space, with the residual's norm ρ.
//! Attention adds the sketch correction `n·ρ·√(π/2)/m·⟨S q, 2σ − 1⟩` to the MSE score, with
//! `S q` computed once per query row.
//!
//! **Streams** (per token, blocks one after another):
//! ```text
//! codes:          u32 [H][row_words]   row_words = ceil(P·(b − 1) / 32): stage-1 codes
//! signs:          u32 [H][m / 32]      bit i of a row = σ_i = [(S r)_i ≥ 0], LSB-first
//! norms:          u32 [ceil(H / 2)]    f16 n of head h in half h % 2 of word h / 2
//! residual_norms: u32 [ceil(H / 2)]    f16 ρ, packed as the norms
//! ```
//! **Tables** (one per layer, uploaded once, counted as tables): the key signs `[H][P/32]` and
//! the stage-1 codebook exactly as TurboQuant-MSE's ([`super::layout`]), then the sketch S
//! `[m][P]` f32 (SplitMix64 stream 2, head 0) from word [`Layout::table_words`], transposed
//! (Sᵀ `[P][m]`: [`crate::cpu::common::sketch::gpu_sketch_table`]).
//!
//! Paths: the CPU reference, and the fused encode kernel `turboquant_prod_quant` (WGSL
//! subgroup and workgroup-memory variants, MSL) with the GPU attention hooks
//! ([`super::kernels::PROD_ATTEND_HOOKS`]).

use std::fmt;
use std::sync::Arc;

use half::f16;

use super::codec::{GPU_MAX_P, tables_of};
use super::kernels;
use super::layout::{Layout, norm_at};
use super::plans;
use crate::attention::kernel::AttendHooks;
use crate::codec::{Codec, EncodeSource, SegmentRef, Stream, Words};
use crate::codecs::qjl::codec::{sketch_lut, sketch_note, sketch_prep_width};
use crate::context::{Context, KernelPath, PathChoice};
use crate::cpu::common::sketch::{gpu_sketch_table, scale};
use crate::cpu::common::splitmix::{
    DEFAULT_SEED, STREAM_KEY_SIGNS, STREAM_PROD_SKETCH, gaussian_table, sign_table,
};
use crate::cpu::turboquant::attend_k;
use crate::cpu::turboquant::codebook::{Codebook, codebook};
use crate::cpu::turboquant::layout::ProdLayout;
use crate::cpu::turboquant::rotation::inv_sqrt;
use crate::cpu::turboquant::turboquant_dequant::reconstruct;
use crate::cpu::turboquant::turboquant_quant::quantize_prod_vector;
use crate::cpu::turboquant_prod::attend_k as prod_attend_k;
use crate::error::{Error, Result};
use crate::gpu::{self, Bind};
use crate::store::memory::StreamKind;
use crate::store::{Geometry, Side};

/// What a GPU path can hold: P up to [`GPU_MAX_P`] and the kernel's workgroup memory.
fn check_gpu(ctx: &Context, l: &Layout, m: usize) -> Result<()> {
    if l.padded > GPU_MAX_P {
        return Err(Error::Limit {
            what: "TurboQuant-Prod's padded head width P on a GPU path",
            needed: l.padded as u64,
            limit: GPU_MAX_P as u64,
        });
    }
    let need = plans::prod_quant_workgroup_bytes(l, m) as u64;
    let limit = u64::from(ctx.max_workgroup_storage_size());
    if need > limit {
        return Err(Error::Limit {
            what: "turboquant_prod_quant workgroup storage",
            needed: need,
            limit,
        });
    }
    Ok(())
}

/// The key side's TurboQuant-Prod settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProdSide {
    /// Bits in total b (2..=8): b − 1 for the MSE stage, one sign bit per sketch row.
    pub bits: u32,
    /// Sketch rows m (a positive multiple of 32); `None`: P rounded up to one.
    pub m: Option<usize>,
    /// The seed of the key signs and the sketch (default [`DEFAULT_SEED`]).
    pub seed: u64,
}

impl ProdSide {
    /// `bits` in total, m from the head width, the default seed.
    pub fn new(bits: u32) -> Self {
        Self {
            bits,
            m: None,
            seed: DEFAULT_SEED,
        }
    }

    /// The same settings with `m` sketch rows (`None`: from the head width).
    pub fn m(mut self, m: impl Into<Option<usize>>) -> Self {
        self.m = m.into();
        self
    }

    /// The same settings with the seed `seed`.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
}

impl fmt::Display for ProdSide {
    /// `bits=B`, then `m=M` when given and `seed=0x…` when not the default.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bits={}", self.bits)?;
        if let Some(m) = self.m {
            write!(f, ",m={m}")?;
        }
        if self.seed != DEFAULT_SEED {
            write!(f, ",seed={:#x}", self.seed)?;
        }
        Ok(())
    }
}

/// TurboQuant-Prod keys of one layer (see the module docs).
#[derive(Debug)]
pub struct ProdCodec {
    cfg: ProdSide,
    prod: ProdLayout,
    /// The encode kernel's path.
    quant: KernelPath,
    /// The stage-1 layout (b − 1 bits, one stage), shared with TurboQuant-MSE's helpers.
    l: Layout,
    streams: [Stream; 4],
    book: Arc<Codebook>,
    /// Its f32 centroids (what the score reads).
    centroids: Vec<Vec<f32>>,
    /// ±1 key signs `[H][P]`.
    signs: Vec<f32>,
    /// S `[m][P]`.
    sketch: Vec<f32>,
    tables: Vec<u32>,
    /// Whether GPU attention scores the sketch by its nibble table
    /// ([`crate::codecs::qjl::codec::sketch_lut`]).
    lut: bool,
}

/// The rotated query's width (vec4 entries) before the sketch's in the prepared query
/// (`KPR_SQ` of wgsl/turboquant_prod/attend_k.wgsl).
fn mse_prep_width(l: &Layout) -> usize {
    8 * (l.padded / 8).max(1)
}

impl ProdCodec {
    /// The codec of `cfg` for layer `layer` of geometry `g`, its kernel resolved on `ctx` for
    /// `choice`. Errors: bits out of 2..=8, a bad m or D, a path the device cannot run, or a
    /// GPU path beyond what the kernel holds.
    pub fn new(
        ctx: &Context,
        cfg: ProdSide,
        g: Geometry,
        layer: usize,
        choice: PathChoice,
    ) -> Result<Self> {
        let prod = ProdLayout::new(g.heads, g.dim, cfg.bits, cfg.m)?;
        let l = Layout::new(g.heads, g.dim, cfg.bits - 1, 1)?;
        let quant = ctx.resolve(&kernels::TURBOQUANT_PROD_QUANT, choice)?;
        if quant.is_gpu() {
            crate::codec::require_gpu(ctx, "turboquant-prod cache")?;
            check_gpu(ctx, &l, prod.m)?;
        }
        let book = codebook(l.padded, l.bits)?;
        let (seed, layer) = (cfg.seed, layer as u64);
        let signs = sign_table(seed, layer, l.heads, STREAM_KEY_SIGNS, l.padded);
        let sketch = gaussian_table(seed, layer, STREAM_PROD_SKETCH, prod.m, l.padded);
        let mut tables = tables_of(
            seed,
            layer,
            STREAM_KEY_SIGNS,
            &l,
            std::slice::from_ref(&book),
        );
        tables.extend(gpu_sketch_table(&sketch, prod.m, l.padded));
        let lut = sketch_lut(ctx, l.dim, mse_prep_width(&l), l.levels() * 4, prod.m);
        Ok(Self {
            lut,
            cfg,
            prod,
            quant,
            l,
            streams: [
                Stream::words(
                    "codes",
                    StreamKind::Codes,
                    l.heads,
                    1,
                    l.code_words() / l.heads,
                ),
                Stream::words("signs", StreamKind::Codes, l.heads, 1, prod.sign_words()),
                Stream::halves("norms", StreamKind::Params, l.heads, 1),
                Stream::halves("residual_norms", StreamKind::Params, l.heads, 1),
            ],
            centroids: vec![book.centroids.clone()],
            book,
            signs,
            sketch,
            tables,
        })
    }

    /// The Prod layout (stage 1 and m).
    pub fn layout(&self) -> &ProdLayout {
        &self.prod
    }

    /// The stage-1 layout in the form the GPU plans take ([`plans::plan_prod_quant`]).
    pub fn stage1_layout(&self) -> &Layout {
        &self.l
    }

    /// The ±1 key signs `[P]` of head `h`.
    pub fn head_signs(&self, h: usize) -> &[f32] {
        &self.signs[h * self.l.padded..(h + 1) * self.l.padded]
    }

    /// The sketch S `[m][P]`.
    pub fn sketch(&self) -> &[f32] {
        &self.sketch
    }

    /// The stage-1 codebook (b − 1 bits).
    pub fn codebook(&self) -> &Codebook {
        &self.book
    }
}

impl Codec for ProdCodec {
    fn method(&self) -> &'static str {
        "turboquant-prod"
    }

    /// `bits=B,m=M,seed=0x…` (all three always: the spec wants the seed in the description).
    fn settings(&self) -> String {
        format!(
            "bits={},m={},seed={:#x}",
            self.cfg.bits, self.prod.m, self.cfg.seed
        )
    }

    fn side(&self) -> Side {
        Side::Keys
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
        // n and ρ: f16 halves (the padding half of an odd head count is zero, hence finite).
        crate::codec::check_f16_streams(&[
            ("stored turboquant-prod norms", words[2]),
            ("stored turboquant-prod residual norms", words[3]),
        ])
    }

    fn check_rows(&self, first: usize, rows: &[f16]) -> Result<()> {
        crate::codec::check_row_norms(rows, self.geometry(), first, "TurboQuant-Prod keys")
    }

    fn encode(
        &self,
        first: usize,
        blocks: usize,
        x: &dyn Fn(usize, usize, usize) -> f32,
        out: &mut [Vec<u32>],
    ) -> Result<()> {
        let [codes, signs, norms, rhos] = out else {
            return Err(Error::LengthMismatch {
                what: "turboquant-prod streams",
                expected: 4,
                actual: out.len(),
            });
        };
        let l = &self.l;
        let nw = l.norm_words();
        *codes = Vec::with_capacity(blocks * l.code_words());
        *signs = Vec::with_capacity(blocks * l.heads * self.prod.sign_words());
        *norms = vec![0u32; blocks * nw];
        *rhos = vec![0u32; blocks * nw];
        let mut row = vec![0f32; l.dim];
        for t in 0..blocks {
            for h in 0..l.heads {
                for (d, r) in row.iter_mut().enumerate() {
                    *r = x(t, h, d);
                }
                let (n, rho) = quantize_prod_vector(
                    &self.prod,
                    &row,
                    self.head_signs(h),
                    &self.sketch,
                    &self.book,
                    first + t,
                    h,
                    codes,
                    signs,
                )?;
                let (w, sh) = (t * nw + h / 2, 16 * (h % 2));
                norms[w] |= u32::from(n.to_bits()) << sh;
                rhos[w] |= u32::from(rho.to_bits()) << sh;
            }
        }
        Ok(())
    }

    /// The MSE stage's reconstruction `n·û₁` (the lowest squared error; the sketch only
    /// corrects inner products, see [`crate::cpu::turboquant::turboquant_dequant::ProdReconstruction`]).
    fn decode(&self, words: &Words<'_>, blocks: usize, out: &mut [f32]) -> Result<()> {
        let (h_n, d) = (self.l.heads, self.l.dim);
        for t in 0..blocks {
            for h in 0..h_n {
                self.row(words, t, h, &mut out[(t * h_n + h) * d..][..d]);
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
        let plan = plans::plan_prod_quant(&self.l, self.prod.m, blocks, src.rows(), dst.block);
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
                dst.stream(2),
                dst.stream(3),
                Bind::from(src.tables),
            ],
        )
    }

    /// `[q′ (P) | S q (m)]`: the rotated query, then the sketch of the zero-padded query.
    fn prepare_query(&self, h: usize, q: &[f32], out: &mut Vec<f32>) {
        prod_attend_k::prepare_prod_query(q, self.head_signs(h), &self.sketch, self.prod.m, out);
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
        let sw = self.prod.sign_words();
        prod_attend_k::score_prod(
            &self.l,
            prod_attend_k::ProdWords {
                codes: words[0],
                signs: &words[1][(j * self.l.heads + h) * sw..][..sw],
                norms: words[2],
                residual_norms: words[3],
            },
            &self.centroids,
            preps,
            j,
            h,
            scratch,
            out,
        );
    }

    fn row(&self, words: &Words<'_>, j: usize, h: usize, out: &mut [f32]) {
        let l = &self.l;
        let mut yhat = vec![0f32; l.padded];
        attend_k::decode(l, words[0], &self.centroids, j, h, &mut yhat);
        let n = f16::from_f32(norm_at(words[2], l.norm_words(), j, h));
        // Lengths are the layout's: the reconstruction cannot fail.
        if let Ok(x) = reconstruct(&yhat, self.head_signs(h), n, l.dim) {
            out.copy_from_slice(&x);
        }
    }

    fn attend_hooks(&self) -> &'static AttendHooks {
        &kernels::PROD_ATTEND_HOOKS
    }

    fn attend_spec(&self) -> Vec<(&'static str, u32)> {
        let l = &self.l;
        vec![
            ("ATT_KTQ_P", l.padded as u32),
            ("ATT_KTQ_LOG2P", plans::log2(l.padded)),
            ("ATT_KTQ_BITS", l.bits),
            ("ATT_KTQ_STAGES", 1),
            ("ATT_KTQ_C", inv_sqrt(l.padded).to_bits()),
            ("ATT_KQJL_M", self.prod.m as u32),
            ("ATT_KQJL_C", scale(self.prod.m).to_bits()),
            ("ATT_KQJL_LUT", u32::from(self.lut)),
        ]
    }

    /// `codes`, `signs`, `norms`, `residual_norms` (the streams' first words), then the stage-1
    /// centroids (f32, `[2^(b−1)]`: the MSL hook reads them from this constant buffer; the WGSL
    /// hook from workgroup memory).
    fn attend_uniform(&self, ranges: Option<&[(u64, u64)]>) -> Vec<u8> {
        let mut w: Vec<u32> = match ranges {
            Some(r) => r.iter().map(|(o, _)| (*o / 4) as u32).collect(),
            None => Vec::new(),
        };
        w.resize(4, 0);
        w.extend(self.centroids[0].iter().map(|x| x.to_bits()));
        bytemuck::cast_slice(&w).to_vec()
    }

    fn attend_prep_width(&self) -> usize {
        mse_prep_width(&self.l) + sketch_prep_width(self.prod.m, self.lut)
    }

    fn attend_note(&self) -> Option<String> {
        self.quant
            .is_gpu()
            .then(|| sketch_note(self.prod.m, self.lut))
    }

    fn attend_workgroup_bytes(&self) -> usize {
        self.l.levels() * 4
    }
}
