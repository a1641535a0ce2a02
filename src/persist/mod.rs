//! Saving and loading caches: a versioned binary file of one or more layers' stored words,
//! written atomically and read back on any path ([`SavedCache`]).
//!
//! A file holds what [`crate::KvLayer::snapshot`] returns (the same words on every path),
//! the method spec and geometry of each layer, and each codec's identity (its settings and
//! tables), so a cache saved on a GPU loads on the CPU reference (or another GPU) and attends
//! as a cache that appended the same tokens there would. Loading rebuilds each layer with
//! [`crate::Layer::from_snapshot`]; appends continue from where the saved cache stopped.
//!
//! # Format, version 1
//!
//! All integers little-endian; strings are a u16 byte length and UTF-8. Sections start at
//! multiples of 64 bytes and hold u32 words or f16 values as stored, so a reader may
//! memory-map the file and use a section in place.
//!
//! ```text
//! offset  bytes  field
//! 0       8      magic 89 6b 76 70 61 63 6b 0a ("\x89kvpack\n")
//! 8       4      version = 1                    (bytes 0..12 keep their meaning in every version)
//! 12      4      flags = 0                      (any bit set is an error in version 1)
//! 16      4      meta_bytes: bytes of the section table + records after the header
//! 20      4      header CRC-32 of bytes [0, 64 + meta_bytes) with this field read as 0
//! 24      8      file_bytes: the file's exact length
//! 32      4      layers L (1 ..= 65536)
//! 36      4      sections N (= Σ over layers and sides of streams + 2)
//! 40      24     reserved, zero
//! 64      32·N   section table, one entry per section in file order:
//!                  u32 layer, u8 side (0 keys, 1 values), u8 kind (0 stream, 1 residual,
//!                  2 tables), u16 index (the stream's; 0 otherwise), u64 offset, u64 bytes,
//!                  u32 CRC-32 of the section's bytes, u32 reserved zero
//! ..             records: str writer ("kvpack 0.1.0"); u32 M, M × (str key, str value)
//!                metadata; L layer records:
//!                  u32 heads, u32 dim, u32 residual R, u32 index (the model layer the
//!                  codecs drew per-layer tables for, e.g. TurboQuant's signs), u64 tokens T,
//!                  str method spec (canonical, `Method`'s Display), then keys and values:
//!                    str codec name, str codec settings, u32 block tokens G, u64 quantized Q,
//!                    u32 streams S, S × (str name, u32 words per block), u32 table words
//! ..             zero padding to a multiple of 64
//! sections       in table order, each at the first multiple of 64 after the previous one
//!                (zero padding between): per layer, per side, its S streams (Q/G blocks ×
//!                words per block, u32), its residual window (rows of tokens [Q, T), H·D
//!                f16 each), its tables (u32)
//! file_bytes     the end of the last section rounded up to 64
//! ```
//!
//! # Guarantees
//!
//! - **Everything is checked before anything is built.** The header CRC covers the header,
//!   the section table and every record; each section has its own CRC; padding must be zero;
//!   every offset and length must be the one the records imply. So any flipped bit, any
//!   truncation and any trailing byte is a typed [`CacheFileError`] (carried by
//!   [`crate::Error::CacheFile`] with the path), never a panic, an allocation the file's
//!   length does not justify, or a cache holding wrong words. The tests flip every bit of
//!   a file and cut it at every byte.
//! - **Versions.** A file of a newer version is [`CacheFileError::NewerVersion`]; this
//!   kvpack reads versions up to [`VERSION`].
//! - **Identity.** A layer's method spec is rebuilt by this kvpack for the layer's geometry,
//!   and its block size, streams, words per block, codec settings and tables (seeds,
//!   codebooks, rotations drawn for the recorded layer index: whatever
//!   [`crate::codec::Codec::tables`] holds) must equal the
//!   file's ([`CacheFileError::Layout`]): a file whose codec would decode differently here is
//!   refused, never misread. [`SavedCache::expect`] checks it fits a model's shape.
//! - **Content.** The words must be ones a cache can hold ([`crate::Snapshot::check`]:
//!   lengths, finite residual rows and codec parameters).
//! - **Atomic writes.** [`SavedCache::save`] writes a temporary file in the target's folder,
//!   syncs it and renames it over the target: a failed save (full disk, no permission)
//!   leaves the old file as it was and no temporary behind.
//! - **Eviction** (version 2; a file without eviction is written as version 1): a layer whose
//!   method spec names an eviction policy (`…+qfilters:…`) has, after the method spec in its
//!   record, `u64 appended, u64 since` (tokens appended, and since the last eviction) and `u32`
//!   the CRC-32 of its scorer's filters (0 without filters; a load whose calibration file
//!   changed is refused), and two more sections after its values' sections: side 0, kind 3
//!   positions `[T][H]` u32 and kind 4 scores `[T][H]` f32 of the held tokens.
//! - **Key centering** (version 2): a layer whose method centers keys (`center=calib`) has, after
//!   the eviction fields (if any), `u32` the CRC-32 of its μ; a load whose calibration file
//!   changed is refused.
//! - Limit: the reader builds each layer's codecs (for its method, geometry and index) before
//!   comparing their tables with the file's, so a small file naming a codec whose tables grow
//!   with the geometry (QJL's sketch, m·D floats) at a huge geometry (up to H·D = 2^20) makes
//!   the reader allocate those tables before refusing it. A table size known from the method
//!   row before building would close this.

