//! Writing a [`SavedCache`] in the format of [`super`]: [`plan`] checks every layer and
//! computes the header, the section table and every checksum; [`write`] streams the bytes
//! (sections are written from the snapshots in place, never copied into one buffer).

use std::borrow::Cow;
use std::io::Write;
use std::sync::Arc;

use half::f16;

use super::format::{ALIGN, ENTRY_BYTES, HEADER_BYTES, MAGIC, SectionKind, VERSION, Writer};
use super::{SavedCache, SavedLayer, codecs_of};
use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::store::quantized_len;

/// One section of a layer, as the records imply it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SectionSpec {
    pub side: usize,
    pub kind: SectionKind,
    pub index: u16,
    pub bytes: u64,
}

/// The sections of one layer in file order (keys then values: streams, residual, tables),
/// or `None` when a length overflows u64.
pub(crate) fn layer_sections(
    codecs: &[Arc<dyn Codec>; 2],
    tokens: u64,
    residual: u64,
    evicts: bool,
) -> Option<Vec<SectionSpec>> {
    let mut out = Vec::new();
    for (side, c) in codecs.iter().enumerate() {
        let g = c.block_tokens() as u64;
        let q = tokens.saturating_sub(residual) / g * g;
        for (s, st) in c.streams().iter().enumerate() {
            out.push(SectionSpec {
                side,
                kind: SectionKind::Stream,
                index: s as u16,
                bytes: (q / g)
                    .checked_mul(st.words_per_block as u64)?
                    .checked_mul(4)?,
            });
        }
        let row = c.geometry().token_elems() as u64;
        out.push(SectionSpec {
            side,
            kind: SectionKind::Residual,
            index: 0,
            bytes: (tokens - q).checked_mul(row)?.checked_mul(2)?,
        });
        out.push(SectionSpec {
            side,
            kind: SectionKind::Tables,
            index: 0,
            bytes: c.tables().len() as u64 * 4,
        });
    }
    if evicts {
        let per = tokens
            .checked_mul(codecs[0].geometry().heads as u64)?
            .checked_mul(4)?;
        for kind in [SectionKind::Positions, SectionKind::Scores] {
            out.push(SectionSpec {
                side: 0,
                kind,
                index: 0,
                bytes: per,
            });
        }
    }
    Some(out)
}

/// The records of the header region: writer, metadata, one record per layer.
fn records(cache: &SavedCache, codecs: &[[Arc<dyn Codec>; 2]]) -> Vec<u8> {
    let mut w = Writer::default();
    w.str(&format!("kvpack {}", env!("CARGO_PKG_VERSION")));
    w.u32(cache.metadata.len() as u32);
    for (k, v) in &cache.metadata {
        w.str(k);
        w.str(v);
    }
    for (l, cs) in cache.layers.iter().zip(codecs) {
        w.u32(l.geometry.heads as u32);
        w.u32(l.geometry.dim as u32);
        w.u32(l.method.residual() as u32);
        w.u32(l.index as u32);
        w.u64(l.snapshot.tokens as u64);
        w.str(&l.method.to_string());
        if let Some(e) = &l.eviction {
            w.u64(e.appended as u64);
            w.u64(e.since as u64);
            w.u32(e.scorer);
        }
        if let Some(c) = center_crc(l) {
            w.u32(c);
        }
        for c in cs {
            w.str(c.method());
            w.str(&c.settings());
            w.u32(c.block_tokens() as u32);
            w.u64(quantized_len(l.snapshot.tokens, l.method.residual(), c.block_tokens()) as u64);
            w.u32(c.streams().len() as u32);
            for st in c.streams() {
                w.str(st.name);
                w.u32(st.words_per_block as u32);
            }
            w.u32(c.tables().len() as u32);
        }
    }
    w.0
}

/// The CRC-32 of a centered layer's μ (`None` without centering; planned layers have
/// checked means, see [`plan`]).
fn center_crc(l: &SavedLayer) -> Option<u32> {
    let c = l.method.center()?;
    c.mean(l.index, l.geometry)
        .ok()
        .map(|mu| super::format::crc32_f32(&mu))
}

/// u32 words as little-endian bytes (borrowed on little-endian machines).
pub(crate) fn words_le(w: &[u32]) -> Cow<'_, [u8]> {
    if cfg!(target_endian = "little") {
        Cow::Borrowed(bytemuck::cast_slice(w))
    } else {
        Cow::Owned(w.iter().flat_map(|x| x.to_le_bytes()).collect())
    }
}

/// f16 values as little-endian bytes (borrowed on little-endian machines).
fn halves_le(h: &[f16]) -> Cow<'_, [u8]> {
    if cfg!(target_endian = "little") {
        Cow::Borrowed(bytemuck::cast_slice(h))
    } else {
        Cow::Owned(h.iter().flat_map(|x| x.to_le_bytes()).collect())
    }
}

/// The bytes of one section of layer `l`.
fn section_data<'a>(l: &'a SavedLayer, tables: &'a [u32], s: &SectionSpec) -> Cow<'a, [u8]> {
    let side = if s.side == 0 {
        &l.snapshot.keys
    } else {
        &l.snapshot.values
    };
    match s.kind {
        SectionKind::Stream => words_le(&side.streams[s.index as usize]),
        SectionKind::Residual => halves_le(&side.residual),
        SectionKind::Tables => words_le(tables),
        SectionKind::Positions => words_le(l.eviction.as_ref().map_or(&[], |e| &e.positions)),
        SectionKind::Scores => {
            let s = l.eviction.as_ref().map_or(&[][..], |e| &e.scores[..]);
            if cfg!(target_endian = "little") {
                Cow::Borrowed(bytemuck::cast_slice(s))
            } else {
                Cow::Owned(s.iter().flat_map(|x| x.to_le_bytes()).collect())
            }
        }
    }
}

