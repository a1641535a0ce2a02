//! # kvpack
//!
//! Compresses the key/value cache of transformer LLMs on the GPU and runs attention on the
//! compressed cache. Every kernel exists three times under one contract
//! (`docs/contracts/`): a CPU reference ([`cpu`]), a portable WGSL kernel (`wgsl/`) for any
//! wgpu adapter, and a hand-written Metal Shading Language kernel (`msl/`) for Apple GPUs.
//!
//! Start with a [`Context`]: [`Context::from_device`] for an application's own device,
//! [`Context::headless`] for tools, [`Context::cpu`] for the reference. Paths are chosen
//! explicitly ([`PathChoice`]); asking for one the device cannot run is an error.
//!
//! A cache method is a [`Method`] (`"kivi:bits=4"`, `"f16"`, `"kivi:bits=4/f16"`: see
//! [`method`]); [`Method::layer`] makes one layer's cache ([`KvLayer`]), [`Cache`] a model's.
//! Codecs ([`codec::Codec`], one folder each in [`codecs`]) plug into one shared store
//! ([`store`]) and one attention core ([`attention`]).
//!
//! ```
//! let ctx = kvpack::Context::cpu();
//! let packer = kvpack::BitPacker::new(&ctx)?;
//! let words = packer.pack(&[1, 2, 3], 2)?;
//! assert_eq!(words, vec![0b11_10_01]);
//! assert_eq!(packer.unpack(&words, 2, 3)?, vec![1, 2, 3]);
//! # Ok::<(), kvpack::Error>(())
//! ```

pub mod attention;
pub mod bitpack;
pub mod cache;
pub mod calib;
pub mod codec;
pub mod codecs;
pub mod context;
pub mod cpu;
pub mod describe;
pub mod error;
pub mod fuzz;
pub mod gpu;
pub mod kernels;
pub mod layer;
pub mod method;
#[cfg(feature = "model")]
pub mod model;
pub mod path;
pub mod persist;
pub mod policy;
pub mod prepare;
pub mod store;

pub use attention::{AttendKernel, AttendOptions};
pub use bitpack::{BitPacker, packed_words};
pub use cache::Cache;
pub use codecs::kivi::{KiviConfig, ParamStorage};
pub use context::{
    Context, HeadlessOptions, Origin, missing_capabilities, optional_features, required_features,
    required_limits,
};
pub use describe::Description;
pub use error::{Error, Result};
pub use layer::{KvLayer, Layer};
pub use method::Method;
pub use path::{KernelPath, PathChoice};
pub use persist::SavedCache;
pub use prepare::Preparing;
pub use store::{GpuDtype, GpuInput, Input, Memory, MemoryReport, Snapshot};
/// The wgpu kvpack is built on: an app on another wgpu release passes its device through
/// `kvpack::wgpu` types instead of meeting two incompatible `wgpu::Device`s.
pub use wgpu;

/// The README's `rust` blocks, compiled and run as doctests (`cargo test --doc`), so that the
/// snippets users copy are the API as it is.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// A layer of any method (KIVI: [`Layer::kivi`]).
pub type KiviLayer = Layer;
/// A layer of any method (f16: [`Layer::f16`]).
pub type F16Layer = Layer;
