//! The [`Codec`] of one VecInfer side (keys or values): per token and head, one packed row of
//! n_sub = P/d_s indices (log2 C bits each, bitpack.md) into its layer's calibrated codebook
//! of the head (stream `codes`, `[tokens][H][row_words]`); tables (counted once per layer):
//! keys λ `[H][D]` then the codebooks `[H][C][d_s]` (f32 bits), values the codebooks only.
//! Attention (docs/contracts/vecinfer.md): the key hook's prepared query is the LUT
//! `[n_sub][C]` of q̃ = H_P·(q ⊙ λ)/√P and a score is the sum of n_sub entries; values
//! accumulate the codebook rows in the transformed space (P wide) and the normalized output
//! is transformed back once.
//!
//! Paths: the CPU reference, and on GPU paths the fused quantize kernel `vecinfer_quant` and
//! the LUT attention hooks ([`kernels::ATTEND_HOOKS`], WGSL subgroup and workgroup variants,
//! MSL). The GPU LUT is held in workgroup memory, 4 query vectors × n_sub × C entries: f32
//! where the attention kernel's storage with it fits the context's workgroup-storage limit,
//! else f16 (error stated in wgsl/vecinfer/attend_k.wgsl; the layer's `describe()` names the
//! variant). A CPU context reports WebGPU's default limit (16 KiB): the kernels of a CPU-built
//! codec (the kernel tests) are specialized as on such a device. Where not even the f16 LUT
//! fits, the keys are scored from the head's codebook in workgroup memory ([`LutForm`]);
//! where not even that fits, attention on that device is [`Error::Limit`] (checked when a call
//! is planned).

use crate::attention::kernel::AttendHooks;
use crate::attention::plan::VALUE_HOOK_RESERVE;
use crate::codec::{Codec, EncodeSource, SegmentRef, Stream, Words};
use crate::context::{Context, KernelPath, PathChoice};
use crate::cpu::vecinfer::attend_k::{lut_score, prepare_query};
use crate::cpu::vecinfer::attend_v::{accumulate, finish};
use crate::cpu::vecinfer::transform::{
    inv_sqrt, inverse_key, inverse_value, padded_dim, transform_key, transform_value,
};
use crate::cpu::vecinfer::vecinfer_dequant::reconstruct_transformed;
use crate::cpu::vecinfer::vecinfer_quant::{pack_row, quantize_vector, row_words};
use crate::error::{Error, Result};
use crate::gpu::{self, Bind};
use crate::store::memory::StreamKind;
use crate::store::{Geometry, Side};

use super::config::VecSide;
use super::kernels;
use super::plans::{self, QuantLayout};

/// One VecInfer side (see the module docs).
#[derive(Debug)]
pub struct VecInferCodec {
    cfg: VecSide,
    g: Geometry,
    /// What its quantize kernel is specialized on.
    quant: QuantLayout,
    /// The path of its quantize kernel.
    encode: KernelPath,
    layer: usize,
    padded: usize,
    n_sub: usize,
    row_words: usize,
    streams: [Stream; 1],
    /// λ `[H][D]` (keys; empty for values).
    lambda: Vec<f32>,
    /// Codebooks `[H][C][d_s]`.
    codebooks: Vec<f32>,
    tables: Vec<u32>,
    /// How the GPU attention scores keys (keys only; see the module docs).
    form: LutForm,
}

/// How VecInfer's GPU attention scores its keys, chosen at construction from the device's
/// workgroup storage ([`lut_form`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LutForm {
    /// The LUT in f32 (16 bytes an entry).
    F32,
    /// The LUT in f16 (8 bytes an entry; vecinfer.md's 1e-3 bound).
    F16,
    /// No LUT: the head's codebook `[C][d_s]` f32 in workgroup memory, each sub-vector's score
    /// ⟨q̃_s, c⟩ computed per token as the f32 LUT's entry would be (same products, same
    /// order): where not even the f16 LUT fits (e.g. bits=2 at D = 128: 64 KiB).
    Codebook,
}

/// Workgroup memory (bytes) of the GPU LUT: n_sub·C entries of the 4 query vectors a
/// workgroup serves, f32 (16 bytes an entry) or f16 (8).
pub fn lut_bytes(n_sub: usize, centroids: usize, f16: bool) -> usize {
    n_sub * centroids * if f16 { 8 } else { 16 }
}