/// Everything but the sections' bytes: the header region (checksummed) and where each
/// section goes.
pub(crate) struct Plan {
    head: Vec<u8>,
    /// Per layer, its codecs (for the tables).
    codecs: Vec<[Arc<dyn Codec>; 2]>,
    /// (layer, spec, offset) in file order.
    sections: Vec<(usize, SectionSpec, u64)>,
    file_bytes: u64,
}

impl Plan {
    /// The file's length.
    pub fn file_bytes(&self) -> u64 {
        self.file_bytes
    }
}

fn too_big(what: &str) -> Error {
    Error::Config(format!("{what} does not fit the cache file format"))
}

/// Checks every layer ([`crate::Snapshot::check`] against the codecs this kvpack builds for its
/// method) and lays the file out.
pub(crate) fn plan(cache: &SavedCache) -> Result<Plan> {
    if cache.layers.is_empty() {
        return Err(Error::Config(
            "a saved cache needs at least one layer".into(),
        ));
    }
    if cache.layers.len() > super::format::MAX_LAYERS as usize {
        return Err(too_big("the number of layers"));
    }
    if cache.metadata.len() > super::format::MAX_METADATA as usize {
        return Err(too_big("the number of metadata entries"));
    }
    let mut codecs = Vec::with_capacity(cache.layers.len());
    let mut specs = Vec::new();
    for (i, l) in cache.layers.iter().enumerate() {
        if l.index > u32::MAX as usize {
            return Err(too_big("a layer index"));
        }
        let cs = codecs_of(&l.method, l.geometry, l.index)?;
        l.snapshot
            .check([&*cs[0], &*cs[1]], l.method.residual())
            .map_err(|e| Error::Config(format!("layer {i} cannot be saved: {e}")))?;
        match (&l.eviction, l.method.eviction()) {
            (Some(e), Some(_)) => e
                .check(l.snapshot.tokens, l.geometry.heads)
                .map_err(|m| Error::Config(format!("layer {i} cannot be saved: {m}")))?,
            (None, None) => {}
            _ => {
                return Err(Error::Config(format!(
                    "layer {i} cannot be saved: an eviction state without an eviction policy \
                     in its method, or the reverse"
                )));
            }
        }
        if let Some(c) = l.method.center() {
            c.mean(l.index, l.geometry)
                .map_err(|e| Error::Config(format!("layer {i} cannot be saved: {e}")))?;
        }
        let t = l.snapshot.tokens as u64;
        let secs = layer_sections(&cs, t, l.method.residual() as u64, l.eviction.is_some())
            .ok_or_else(|| too_big("a section's length"))?;
        specs.extend(secs.into_iter().map(|s| (i, s)));
        codecs.push(cs);
    }
    let recs = records(cache, &codecs);
    let meta_bytes = specs.len() * ENTRY_BYTES + recs.len();
    if meta_bytes > super::format::MAX_META_BYTES as usize {
        return Err(too_big("the header region"));
    }
    let mut at = super::format::align((HEADER_BYTES + meta_bytes) as u64).expect("small");
    let mut sections = Vec::with_capacity(specs.len());
    let mut table = Writer::default();
    for (i, s) in specs {
        let data = section_data(&cache.layers[i], codecs[i][s.side].tables(), &s);
        table.u32(i as u32);
        table.u8(s.side as u8);
        table.u8(s.kind as u8);
        table.u16(s.index);
        table.u64(at);
        table.u64(s.bytes);
        table.u32(super::format::crc32(&data));
        table.u32(0);
        sections.push((i, s, at));
        at = super::format::align(at + s.bytes).ok_or_else(|| too_big("the file"))?;
    }
    let mut h = Writer::default();
    h.0.extend_from_slice(&MAGIC);
    h.u32(written_version(cache));
    h.u32(0);
    h.u32(meta_bytes as u32);
    h.u32(0); // the checksum, below
    h.u64(at);
    h.u32(cache.layers.len() as u32);
    h.u32(sections.len() as u32);
    h.0.resize(HEADER_BYTES, 0);
    h.0.extend_from_slice(&table.0);
    h.0.extend_from_slice(&recs);
    let crc = super::format::header_crc(&h.0);
    let f = super::format::CRC_FIELD;
    h.0[f..f + 4].copy_from_slice(&crc.to_le_bytes());
    Ok(Plan {
        head: h.0,
        codecs,
        sections,
        file_bytes: at,
    })
}

/// Writes the file laid out by `plan` (from the same `cache`).
pub(crate) fn write(cache: &SavedCache, plan: &Plan, w: &mut dyn Write) -> std::io::Result<()> {
    let zeros = [0u8; ALIGN as usize];
    w.write_all(&plan.head)?;
    let mut at = plan.head.len() as u64;
    for (i, s, offset) in &plan.sections {
        w.write_all(&zeros[..(offset - at) as usize])?;
        let data = section_data(&cache.layers[*i], plan.codecs[*i][s.side].tables(), s);
        w.write_all(&data)?;
        at = offset + data.len() as u64;
    }
    w.write_all(&zeros[..(plan.file_bytes - at) as usize])?;
    w.flush()
}

/// The format version this kvpack writes for `cache`: 1 unless a layer evicts or centers its
/// keys (what version 2 added), so that such files stay readable by older readers. A reader
/// accepts either version for a file without those features; re-encoding writes this one.
pub(crate) fn written_version(cache: &SavedCache) -> u32 {
    let v2 = cache
        .layers
        .iter()
        .any(|l| l.eviction.is_some() || l.method.center().is_some());
    if v2 { VERSION } else { 1 }
}
