//! KIVI (Liu et al., ICML 2024): keys quantized per channel, values per token, the newest
//! tokens kept in f16 (../shared/spec/kivi.md).
//!
//! [`KiviLayer`] is one layer's compressed cache on one path (CPU memory or GPU buffers);
//! [`crate::cache::KiviCache`] holds one per layer. The storage layout is in [`layout`].
//!
//! **Input precision.** Inputs (f16 or f32) are rounded to f16 once, on entry: the residual
//! window stores f16 and quantization must not depend on how tokens were chunked, so every
//! token is quantized from its f16 value, whether it arrives in a prefill or waited in the
//! residual. An f32 input that f16 cannot hold (|x| > 65504) is rejected like NaN/Inf.

pub mod cpu_store;
pub mod gpu_store;
pub mod layout;
pub mod plans;
pub mod view;

use half::f16;

use crate::context::{Context, KernelPath, PathChoice};
use crate::error::{Error, Result};
use crate::gpu::registry;
pub use layout::{Layout, ParamStorage};

/// KIVI settings of one layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KiviConfig {
    /// Key bits, 1..=8.
    pub key_bits: u32,
    /// Key group: tokens per channel group, and the flush granularity (default 32).
    pub key_group: usize,
    /// Value bits, 1..=8.
    pub value_bits: u32,
    /// Value group: channels per group (default 32).
    pub value_group: usize,
    /// Residual window R in tokens (default 128; a multiple of `key_group`; may be 0).
    pub residual: usize,
    /// Storage of each group's (scale, lo) (default f16).
    pub params: ParamStorage,
}

impl Default for KiviConfig {
    fn default() -> Self {
        Self {
            key_bits: 2,
            key_group: 32,
            value_bits: 2,
            value_group: 32,
            residual: 128,
            params: ParamStorage::F16,
        }
    }
}

impl KiviConfig {
    /// Same bits, group and residual for keys and values.
    pub fn uniform(bits: u32, group: usize, residual: usize) -> Self {
        Self {
            key_bits: bits,
            key_group: group,
            value_bits: bits,
            value_group: group,
            residual,
            params: ParamStorage::F16,
        }
    }
}

/// One append's input: `[n, H, D]` row-major, f16 or f32.
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    /// f16 values.
    F16(&'a [f16]),
    /// f32 values (rounded to f16 on entry).
    F32(&'a [f32]),
}

impl Input<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Input::F16(x) => x.len(),
            Input::F32(x) => x.len(),
        }
    }

    /// Rounds to f16, rejecting NaN, ±Inf and values f16 cannot hold.
    pub(crate) fn to_f16(self, what: &'static str) -> Result<Vec<f16>> {
        let bad = |index: usize, value: f32| Error::NonFinite { what, index, value };
        match self {
            Input::F16(x) => match x.iter().position(|v| !v.is_finite()) {
                Some(i) => Err(bad(i, x[i].to_f32())),
                None => Ok(x.to_vec()),
            },
            Input::F32(x) => x
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let h = f16::from_f32(v);
                    if h.is_finite() { Ok(h) } else { Err(bad(i, v)) }
                })
                .collect(),
        }
    }
}

/// Bytes a cache holds, by kind. `held` counts allocated capacity; `payload` the part in use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// Packed key codes.
    pub key_codes: u64,
    /// Key (scale, lo) pairs.
    pub key_params: u64,
    /// Packed value codes.
    pub value_codes: u64,
    /// Value (scale, lo) pairs.
    pub value_params: u64,
    /// f16 residual K and V.
    pub residual: u64,
}

impl Memory {
    /// Sum of all kinds.
    pub fn total(&self) -> u64 {
        self.key_codes + self.key_params + self.value_codes + self.value_params + self.residual
    }

    fn add(&mut self, o: &Memory) {
        self.key_codes += o.key_codes;
        self.key_params += o.key_params;
        self.value_codes += o.value_codes;
        self.value_params += o.value_params;
        self.residual += o.residual;
    }
}

/// What [`KiviLayer::memory`] reports.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MemoryReport {
    /// Tokens held.
    pub tokens: usize,
    /// Of which quantized.
    pub quantized: usize,
    /// Bytes allocated, by kind.
    pub held: Memory,
    /// Bytes in use, by kind.
    pub payload: Memory,
    /// Bytes of the same K and V in f16: `2 · T · H · D · 2`.
    pub f16_bytes: u64,
}

impl MemoryReport {
    /// f16 bytes over held bytes (the honest compression ratio; `None` for an empty cache).
    pub fn ratio(&self) -> Option<f64> {
        (self.held.total() > 0 && self.tokens > 0)
            .then(|| self.f16_bytes as f64 / self.held.total() as f64)
    }

    /// f16 bytes over payload bytes (what the format achieves, ignoring spare capacity).
    pub fn payload_ratio(&self) -> Option<f64> {
        (self.payload.total() > 0 && self.tokens > 0)
            .then(|| self.f16_bytes as f64 / self.payload.total() as f64)
    }