/// Workgroup memory (bytes) of the codebook form: `[C][d_s]` f32.
pub fn codebook_bytes(centroids: usize, sub_dim: usize) -> usize {
    centroids * sub_dim * 4
}

/// The form of the key scores on a device with `limit` bytes of workgroup storage: the f32
/// LUT where it fits beside the attention kernel's own storage (D wide, prepared query P wide,
/// values up to P wide) and the reserve for a value hook, else the f16 LUT where that fits,
/// else the codebook (which may not fit either: attention is then a typed `Limit` error).
pub fn lut_form(
    dim: usize,
    padded: usize,
    n_sub: usize,
    centroids: usize,
    limit: usize,
) -> LutForm {
    let core = crate::attention::plan::workgroup_bytes(dim, padded, padded.max(dim));
    let fits = |bytes: usize| core + VALUE_HOOK_RESERVE + bytes <= limit;
    if fits(lut_bytes(n_sub, centroids, false)) {
        LutForm::F32
    } else if fits(lut_bytes(n_sub, centroids, true)) {
        LutForm::F16
    } else {
        LutForm::Codebook
    }
}

/// Whether the LUT must be f16 or smaller ([`lut_form`] is not [`LutForm::F32`]).
pub fn lut_needs_f16(
    dim: usize,
    padded: usize,
    n_sub: usize,
    centroids: usize,
    limit: usize,
) -> bool {
    lut_form(dim, padded, n_sub, centroids, limit) != LutForm::F32
}

impl VecInferCodec {
    /// The codec of `cfg` for layer `layer` of geometry `g` on `choice`. Errors: a calibration
    /// made for another shape or with fewer layers, d_s not dividing P, a GPU path without a
    /// device, the quantize kernel's codebook beyond the workgroup-storage limit.
    pub fn new(
        ctx: &Context,
        cfg: VecSide,
        g: Geometry,
        layer: usize,
        choice: PathChoice,
    ) -> Result<Self> {
        let m = &cfg.calib.meta.model;
        if m.kv_heads != g.heads || m.head_dim != g.dim {
            return Err(Error::Calibration {
                path: cfg.calib_path.display().to_string(),
                message: format!(
                    "made for {} ({} KV heads, head_dim {}), used for a layer of {} heads, head_dim {}",
                    m.name, m.kv_heads, m.head_dim, g.heads, g.dim
                ),
            });
        }
        let padded = padded_dim(g.dim)?;
        let n_sub = cfg.preset.n_sub(padded)?;
        let t = cfg
            .calib
            .vecinfer_layer(layer, cfg.preset, cfg.preset)
            .map_err(|e| match e {
                Error::Calibration { message, .. } => Error::Calibration {
                    path: cfg.calib_path.display().to_string(),
                    message,
                },
                e => e,
            })?;
        let (lambda, codebooks) = match cfg.side {
            Side::Keys if cfg.centered => cfg
                .calib
                .vecinfer_centered_keys(layer, cfg.preset)
                .map_err(|e| match e {
                    Error::Calibration { message, .. } => Error::Calibration {
                        path: cfg.calib_path.display().to_string(),
                        message,
                    },
                    e => e,
                })?,
            Side::Keys => (t.lambda, t.keys),
            Side::Values => (Vec::new(), t.values),
        };
        let tables = lambda
            .iter()
            .chain(&codebooks)
            .map(|x| x.to_bits())
            .collect();
        let rw = row_words(n_sub, cfg.preset);
        let quant = QuantLayout {
            heads: g.heads,
            dim: g.dim,
            padded,
            preset: cfg.preset,
            keys: cfg.side == Side::Keys,
        };
        let encode = ctx.resolve(&kernels::VECINFER_QUANT, choice)?;
        if encode.is_gpu() {
            crate::codec::require_gpu(ctx, "vecinfer cache")?;
            let needed = plans::quant_workgroup_bytes(&quant);
            let limit = ctx.max_workgroup_storage_size() as usize;
            if needed > limit {
                return Err(Error::Limit {
                    what: "vecinfer_quant workgroup memory (codebook C·d_s, P, n_sub)",
                    needed: needed as u64,
                    limit: limit as u64,
                });
            }
        }
        let form = match cfg.side {
            Side::Keys => lut_form(
                g.dim,
                padded,
                n_sub,
                cfg.preset.centroids,
                ctx.max_workgroup_storage_size() as usize,
            ),
            Side::Values => LutForm::F32,
        };
        Ok(Self {
            form,
            quant,
            encode,
            streams: [Stream::words("codes", StreamKind::Codes, g.heads, 1, rw)],
            cfg,
            g,
            layer,
            padded,
            n_sub,
            row_words: rw,
            lambda,
            codebooks,
            tables,
        })
    }

