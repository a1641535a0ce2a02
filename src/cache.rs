//! A whole model's cache: one [`KvLayer`] per layer, each with its own method, on one
//! context and path.

use crate::context::{Context, PathChoice};
use crate::error::{Error, Result};
use crate::layer::KvLayer;
use crate::method::Method;
use crate::store::{GpuInput, Input, MemoryReport};

/// The caches of all layers of a model.
#[derive(Debug)]
pub struct Cache {
    layers: Vec<Box<dyn KvLayer>>,
}

impl Cache {
    /// `methods[l]` stores layer l; every layer has `heads` KV heads of width `dim`.
    pub fn new(
        ctx: &Context,
        heads: usize,
        dim: usize,
        methods: &[Method],
        path: PathChoice,
    ) -> Result<Self> {
        if methods.is_empty() {
            return Err(Error::Config("a cache needs at least one layer".into()));
        }
        let layers = methods
            .iter()
            .enumerate()
            .map(|(l, m)| m.layer_at(ctx, l, heads, dim, path))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { layers })
    }

    /// The same method for every layer.
    pub fn uniform(
        ctx: &Context,
        layers: usize,
        heads: usize,
        dim: usize,
        method: &Method,
        path: PathChoice,
    ) -> Result<Self> {
        Self::new(ctx, heads, dim, &vec![method.clone(); layers], path)
    }

    /// Number of layers.
    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// One layer.
    pub fn layer(&self, l: usize) -> Option<&dyn KvLayer> {
        self.layers.get(l).map(|b| &**b)
    }

    /// One layer, for everything [`KvLayer`] offers (recorded appends and attention, device
    /// input, snapshots, ...).
    pub fn layer_mut(&mut self, l: usize) -> Option<&mut dyn KvLayer> {
        match self.layers.get_mut(l) {
            Some(b) => Some(&mut **b),
            None => None,
        }
    }

    fn layer_or_error(&mut self, l: usize) -> Result<&mut dyn KvLayer> {
        let e = self.index_error(l);
        self.layer_mut(l).ok_or(e)
    }

    fn index_error(&self, l: usize) -> Error {
        Error::Shape {
            what: "layer index",
            message: format!("layer {l} of a {}-layer cache", self.layers.len()),
        }
    }

    /// Appends `[n, H, D]` K and V to layer `l` (see [`KvLayer::append`]).
    pub fn append(&mut self, l: usize, k: Input<'_>, v: Input<'_>) -> Result<()> {
        let e = self.index_error(l);
        self.layers.get_mut(l).ok_or(e)?.append(k, v)
    }

    /// Appends K and V that live in the application's device buffers to layer `l`, blocking
    /// (see [`KvLayer::append_gpu`]).
    pub fn append_gpu(&mut self, l: usize, k: GpuInput<'_>, v: GpuInput<'_>) -> Result<()> {
        self.layer_or_error(l)?.append_gpu(k, v)
    }

    /// Records an append of K and V from the application's device buffers to layer `l` into
    /// `encoder` (see [`KvLayer::encode_append_gpu`]; [`Cache::sync`] reports a rejected one).
    pub fn encode_append_gpu(
        &mut self,
        l: usize,
        encoder: &mut wgpu::CommandEncoder,
        k: GpuInput<'_>,
        v: GpuInput<'_>,
    ) -> Result<()> {
        self.layer_or_error(l)?.encode_append_gpu(encoder, k, v)
    }

    /// Records attention of the device buffer `q` `[tq, Hq, D]` over layer `l` into `out`
    /// (see [`KvLayer::encode_attend`]).
    #[allow(clippy::too_many_arguments)]
    pub fn encode_attend(
        &self,
        l: usize,
        encoder: &mut wgpu::CommandEncoder,
        q: &wgpu::Buffer,
        tq: usize,
        hq: usize,
        opts: &crate::AttendOptions,
        out: &wgpu::Buffer,
    ) -> Result<()> {
        self.layers
            .get(l)
            .ok_or_else(|| self.index_error(l))?
            .encode_attend(encoder, q, tq, hq, opts, out)
    }

    /// [`KvLayer::sync`] for every layer: the first layer's error, after every layer synced
    /// (each rolls back its own rejected appends).
    pub fn sync(&mut self) -> Result<()> {
        let mut first = Ok(());
        for layer in &mut self.layers {
            if let Err(e) = layer.sync() {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// Attention of `q` `[Tq, Hq, D]` over layer `l` (see [`KvLayer::attend`]).
    pub fn attend(
        &self,
        l: usize,
        q: &[f32],
        hq: usize,
        opts: &crate::AttendOptions,
    ) -> Result<Vec<f32>> {
        self.layers
            .get(l)
            .ok_or_else(|| self.index_error(l))?
            .attend(q, hq, opts)
    }

    /// [`KvLayer::prepare`] for every layer (blocking): every pipeline the cache's appends and
    /// attention will use is built. Layers of the same method share their pipelines, so the
    /// first of them does the work. For the background form, call
    /// [`KvLayer::prepare_async`] on one layer of each distinct method ([`Cache::layer`]).
    pub fn prepare(&self) -> Result<()> {
        self.layers.iter().try_for_each(|l| l.prepare())
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