    /// Adds another layer's report.
    pub fn add(&mut self, o: &MemoryReport) {
        self.tokens += o.tokens;
        self.quantized += o.quantized;
        self.held.add(&o.held);
        self.payload.add(&o.payload);
        self.f16_bytes += o.f16_bytes;
    }
}

/// The paths the KIVI kernels of one layer run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KiviPaths {
    /// `kivi_quant_keys`.
    pub quant_keys: KernelPath,
    /// `kivi_quant_values`.
    pub quant_values: KernelPath,
}

enum Store {
    Cpu(cpu_store::CpuStore),
    Gpu(Box<gpu_store::GpuStore>),
}

/// One layer's KIVI cache.
pub struct KiviLayer {
    layout: Layout,
    paths: KiviPaths,
    store: Store,
    tokens: usize,
}

impl std::fmt::Debug for KiviLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KiviLayer")
            .field("layout", &self.layout)
            .field("paths", &self.paths)
            .field("tokens", &self.tokens)
            .finish()
    }
}

impl KiviLayer {
    /// An empty layer cache for `heads` KV heads of width `dim`, on `ctx`'s default path.
    pub fn new(ctx: &Context, heads: usize, dim: usize, cfg: &KiviConfig) -> Result<Self> {
        Self::with_path(ctx, heads, dim, cfg, ctx.path())
    }

    /// An empty layer cache on an explicit path (an error when it cannot run here).
    pub fn with_path(
        ctx: &Context,
        heads: usize,
        dim: usize,
        cfg: &KiviConfig,
        choice: PathChoice,
    ) -> Result<Self> {
        let layout = Layout::new(heads, dim, cfg)?;
        let paths = KiviPaths {
            quant_keys: ctx.resolve(&registry::KIVI_QUANT_KEYS, choice)?,
            quant_values: ctx.resolve(gpu_store::values_kernel(&layout), choice)?,
        };
        if paths.quant_keys.is_gpu() != paths.quant_values.is_gpu() {
            return Err(Error::Config(
                "keys and values must both run on the CPU or both on the GPU".into(),
            ));
        }
        let store = if paths.quant_keys.is_gpu() {
            Store::Gpu(Box::new(gpu_store::GpuStore::new(
                ctx, layout, paths, choice,
            )?))
        } else {
            Store::Cpu(cpu_store::CpuStore::new(layout))
        };
        Ok(Self {
            layout,
            paths,
            store,
            tokens: 0,
        })
    }

    /// The fixed geometry.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The paths the kernels run on.
    pub fn paths(&self) -> KiviPaths {
        self.paths
    }

    /// Tokens appended so far.
    pub fn len(&self) -> usize {
        self.tokens
    }

    /// True before the first append.
    pub fn is_empty(&self) -> bool {
        self.tokens == 0
    }

    /// Tokens quantized so far (`Q` of the spec).
    pub fn quantized_len(&self) -> usize {
        self.layout.quantized_len(self.tokens)
    }

    /// Appends `n` tokens of K and V, each `[n, H, D]`. Whole key groups leaving the residual
    /// window are quantized (the spec's flush rule). Blocking on GPU paths. On any error the
    /// cache is unchanged.
    pub fn append(&mut self, k: Input<'_>, v: Input<'_>) -> Result<()> {
        let (k16, v16) = self.validate(k, v)?;
        if k16.is_empty() {
            return Ok(());
        }
        match &mut self.store {
            Store::Cpu(s) => s.append(self.tokens, &k16, &v16)?,
            Store::Gpu(s) => s.append(self.tokens, &k16, &v16)?,
        }
        self.tokens += k16.len() / self.layout.token_elems();
        Ok(())
    }

    /// Records the append into the application's `encoder` instead of submitting it (GPU
    /// paths). The cache counts the tokens at once: submit the encoder before the next kvpack
    /// call that reads this layer, and do not drop it unsubmitted (the cache would then hold
    /// unwritten storage). Input is validated as in [`Self::append`]. Not available for
    /// 1-bit codes with f16 parameters, whose flush needs the blocking status check.
    pub fn encode_append(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        k: Input<'_>,
        v: Input<'_>,
    ) -> Result<()> {
        let (k16, v16) = self.validate(k, v)?;
        let Store::Gpu(s) = &mut self.store else {
            return Err(Error::PathUnavailable {
                kernel: registry::KIVI_QUANT_KEYS.name,
                requested: self.paths.quant_keys.to_string(),
                reason: "encode_append() records GPU work; this layer runs on the CPU".into(),
            });
        };
        if k16.is_empty() {
            return Ok(());
        }
        s.encode_append(encoder, self.tokens, &k16, &v16)?;
        self.tokens += k16.len() / self.layout.token_elems();
        Ok(())
    }