mod atomic;
mod decode;
mod encode;
pub(crate) use encode::written_version;
pub mod error;
pub mod format;
mod inspect;

use std::path::Path;
use std::sync::Arc;

pub use atomic::with_write_failure_after;
pub use error::CacheFileError;
pub use format::VERSION;
pub use inspect::{Inspection, LayerInfo, SectionInfo, inspect, inspect_bytes};

use crate::codec::Codec;
use crate::context::{Context, PathChoice};
use crate::error::{Error, Result};
use crate::layer::{KvLayer, Layer};
use crate::method::Method;
use crate::store::{Geometry, Side, Snapshot};

/// One layer of a saved cache: its method, geometry, layer index and stored words.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SavedLayer {
    /// The model layer its codecs drew per-layer tables for ([`KvLayer::index`]).
    pub index: usize,
    /// The method.
    pub method: Method,
    /// KV heads and head width.
    pub geometry: Geometry,
    /// The stored words (tokens, both sides' streams and residual windows).
    pub snapshot: Snapshot,
    /// A layer under eviction: its policy's state (scores, positions, counters).
    pub eviction: Option<crate::policy::EvictionState>,
}

impl SavedLayer {
    /// Tokens appended (the next position): more than the tokens held under eviction.
    pub fn appended(&self) -> usize {
        self.eviction
            .as_ref()
            .map_or(self.snapshot.tokens, |e| e.appended)
    }
}

/// A cache as saved: every layer's method, geometry and stored words, on the CPU, not yet on
/// any path, plus free-form metadata (`key = value` strings: a model's identity, a prompt's
/// name). [`SavedCache::of_layers`] takes one from live layers, [`SavedCache::save`] /
/// [`SavedCache::open`] write and read files, [`SavedCache::to_layers`] builds layers on a
/// path. See the module docs for the format.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct SavedCache {
    /// The layers, in order.
    pub layers: Vec<SavedLayer>,
    /// Metadata entries, in order.
    pub metadata: Vec<(String, String)>,
}

/// The codecs this kvpack builds for `method` at geometry `g` on the CPU reference: what a
/// file's records are written from and checked against.
pub(crate) fn codecs_of(method: &Method, g: Geometry, index: usize) -> Result<[Arc<dyn Codec>; 2]> {
    let ctx = Context::cpu();
    let r = method.residual();
    Ok([
        method.key().build(&ctx, g, r, index, PathChoice::Cpu)?,
        method.value().build(&ctx, g, r, index, PathChoice::Cpu)?,
    ])
}

/// `in` the error of a file named `file`.
pub(crate) fn file_error(file: &str, problem: CacheFileError) -> Error {
    Error::CacheFile {
        file: file.to_string(),
        problem: Box::new(problem),
    }
}

