//! [`Inspection`]: what a cache file holds, read without building any layer (`kvpack cache
//! inspect`). The header region must be sound; each section's checksum is reported rather than
//! required, so a damaged file shows which sections are damaged.

use std::path::Path;

use super::decode::parse;
use super::format::SectionKind;
use super::{file_error, side_name};
use crate::error::{Error, Result};

/// One section of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SectionInfo {
    /// `layer 0 keys stream 0 (codes)`, `layer 0 values residual window`, ...
    pub name: String,
    /// `stream`, `residual` or `tables`.
    pub kind: &'static str,
    /// The layer.
    pub layer: usize,
    /// `keys` or `values`.
    pub side: &'static str,
    /// Byte offset in the file (a multiple of 64).
    pub offset: u64,
    /// Bytes.
    pub bytes: u64,
    /// CRC-32 stored in the section table.
    pub checksum: u32,
    /// Whether the bytes read have that checksum.
    pub checksum_ok: bool,
}

/// One layer of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LayerInfo {
    /// The model layer its codecs drew per-layer tables for.
    pub index: usize,
    /// The method spec (canonical).
    pub method: String,
    /// KV heads.
    pub heads: usize,
    /// Head width.
    pub dim: usize,
    /// Tokens held.
    pub tokens: usize,
    /// Tokens in each side's stored form (keys, values).
    pub quantized: [usize; 2],
    /// Each side's codec settings (keys, values).
    pub settings: [String; 2],
}

/// What [`inspect`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Inspection {
    /// Format version.
    pub version: u32,
    /// The kvpack that wrote it (`kvpack 0.1.0`).
    pub writer: String,
    /// The file's length.
    pub file_bytes: u64,
    /// Metadata entries.
    pub metadata: Vec<(String, String)>,
    /// The layers.
    pub layers: Vec<LayerInfo>,
    /// Every section, in file order.
    pub sections: Vec<SectionInfo>,
}

impl Inspection {
    /// Whether every section's checksum matches.
    pub fn checksums_ok(&self) -> bool {
        self.sections.iter().all(|s| s.checksum_ok)
    }
}

/// Inspects a file's bytes: an error when the header region or the layout is unsound,
/// otherwise every section with its checksum status.
pub fn inspect_bytes(bytes: &[u8]) -> std::result::Result<Inspection, super::CacheFileError> {
    let p = parse(bytes)?;
    let sections = p
        .sections
        .iter()
        .map(|s| SectionInfo {
            name: s.name(&p.layers),
            kind: match s.spec.kind {
                SectionKind::Stream => "stream",
                SectionKind::Residual => "residual",
                SectionKind::Tables => "tables",
                SectionKind::Positions => "positions",
                SectionKind::Scores => "scores",
            },
            layer: s.layer,
            side: side_name(s.spec.side),
            offset: s.offset,
            bytes: s.spec.bytes,
            checksum: s.stored_crc,
            checksum_ok: s.stored_crc == s.computed_crc,
        })
        .collect();
    let layers = p
        .layers
        .iter()
        .map(|l| {
            let q = |i: usize| {
                crate::store::quantized_len(
                    l.tokens,
                    l.method.residual(),
                    l.codecs[i].block_tokens(),
                )
            };
            LayerInfo {
                index: l.index,
                method: l.method.to_string(),
                heads: l.geometry.heads,
                dim: l.geometry.dim,
                tokens: l.tokens,
                quantized: [q(0), q(1)],
                settings: [l.codecs[0].settings(), l.codecs[1].settings()],
            }
        })
        .collect();
    Ok(Inspection {
        version: p.version,
        writer: p.writer,
        file_bytes: p.file_bytes,
        metadata: p.metadata,
        layers,
        sections,
    })
}

/// Inspects the file at `path` (see [`inspect_bytes`]).
pub fn inspect(path: impl AsRef<Path>) -> Result<Inspection> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    inspect_bytes(&bytes).map_err(|e| file_error(&path.display().to_string(), e))
}
