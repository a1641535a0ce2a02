//! # kvpack
//!
//! Compresses the key/value cache of transformer LLMs on the GPU and runs attention on the
//! compressed cache. Every kernel exists three times under one contract
//! (`../shared/spec/`): a CPU reference ([`cpu`]), a portable WGSL kernel (`wgsl/`) for any
//! wgpu adapter, and a hand-written Metal Shading Language kernel (`msl/`) for Apple GPUs.
//!
//! Start with a [`Context`]: [`Context::from_device`] for an application's own device,
//! [`Context::headless`] for tools, [`Context::cpu`] for the reference. Paths are chosen
//! explicitly ([`PathChoice`]); asking for one the device cannot run is an error.
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
pub mod context;
pub mod cpu;
pub mod error;
pub mod f16cache;
pub mod gpu;
pub mod kivi;
pub mod model;

pub use attention::AttendOptions;
pub use bitpack::{BitPacker, packed_words};
pub use cache::{KiviCache, KvLayer, Method};
pub use context::{Context, Description, HeadlessOptions, KernelPath, Origin, PathChoice};
pub use error::{Error, Result};
pub use f16cache::F16Layer;
pub use kivi::{Input, KiviConfig, KiviLayer, MemoryReport, ParamStorage};
