//! The [`Codec`] of QJL keys: per token and head, the m sign bits of `S k` (stream `signs`,
//! `[tokens][H][m/32]` words, bit i of a row = σ_i LSB-first) and the f16 norm (stream
//! `norms`, `[tokens][ceil(H/2)]` words, head 2i in the low half); table: the layer's sketch
//! S `[m][D]` f32 (stream 3 of the spec's generator, head 0), uploaded transposed (Sᵀ `[D][m]`:
//! [`gpu_sketch_table`]). There is no reconstruction: attention estimates the scores from the
//! signs ([`crate::cpu::qjl::attend_k`]).

use half::f16;

use super::config::QjlSide;
use super::kernels;
use super::plans;
use crate::attention::kernel::AttendHooks;
use crate::codec::{Codec, EncodeSource, SegmentRef, Stream, Words};
use crate::context::{Context, KernelPath, PathChoice};
use crate::cpu::common::sketch::{gpu_sketch_table, scale, sign_row};
use crate::cpu::common::vector::{mat_vec, norm, store_norm};
use crate::cpu::qjl::{QjlLayout, attend_k, sketch_table};
use crate::error::{Error, Result};
use crate::gpu::{self, Bind};
use crate::store::memory::StreamKind;
use crate::store::{Geometry, Side};

/// The widest head and the most sketch rows the GPU kernels are written for.
pub const GPU_MAX_DIM: usize = 256;
/// See [`GPU_MAX_DIM`].
pub const GPU_MAX_M: usize = 512;

/// Whether the GPU attention scores a sketch of `m` rows by its nibble table (the prepared
/// query 5·m vec4 wide: 16 signed partial sums per 4 sketch rows, one lookup per 4 sign bits;
/// `ATT_KQJL_LUT` of wgsl/qjl/qjl_attend_k_common.wgsl) rather than by masked sums (m wide,
/// one select and add per bit): the table when it fits `ctx`'s workgroup storage beside the
/// key hook's other `prep_before` entries and `k_bytes`, for any value codec.
pub(crate) fn sketch_lut(
    ctx: &Context,
    dim: usize,
    prep_before: usize,
    k_bytes: usize,
    m: usize,
) -> bool {
    let limit = ctx.max_workgroup_storage_size() as usize;
    crate::attention::plan::key_prep_fits(dim, prep_before + 5 * m, k_bytes, limit)
}

/// The prepared query's width (vec4 entries) of a sketch of `m` rows in the form `lut` picks.
pub(crate) fn sketch_prep_width(m: usize, lut: bool) -> usize {
    if lut { 5 * m } else { m }
}

/// What [`sketch_lut`] chose, for `describe()`.
pub(crate) fn sketch_note(m: usize, lut: bool) -> String {
    if lut {
        format!(
            "GPU scores by a nibble table ({} bytes of workgroup memory)",
            16 * sketch_prep_width(m, true)
        )
    } else {
        format!(
            "GPU scores by masked sums (the nibble table, {} bytes of workgroup memory, does not fit beside the kernel's own)",
            16 * sketch_prep_width(m, true)
        )
    }
}

/// QJL keys of one layer (see the module docs).
#[derive(Debug)]
pub struct QjlCodec {
    cfg: QjlSide,
    l: QjlLayout,
    layer: usize,
    encode: KernelPath,
    streams: [Stream; 2],
    /// S `[m][D]`.
    sketch: Vec<f32>,
    /// Its f32 bits (the table the kernels read).
    tables: Vec<u32>,
    /// Whether GPU attention uses the nibble table ([`sketch_lut`]).
    lut: bool,
}

impl QjlCodec {
    /// The codec of `cfg` for layer `layer` (its sketch's stream index) of geometry `g`, its
    /// kernel resolved on `ctx` for `choice`. Errors: a bad m, a path the device cannot run,
    /// or a GPU path beyond what the kernels hold.
    pub fn new(
        ctx: &Context,
        cfg: QjlSide,
        g: Geometry,
        layer: usize,
        choice: PathChoice,
    ) -> Result<Self> {
        let l = QjlLayout::new(g.heads, g.dim, Some(cfg.rows(g.dim)))?;
        let encode = ctx.resolve(&kernels::QJL_ENCODE, choice)?;
        if encode.is_gpu() {
            crate::codec::require_gpu(ctx, "qjl cache")?;
            for (what, needed, limit) in [
                ("QJL head width D on a GPU path", l.dim, GPU_MAX_DIM),
                ("QJL sketch rows m on a GPU path", l.m, GPU_MAX_M),
            ] {
                if needed > limit {
                    return Err(Error::Limit {
                        what,
                        needed: needed as u64,
                        limit: limit as u64,
                    });
                }
            }
        }
        let sketch = sketch_table(cfg.seed, layer as u64, &l);
        let tables = gpu_sketch_table(&sketch, l.m, l.dim);
        let lut = sketch_lut(ctx, l.dim, 0, 0, l.m);
        Ok(Self {
            lut,
            cfg,
            l,
            layer,
            encode,
            streams: [
                Stream::words("signs", StreamKind::Codes, l.heads, 1, l.sign_words()),
                Stream::halves("norms", StreamKind::Params, l.heads, 1),
            ],
            sketch,
            tables,
        })
    }

