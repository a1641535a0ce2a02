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

    /// Bytes held by all layers, and the ratio against f16 K and V.
    pub fn memory(&self) -> MemoryReport {
        let mut total = MemoryReport::default();
        for l in &self.layers {
            total.add(&l.memory());
        }
        total
    }
}