impl SavedCache {
    /// The stored words of `layers` (read back from GPU paths), in order.
    pub fn of_layers<'a>(layers: impl IntoIterator<Item = &'a dyn KvLayer>) -> Result<Self> {
        let layers = layers
            .into_iter()
            .map(|l| {
                Ok(SavedLayer {
                    index: l.index(),
                    method: l.method().clone(),
                    geometry: l.geometry(),
                    snapshot: l.snapshot()?,
                    eviction: l.eviction_state()?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            layers,
            metadata: Vec::new(),
        })
    }

    /// Adds a metadata entry.
    pub fn with_metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.push((key.into(), value.into()));
        self
    }

    /// The value of metadata `key` (the last one given).
    pub fn metadata(&self, key: &str) -> Option<&str> {
        self.metadata
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The file's bytes (the format in the module docs). Checks every layer's words first
    /// ([`Snapshot::check`]): a cache that could not be loaded is never written.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let plan = encode::plan(self)?;
        let mut out = Vec::with_capacity(plan.file_bytes() as usize);
        encode::write(self, &plan, &mut out).map_err(|e| Error::Io {
            path: "<memory>".into(),
            source: e,
        })?;
        Ok(out)
    }

    /// Writes the file atomically: a temporary file in `path`'s folder, synced, then renamed
    /// over `path`. The words are checked first ([`Snapshot::check`]); on any error `path` is
    /// as it was and the temporary file is removed.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let plan = encode::plan(self)?;
        atomic::write_atomic(path.as_ref(), |w| encode::write(self, &plan, w))
    }

    /// Reads and checks a file's bytes (`file` names it in errors).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        decode::decode(bytes).map_err(|e| file_error("<bytes>", e))
    }

    /// Reads and checks the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| Error::Io {
            path: path.display().to_string(),
            source: e,
        })?;
        decode::decode(&bytes).map_err(|e| file_error(&path.display().to_string(), e))
    }

    /// Tokens of the first layer (every layer of a model's cache holds the same).
    pub fn tokens(&self) -> usize {
        self.layers.first().map_or(0, |l| l.snapshot.tokens)
    }

    /// Checks that the file fits a model of `layers` layers of `heads` KV heads of width
    /// `dim`, all with `method` when given: [`CacheFileError::Mismatch`] naming the first
    /// difference.
    pub fn expect(
        &self,
        layers: usize,
        heads: usize,
        dim: usize,
        method: Option<&Method>,
    ) -> Result<()> {
        let mismatch = |what: String, file: String, expected: String| {
            Err(file_error(
                "<loaded>",
                CacheFileError::Mismatch {
                    what,
                    file,
                    expected,
                },
            ))
        };
        if self.layers.len() != layers {
            return mismatch(
                "layers".into(),
                self.layers.len().to_string(),
                layers.to_string(),
            );
        }
        for (i, l) in self.layers.iter().enumerate() {
            let g = l.geometry;
            if (g.heads, g.dim) != (heads, dim) {
                return mismatch(
                    format!("layer {i} geometry (KV heads x head width)"),
                    format!("{}x{}", g.heads, g.dim),
                    format!("{heads}x{dim}"),
                );
            }
            if let Some(m) = method.filter(|m| **m != l.method) {
                return mismatch(
                    format!("layer {i} method"),
                    l.method.to_string(),
                    m.to_string(),
                );
            }
        }
        Ok(())
    }

    /// Builds every layer on `choice` of `ctx` ([`Layer::from_snapshot`]).
    pub fn to_layers(&self, ctx: &Context, choice: PathChoice) -> Result<Vec<Box<dyn KvLayer>>> {
        self.layers
            .iter()
            .map(|l| {
                let (heads, dim) = (l.geometry.heads, l.geometry.dim);
                let bare = l.method.with_eviction(None);
                match (&l.eviction, l.method.eviction()) {
                    (None, None) => Ok(Box::new(Layer::from_snapshot(
                        ctx,
                        l.index,
                        heads,
                        dim,
                        &bare,
                        choice,
                        &l.snapshot,
                    )?) as Box<dyn KvLayer>),
                    (Some(state), Some(_)) => Ok(Box::new(crate::policy::EvictingLayer::restore(
                        Layer::new_at(ctx, l.index, heads, dim, &bare, choice)?,
                        l.method.clone(),
                        l.index,
                        &l.snapshot,
                        state.clone(),
                    )?) as Box<dyn KvLayer>),
                    _ => Err(Error::Config(format!(
                        "layer {}: an eviction state without an eviction policy in its method, \
                         or the reverse",
                        l.index
                    ))),
                }
            })
            .collect()
    }
}

/// Saves `layers` to `path` atomically (see [`SavedCache::save`]).
pub fn save_layers<'a>(
    path: impl AsRef<Path>,
    layers: impl IntoIterator<Item = &'a dyn KvLayer>,
) -> Result<()> {
    SavedCache::of_layers(layers)?.save(path)
}

/// Loads the layers of the file at `path` onto `choice` of `ctx`.
pub fn load_layers(
    path: impl AsRef<Path>,
    ctx: &Context,
    choice: PathChoice,
) -> Result<Vec<Box<dyn KvLayer>>> {
    SavedCache::open(path)?.to_layers(ctx, choice)
}

/// The name of a side in messages.
pub(crate) fn side_name(i: usize) -> &'static str {
    if i == 0 {
        Side::Keys.name()
    } else {
        Side::Values.name()
    }
}