    /// The layout (H, D, m).
    pub fn layout(&self) -> &QjlLayout {
        &self.l
    }

    /// The layer index its sketch was drawn for.
    pub fn layer(&self) -> usize {
        self.layer
    }

    /// The sketch S `[m][D]`.
    pub fn sketch(&self) -> &[f32] {
        &self.sketch
    }
}

impl Codec for QjlCodec {
    fn method(&self) -> &'static str {
        "qjl"
    }

    /// `m=M,seed=0x…` (both always: the spec wants them in the cache's description).
    fn settings(&self) -> String {
        format!("m={},seed={:#x}", self.l.m, self.cfg.seed)
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
        self.encode
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
        crate::codec::check_f16_streams(&[("stored qjl norms", words[1])])
    }

    fn check_rows(&self, first: usize, rows: &[f16]) -> Result<()> {
        crate::codec::check_row_norms(rows, self.geometry(), first, "QJL key")
    }

    fn encode(
        &self,
        first: usize,
        blocks: usize,
        x: &dyn Fn(usize, usize, usize) -> f32,
        out: &mut [Vec<u32>],
    ) -> Result<()> {
        let [signs, norms] = out else {
            return Err(Error::LengthMismatch {
                what: "qjl streams",
                expected: 2,
                actual: out.len(),
            });
        };
        let l = &self.l;
        let nw = l.heads.div_ceil(2);
        *signs = Vec::with_capacity(blocks * l.heads * l.sign_words());
        *norms = vec![0u32; blocks * nw];
        let mut key = vec![0f32; l.dim];
        for t in 0..blocks {
            for h in 0..l.heads {
                for (d, k) in key.iter_mut().enumerate() {
                    *k = x(t, h, d);
                }
                let n = store_norm(norm(&key), "QJL key", first + t, h)?;
                norms[t * nw + h / 2] |= u32::from(n.to_bits()) << (16 * (h % 2));
                signs.extend(sign_row(&mat_vec(&self.sketch, l.m, l.dim, &key)?));
            }
        }
        Ok(())
    }

    /// QJL keys have no reconstruction: always [`Error::Config`].
    fn decode(&self, _words: &Words<'_>, _blocks: usize, _out: &mut [f32]) -> Result<()> {
        Err(Error::Config(
            "qjl keys have no reconstruction (only sign bits of a projection and a norm are stored; attention estimates the scores from them)".into(),
        ))
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
        let plan = plans::plan_encode(&self.l, blocks, src.rows(), dst.block);
        gpu::encode_plan_bound(
            ctx,
            enc,
            self.encode,
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

    fn prepare_query(&self, _h: usize, q: &[f32], out: &mut Vec<f32>) {
        attend_k::prepare_query(&self.sketch, self.l.m, q, out);
    }

    fn score(
        &self,
        words: &Words<'_>,
        preps: &[Vec<f32>],
        j: usize,
        h: usize,
        _scratch: &mut Vec<f32>,
        out: &mut [f32],
    ) {
        attend_k::score(words[0], words[1], self.l.heads, preps, j, h, out);
    }

    /// No reconstruction: NaN (the score hook is overridden; QJL never stores values).
    fn row(&self, _words: &Words<'_>, _j: usize, _h: usize, out: &mut [f32]) {
        out.fill(f32::NAN);
    }

    fn attend_hooks(&self) -> &'static AttendHooks {
        &kernels::ATTEND_HOOKS
    }

    fn attend_spec(&self) -> Vec<(&'static str, u32)> {
        vec![
            ("ATT_KQJL_M", self.l.m as u32),
            ("ATT_KQJL_C", scale(self.l.m).to_bits()),
            ("ATT_KQJL_LUT", u32::from(self.lut)),
        ]
    }

    fn attend_prep_width(&self) -> usize {
        sketch_prep_width(self.l.m, self.lut)
    }

    fn attend_note(&self) -> Option<String> {
        self.encode
            .is_gpu()
            .then(|| sketch_note(self.l.m, self.lut))
    }
}
