//! The pipeline cache's types: what a pipeline is specialized on, its key, and the built
//! pipeline (one cache per device, shared by every handle of a context).

use std::collections::HashMap;
use std::sync::Arc;

use crate::path::KernelPath;

/// Values fixed for a cache's life that a pipeline is specialized on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Specialization(pub Vec<(&'static str, u32)>);

/// Cache key of a built pipeline.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PipelineKey {
    pub(crate) kernel: &'static str,
    pub(crate) path: KernelPath,
    pub(crate) spec: Specialization,
}

/// A built pipeline and its bind group layout.
#[derive(Debug)]
pub struct Pipeline {
    /// The compute pipeline.
    pub pipeline: wgpu::ComputePipeline,
    /// Layout of bind group 0 ([`super::pipeline::layout_entries`]: uniform bindings with
    /// dynamic offsets).
    pub layout: wgpu::BindGroupLayout,
    /// How each binding is used (the kernel's [`super::registry::KernelDef::bindings`]).
    pub bindings: &'static [super::registry::Binding],
}

/// Built pipelines by key.
pub type PipelineCache = HashMap<PipelineKey, Arc<Pipeline>>;