    /// The layer whose tables it holds.
    pub fn layer(&self) -> usize {
        self.layer
    }

    /// Sub-vectors per vector.
    pub fn n_sub(&self) -> usize {
        self.n_sub
    }

    /// What its quantize kernel is specialized on: the layout [`plans::plan_quant`] plans a
    /// `vecinfer_quant` dispatch of (with [`Codec::tables`] bound as the tables and
    /// [`Codec::path`] the kernel's path), e.g. for a bench that dispatches it directly.
    pub fn quant_layout(&self) -> &QuantLayout {
        &self.quant
    }

    /// Whether its GPU attention LUT is f16 (keys; see the module docs).
    pub fn lut_is_f16(&self) -> bool {
        self.form == LutForm::F16
    }

    /// How its GPU attention scores keys ([`lut_form`]).
    pub fn lut_form(&self) -> LutForm {
        self.form
    }

    /// Workgroup memory (bytes) its key scores take in their form.
    fn score_bytes(&self) -> usize {
        let p = self.cfg.preset;
        match self.form {
            LutForm::F32 => lut_bytes(self.n_sub, p.centroids, false),
            LutForm::F16 => lut_bytes(self.n_sub, p.centroids, true),
            LutForm::Codebook => codebook_bytes(p.centroids, p.sub_dim),
        }
    }

    fn head_lambda(&self, h: usize) -> &[f32] {
        &self.lambda[h * self.g.dim..][..self.g.dim]
    }

    fn head_codebook(&self, h: usize) -> &[f32] {
        let n = self.cfg.preset.centroids * self.cfg.preset.sub_dim;
        &self.codebooks[h * n..][..n]
    }

    fn row_of<'a>(&self, words: &'a [u32], j: usize, h: usize) -> &'a [u32] {
        &words[(j * self.g.heads + h) * self.row_words..][..self.row_words]
    }
}

