//! The compressed KV cache of a whole model: one [`KiviLayer`] per layer, each with its own
//! configuration, on one context and path.

use crate::context::{Context, PathChoice};
use crate::error::{Error, Result};
use crate::kivi::{Input, KiviConfig, KiviLayer, MemoryReport};

/// A KIVI cache over `layers` layers.
#[derive(Debug)]
pub struct KiviCache {
    layers: Vec<KiviLayer>,
}

impl KiviCache {
    /// `configs[l]` configures layer l; every layer has `heads` KV heads of width `dim`.
    pub fn new(
        ctx: &Context,
        heads: usize,
        dim: usize,
        configs: &[KiviConfig],
        path: PathChoice,
    ) -> Result<Self> {
        if configs.is_empty() {
            return Err(Error::Config("a cache needs at least one layer".into()));
        }
        let layers = configs
            .iter()
            .map(|c| KiviLayer::with_path(ctx, heads, dim, c, path))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { layers })
    }

    /// The same configuration for every layer.
    pub fn uniform(
        ctx: &Context,
        layers: usize,
        heads: usize,
        dim: usize,
        cfg: &KiviConfig,
        path: PathChoice,
    ) -> Result<Self> {
        Self::new(ctx, heads, dim, &vec![*cfg; layers], path)
    }

    /// Number of layers.
    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// One layer.
    pub fn layer(&self, l: usize) -> Option<&KiviLayer> {
        self.layers.get(l)
    }

    /// Appends `[n, H, D]` K and V to layer `l` (see [`KiviLayer::append`]).
    pub fn append(&mut self, l: usize, k: Input<'_>, v: Input<'_>) -> Result<()> {
        let n = self.layers.len();
        self.layers
            .get_mut(l)
            .ok_or_else(|| Error::Shape {
                what: "layer index",
                message: format!("layer {l} of a {n}-layer cache"),
            })?
            .append(k, v)
    }

    /// Attention of `q` `[Tq, Hq, D]` over layer `l` (see [`KiviLayer::attend`]).
    pub fn attend(
        &self,
        l: usize,
        q: &[f32],
        hq: usize,
        opts: &crate::AttendOptions,
    ) -> Result<Vec<f32>> {
        let n = self.layers.len();
        self.layers
            .get(l)
            .ok_or_else(|| Error::Shape {
                what: "layer index",
                message: format!("layer {l} of a {n}-layer cache"),
            })?
            .attend(q, hq, opts)
    }

    /// Bytes held by all layers, and the ratio against f16 K and V.
    pub fn memory(&self) -> MemoryReport {
        let mut total = MemoryReport::default();
        for l in &self.layers {
            total.add(&l.memory());
        }
        total
    }
}