    /// Checks shapes and values and rounds to f16 (nothing is stored).
    fn validate(&self, k: Input<'_>, v: Input<'_>) -> Result<(Vec<f16>, Vec<f16>)> {
        let row = self.layout.token_elems();
        if k.len() % row != 0 {
            return Err(Error::Shape {
                what: "k",
                message: format!(
                    "{} values is not a whole number of [H={}, D={}] rows",
                    k.len(),
                    self.layout.heads,
                    self.layout.dim
                ),
            });
        }
        if v.len() != k.len() {
            return Err(Error::Shape {
                what: "v",
                message: format!("v has {} values, k has {}", v.len(), k.len()),
            });
        }
        crate::cache::check_token_limit(self.tokens, k.len() / row)?;
        Ok((k.to_f16("k")?, v.to_f16("v")?))
    }

    /// Reconstructs the whole cache as f32 `[T, H, D]` (K, V): dequantized codes for
    /// `[0, Q)`, the f16 residual for `[Q, T)`. For tests and tools; attention never does this.
    pub fn reconstruct(&self) -> Result<(Vec<f32>, Vec<f32>)> {
        match &self.store {
            Store::Cpu(s) => Ok(s.reconstruct(self.tokens)),
            Store::Gpu(s) => s.reconstruct(self.tokens),
        }
    }

    /// Bytes held, by kind, and the ratio against f16 K and V of the same T, H, D.
    pub fn memory(&self) -> MemoryReport {
        let (held, payload) = match &self.store {
            Store::Cpu(s) => s.memory(self.tokens),
            Store::Gpu(s) => s.memory(self.tokens),
        };
        MemoryReport {
            tokens: self.tokens,
            quantized: self.quantized_len(),
            held,
            payload,
            f16_bytes: (2 * self.tokens * self.layout.token_elems() * 2) as u64,
        }
    }

    /// Attention of `q` `[Tq, Hq, D]` (query row i at position T − Tq + i) over this cache as
    /// stored: packed codes are reconstructed one token at a time, never the whole cache.
    /// Returns `[Tq, Hq, D]` f32. Blocking on GPU paths.
    pub fn attend(
        &self,
        q: &[f32],
        hq: usize,
        opts: &crate::attention::AttendOptions,
    ) -> Result<Vec<f32>> {
        let l = &self.layout;
        crate::attention::check_query(q.len(), hq, l.heads, l.dim, self.tokens, opts)?;
        crate::attention::check_finite(q)?;
        match &self.store {
            Store::Cpu(s) => Ok(crate::cpu::attend::attend(
                &s.view(self.tokens),
                q,
                hq,
                opts,
            )),
            Store::Gpu(s) => s.attend(self.tokens, q, hq, opts),
        }
    }

    /// Attention recorded into the application's `encoder`: `q` is a device buffer of
    /// `[tq, Hq, D]` f32 and `out` receives `[tq, Hq, D]` f32 (GPU paths only; the app
    /// submits). The queries cannot be checked for NaN here: they never reach the host.
    pub fn encode_attend(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        q: &wgpu::Buffer,
        tq: usize,
        hq: usize,
        opts: &crate::attention::AttendOptions,
        out: &wgpu::Buffer,
    ) -> Result<()> {
        let l = &self.layout;
        crate::attention::check_query(tq * hq * l.dim, hq, l.heads, l.dim, self.tokens, opts)?;
        match &self.store {
            Store::Gpu(s) => s.encode_attend(encoder, self.tokens, q, tq, hq, opts, out),
            Store::Cpu(_) => Err(Error::PathUnavailable {
                kernel: registry::ATTEND_KIVI.name,
                requested: self.paths.quant_keys.to_string(),
                reason: "encode_attend() records GPU work; this layer runs on the CPU".into(),
            }),
        }
    }

    /// The raw stored words, for parity tests: (key codes, key params, value codes,
    /// value params, residual K, residual V), each over the tokens in use, in the layout of
    /// [`layout`] (residual rows in token order `[Q, T)`).
    pub fn raw(&self) -> Result<RawKivi> {
        match &self.store {
            Store::Cpu(s) => Ok(s.raw(self.tokens)),
            Store::Gpu(s) => s.raw(self.tokens),
        }
    }
}

/// The stored words of one layer (see [`KiviLayer::raw`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawKivi {
    /// `[Q/Gk][H][D][key_group_words]`.
    pub key_codes: Vec<u32>,
    /// `[Q/Gk][H][D][param words]`.
    pub key_params: Vec<u32>,
    /// `[Q][H][value_row_words]`.
    pub value_codes: Vec<u32>,
    /// `[Q][H][value_groups][param words]`.
    pub value_params: Vec<u32>,
    /// f16 K of tokens `[Q, T)`.
    pub residual_k: Vec<f16>,
    /// f16 V of tokens `[Q, T)`.
    pub residual_v: Vec<f16>,
}