impl Codec for VecInferCodec {
    fn method(&self) -> &'static str {
        "vecinfer"
    }

    fn settings(&self) -> String {
        format!(
            "bits={} (d_s {}, C {}),calib={}",
            self.cfg.bits,
            self.cfg.preset.sub_dim,
            self.cfg.preset.centroids,
            self.cfg.calib_path.display()
        )
    }

    fn side(&self) -> Side {
        self.cfg.side
    }

    fn geometry(&self) -> Geometry {
        self.g
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

    fn encode(
        &self,
        _first: usize,
        blocks: usize,
        x: &dyn Fn(usize, usize, usize) -> f32,
        out: &mut [Vec<u32>],
    ) -> Result<()> {
        let [codes] = out else {
            return Err(Error::LengthMismatch {
                what: "vecinfer streams",
                expected: 1,
                actual: out.len(),
            });
        };
        let (h_n, d) = (self.g.heads, self.g.dim);
        *codes = vec![0u32; blocks * h_n * self.row_words];
        let (mut v, mut t, mut idx) = (vec![0f32; d], Vec::new(), vec![0u32; self.n_sub]);
        for tok in 0..blocks {
            for h in 0..h_n {
                for (i, o) in v.iter_mut().enumerate() {
                    *o = x(tok, h, i);
                }
                match self.cfg.side {
                    Side::Keys => transform_key(&v, self.head_lambda(h), self.padded, &mut t),
                    Side::Values => transform_value(&v, self.padded, &mut t),
                }
                quantize_vector(&t, self.head_codebook(h), self.cfg.preset, &mut idx);
                let at = (tok * h_n + h) * self.row_words;
                pack_row(
                    &idx,
                    self.cfg.preset.index_bits(),
                    &mut codes[at..at + self.row_words],
                );
            }
        }
        Ok(())
    }

    fn decode(&self, words: &Words<'_>, blocks: usize, out: &mut [f32]) -> Result<()> {
        let d = self.g.dim;
        for j in 0..blocks {
            for h in 0..self.g.heads {
                self.row(words, j, h, &mut out[(j * self.g.heads + h) * d..][..d]);
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
        let plan = plans::plan_quant(&self.quant, blocks, src.rows(), dst.block);
        gpu::encode_plan_bound(
            ctx,
            enc,
            self.encode,
            &plan,
            &[
                Bind::from(src.ring),
                src.incoming_bind(),
                dst.stream(0),
                Bind::from(src.tables),
            ],
        )
    }

    fn prepare_query(&self, h: usize, q: &[f32], out: &mut Vec<f32>) {
        prepare_query(
            q,
            self.head_lambda(h),
            self.head_codebook(h),
            self.cfg.preset,
            self.padded,
            out,
        );
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
        let row = self.row_of(words[0], j, h);
        for (o, lut) in out.iter_mut().zip(preps) {
            *o = lut_score(lut, row, self.cfg.preset);
        }
    }

    fn value_dim(&self) -> usize {
        self.padded
    }

    fn value(&self, words: &Words<'_>, j: usize, h: usize, out: &mut [f32]) {
        out.fill(0.0);
        accumulate(
            out,
            1.0,
            self.row_of(words[0], j, h),
            self.head_codebook(h),
            self.cfg.preset,
        );
    }

    fn finish_output(&self, _h: usize, acc: &[f32], out: &mut [f32]) {
        let mut a = acc.to_vec();
        finish(&mut a, out);
    }

    fn row(&self, words: &Words<'_>, j: usize, h: usize, out: &mut [f32]) {
        let mut t = vec![0f32; self.padded];
        reconstruct_transformed(
            self.row_of(words[0], j, h),
            self.head_codebook(h),
            self.cfg.preset,
            &mut t,
        );
        match self.cfg.side {
            Side::Keys => inverse_key(&t, self.head_lambda(h), out),
            Side::Values => {
                inverse_value(&mut t);
                out.copy_from_slice(&t[..self.g.dim]);
            }
        }
    }

    fn attend_hooks(&self) -> &'static AttendHooks {
        &kernels::ATTEND_HOOKS
    }

    fn attend_spec(&self) -> Vec<(&'static str, u32)> {
        let (p, ds, b) = (
            self.padded as u32,
            self.cfg.preset.sub_dim as u32,
            self.cfg.preset.index_bits(),
        );
        let (lg, c) = (p.trailing_zeros(), inv_sqrt(self.padded).to_bits());
        match self.cfg.side {
            Side::Keys => vec![
                ("ATT_KVI_P", p),
                ("ATT_KVI_LOG2P", lg),
                ("ATT_KVI_DS", ds),
                ("ATT_KVI_BITS", b),
                ("ATT_KVI_LUT16", u32::from(self.form == LutForm::F16)),
                ("ATT_KVI_CB", u32::from(self.form == LutForm::Codebook)),
                ("ATT_KVI_C", c),
            ],
            Side::Values => vec![
                ("ATT_VVI_P", p),
                ("ATT_VVI_LOG2P", lg),
                ("ATT_VVI_DS", ds),
                ("ATT_VVI_BITS", b),
                ("ATT_VVI_C", c),
            ],
        }
    }

    fn attend_value_space_out(&self) -> bool {
        false
    }

    fn attend_prep_width(&self) -> usize {
        match self.cfg.side {
            Side::Keys => self.padded,
            Side::Values => 0,
        }
    }

    fn attend_workgroup_bytes(&self) -> usize {
        match self.cfg.side {
            Side::Keys => self.score_bytes(),
            Side::Values => 0,
        }
    }

    fn attend_note(&self) -> Option<String> {
        (self.cfg.side == Side::Keys).then(|| match self.form {
            LutForm::Codebook => format!(
                "GPU scores from the codebook ({} bytes of workgroup memory; the f16 LUT's {} do not fit)",
                self.score_bytes(),
                lut_bytes(self.n_sub, self.cfg.preset.centroids, true)
            ),
            f => format!(
                "GPU LUT {} ({} bytes of workgroup memory)",
                if f == LutForm::F16 { "f16" } else { "f32" },
                self.score_bytes()
            ),
        })
    }
}