/// One layer's cache, whatever the method: what a model's attention needs from it. Lets
/// tools and models swap methods (and the f16 baseline) without knowing their storage.
pub trait KvLayer: Send + Sync + std::fmt::Debug {
    /// Appends `[n, H, D]` K and V.
    fn append(&mut self, k: Input<'_>, v: Input<'_>) -> Result<()>;
    /// [`KvLayer::append`] recorded into the caller's encoder (GPU layers; the caller
    /// submits it before the next call that reads or appends).
    fn encode_append(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        k: Input<'_>,
        v: Input<'_>,
    ) -> Result<()>;
    /// Attention of host queries `[Tq, Hq, D]`.
    fn attend(&self, q: &[f32], hq: usize, opts: &crate::AttendOptions) -> Result<Vec<f32>>;
    /// Attention recorded into the caller's encoder (GPU paths).
    fn encode_attend(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        q: &wgpu::Buffer,
        tq: usize,
        hq: usize,
        opts: &crate::AttendOptions,
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
    /// The concrete layer, for callers that need method-specific access (e.g. the stored
    /// words of a KIVI layer to check a GPU against the CPU reference on the same codes).
    fn as_any(&self) -> &dyn std::any::Any;
}

impl KvLayer for KiviLayer {
    fn append(&mut self, k: Input<'_>, v: Input<'_>) -> Result<()> {
        KiviLayer::append(self, k, v)
    }
    fn encode_append(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        k: Input<'_>,
        v: Input<'_>,
    ) -> Result<()> {
        KiviLayer::encode_append(self, encoder, k, v)
    }
    fn attend(&self, q: &[f32], hq: usize, opts: &crate::AttendOptions) -> Result<Vec<f32>> {
        KiviLayer::attend(self, q, hq, opts)
    }
    fn encode_attend(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        q: &wgpu::Buffer,
        tq: usize,
        hq: usize,
        opts: &crate::AttendOptions,
        out: &wgpu::Buffer,
    ) -> Result<()> {
        KiviLayer::encode_attend(self, encoder, q, tq, hq, opts, out)
    }
    fn memory(&self) -> MemoryReport {
        KiviLayer::memory(self)
    }
    fn len(&self) -> usize {
        KiviLayer::len(self)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl KvLayer for crate::F16Layer {
    fn append(&mut self, k: Input<'_>, v: Input<'_>) -> Result<()> {
        crate::F16Layer::append(self, k, v)
    }
    fn encode_append(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        k: Input<'_>,
        v: Input<'_>,
    ) -> Result<()> {
        crate::F16Layer::encode_append(self, encoder, k, v)
    }
    fn attend(&self, q: &[f32], hq: usize, opts: &crate::AttendOptions) -> Result<Vec<f32>> {
        crate::F16Layer::attend(self, q, hq, opts)
    }
    fn encode_attend(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        q: &wgpu::Buffer,
        tq: usize,
        hq: usize,
        opts: &crate::AttendOptions,
        out: &wgpu::Buffer,
    ) -> Result<()> {
        crate::F16Layer::encode_attend(self, encoder, q, tq, hq, opts, out)
    }
    fn memory(&self) -> MemoryReport {
        crate::F16Layer::memory(self)
    }
    fn len(&self) -> usize {
        crate::F16Layer::len(self)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A cache method by name: `f16`, or `kivi-B` (B-bit keys and values, G = 32, R = 128;
/// `kivi-B-G-R` sets the group and residual too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// The uncompressed baseline.
    F16,
    /// KIVI with this configuration.
    Kivi(KiviConfig),
}

impl Method {
    /// Parses `f16`, `kivi-4`, `kivi-2-32-128`, ...
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || Error::Config(format!("unknown method `{s}` (f16, kivi-B or kivi-B-G-R)"));
        if s == "f16" {
            return Ok(Self::F16);
        }
        let rest = s.strip_prefix("kivi-").ok_or_else(bad)?;
        let nums: Vec<usize> = rest
            .split('-')
            .map(|x| x.parse().map_err(|_| bad()))
            .collect::<Result<_>>()?;
        let (bits, group, residual) = match nums[..] {
            [b] => (b, 32, 128),
            [b, g, r] => (b, g, r),
            _ => return Err(bad()),
        };
        Ok(Self::Kivi(KiviConfig::uniform(
            u32::try_from(bits).map_err(|_| bad())?,
            group,
            residual,
        )))
    }

    /// A new empty layer of this method.
    pub fn layer(
        &self,
        ctx: &Context,
        heads: usize,
        dim: usize,
        path: PathChoice,
    ) -> Result<Box<dyn KvLayer>> {
        Ok(match self {
            Self::F16 => Box::new(crate::F16Layer::with_path(ctx, heads, dim, path)?),
            Self::Kivi(cfg) => Box::new(KiviLayer::with_path(ctx, heads, dim, cfg, path)?),
        })
    }
}

/// Capacity after growing to hold `need` items from `have`: at least 1/8 more than before
/// (amortized O(1) appends) but never the doubling of `Vec`, so the memory a cache reports as
/// held stays within about 12.5 % of the bytes its data takes.
/// Checks that a layer holding `tokens` can take `n` more: positions travel as u32 in the
/// kernels' uniforms, kept below 2^31 for headroom.
pub(crate) fn check_token_limit(tokens: usize, n: usize) -> Result<()> {
    let limit = u32::MAX as usize / 2;
    if tokens.checked_add(n).is_none_or(|t| t >= limit) {
        return Err(crate::Error::Limit {
            what: "tokens in one layer",
            needed: tokens.saturating_add(n) as u64,
            limit: limit as u64,
        });
    }
    Ok(())
}

pub(crate) fn grown_capacity(have: usize, need: usize) -> usize {
    need.max(have + have / 8)
}

/// Appends `x` to `v`, growing its capacity by [`grown_capacity`] instead of doubling.
pub(crate) fn extend_tight<T: Copy>(v: &mut Vec<T>, x: &[T]) {
    let need = v.len() + x.len();
    if need > v.capacity() {
        v.reserve_exact(grown_capacity(v.capacity(), need) - v.len());
    }
    v.extend_from_slice(x);
}
