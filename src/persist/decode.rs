//! Reading a cache file (format: [`super`]). [`parse`] checks everything but the sections'
//! checksums and content and computes those checksums ([`super::inspect`] reports them);
//! [`decode`] requires them to match and builds the snapshots. Every check is a
//! [`CacheFileError`]; nothing is allocated that the file's length does not bound.

use std::sync::Arc;

use half::f16;

use super::encode::{SectionSpec, layer_sections};
use super::error::CacheFileError;
use super::format::{
    self, ENTRY_BYTES, HEADER_BYTES, MAGIC, MAX_LAYERS, MAX_META_BYTES, MAX_METADATA, MAX_STREAMS,
    Reader, SectionKind, VERSION,
};
use super::{SavedCache, SavedLayer, codecs_of, side_name};
use crate::codec::Codec;
use crate::method::Method;
use crate::store::{Geometry, SideWords, Snapshot, quantized_len};

/// One layer's record, checked against the codecs this kvpack builds for it.
pub(crate) struct ParsedLayer {
    pub index: usize,
    pub method: Method,
    pub geometry: Geometry,
    pub tokens: usize,
    pub codecs: [Arc<dyn Codec>; 2],
    /// Under eviction: (appended, since, scorer checksum).
    pub eviction: Option<(usize, usize, u32)>,
}

/// One section: where it is, what it should hold, its stored and computed checksums.
pub(crate) struct ParsedSection {
    pub layer: usize,
    pub spec: SectionSpec,
    pub offset: u64,
    pub stored_crc: u32,
    pub computed_crc: u32,
}

impl ParsedSection {
    /// `layer 0 keys stream 1 (params)`, `layer 2 values residual window`, ...
    pub fn name(&self, layers: &[ParsedLayer]) -> String {
        section_name(self.layer, &self.spec, &layers[self.layer].codecs)
    }
}

fn section_name(layer: usize, s: &SectionSpec, codecs: &[Arc<dyn Codec>; 2]) -> String {
    let side = side_name(s.side);
    match s.kind {
        SectionKind::Stream => {
            let name = codecs[s.side]
                .streams()
                .get(s.index as usize)
                .map_or("?", |st| st.name);
            format!("layer {layer} {side} stream {} ({name})", s.index)
        }
        SectionKind::Residual => format!("layer {layer} {side} residual window"),
        SectionKind::Tables => format!("layer {layer} {side} tables"),
        SectionKind::Positions => format!("layer {layer} eviction positions"),
        SectionKind::Scores => format!("layer {layer} eviction scores"),
    }
}

/// A file whose header region and layout are sound (see [`parse`]).
pub(crate) struct Parsed {
    pub version: u32,
    pub file_bytes: u64,
    pub writer: String,
    pub metadata: Vec<(String, String)>,
    pub layers: Vec<ParsedLayer>,
    pub sections: Vec<ParsedSection>,
}

fn malformed(what: impl Into<String>, message: impl Into<String>) -> CacheFileError {
    CacheFileError::Malformed {
        what: what.into(),
        message: message.into(),
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Checks the magic, version, header checksum, flags, counts, every layer record (against
/// the codecs of its method), the section table (against what the records imply), the file's
/// length and every padding byte, and computes each section's checksum.
pub(crate) fn parse(bytes: &[u8]) -> Result<Parsed, CacheFileError> {
    let len = bytes.len() as u64;
    let head = &bytes[..bytes.len().min(MAGIC.len())];
    if head != &MAGIC[..head.len()] || head.is_empty() {
        return Err(CacheFileError::NotACacheFile {
            found: head.to_vec(),
            expected: MAGIC.to_vec(),
        });
    }
    let truncated = |what: &str, needed: u64| CacheFileError::Truncated {
        what: what.into(),
        needed,
        have: len,
    };
    if bytes.len() < 12 {
        return Err(truncated("header", HEADER_BYTES as u64));
    }
    let version = u32_at(bytes, 8);
    if version == 0 {
        return Err(CacheFileError::BadVersion { found: version });
    }
    if version > VERSION {
        return Err(CacheFileError::NewerVersion {
            found: version,
            supported: VERSION,
        });
    }
    if bytes.len() < HEADER_BYTES {
        return Err(truncated("header", HEADER_BYTES as u64));
    }
    let meta_bytes = u32_at(bytes, 16);
    if meta_bytes > MAX_META_BYTES {
        return Err(malformed(
            "header (meta_bytes)",
            format!(
                "{meta_bytes} bytes of records is more than the format allows ({MAX_META_BYTES})"
            ),
        ));
    }
    let meta_end = HEADER_BYTES + meta_bytes as usize;
    if bytes.len() < meta_end {
        return Err(truncated(
            "section table and layer records",
            meta_end as u64,
        ));
    }
    let stored = u32_at(bytes, format::CRC_FIELD);
    let computed = format::header_crc(&bytes[..meta_end]);
    if stored != computed {
        return Err(CacheFileError::Checksum {
            what: "header, section table and layer records".into(),
            stored,
            computed,
        });
    }
    let flags = u32_at(bytes, 12);
    if flags != 0 {
        return Err(CacheFileError::UnknownFlags { flags });
    }
    if bytes[40..HEADER_BYTES].iter().any(|&b| b != 0) {
        return Err(malformed(
            "header (bytes 40..64)",
            "reserved bytes are not zero",
        ));
    }
    let mut h = Reader::new(&bytes[24..40], "header");
    let file_bytes = h.u64("file_bytes")?;
    let n_layers = h.u32("layers")?;
    let n_sections = h.u32("sections")?;
    if n_layers == 0 || n_layers > MAX_LAYERS {
        return Err(malformed(
            "header (layers)",
            format!("{n_layers} layers (a file holds 1 to {MAX_LAYERS})"),
        ));
    }
    let table_bytes = (n_sections as u64) * ENTRY_BYTES as u64;
    if table_bytes > meta_bytes as u64 {
        return Err(malformed(
            "header (sections)",
            format!("{n_sections} section entries do not fit in {meta_bytes} bytes of records"),
        ));
    }
    let table_end = HEADER_BYTES + table_bytes as usize;

    // Records.
    let mut r = Reader::new(&bytes[table_end..meta_end], "layer records");
    let writer = r.str("writer")?;
    let n_meta = r.u32("metadata count")?;
    if n_meta > MAX_METADATA {
        return Err(malformed(
            "layer records (metadata count)",
            format!("{n_meta} entries (at most {MAX_METADATA})"),
        ));
    }
    let mut metadata = Vec::new();
    for _ in 0..n_meta {
        metadata.push((r.str("metadata key")?, r.str("metadata value")?));
    }
    let mut layers = Vec::new();
    let mut expected: Vec<(usize, SectionSpec)> = Vec::new();
    for l in 0..n_layers as usize {
        let (layer, secs) = parse_layer(&mut r, l, version)?;
        expected.extend(secs.into_iter().map(|s| (l, s)));
        layers.push(layer);
    }
    if r.position() != meta_end - table_end {
        return Err(malformed(
            "layer records",
            format!(
                "{} bytes follow the last record",
                meta_end - table_end - r.position()
            ),
        ));
    }

    // Section table: exactly the sections the records imply, at canonical offsets.
    if expected.len() != n_sections as usize {
        return Err(malformed(
            "header (sections)",
            format!(
                "{n_sections} sections, the layer records imply {}",
                expected.len()
            ),
        ));
    }
    let mut t = Reader::new(&bytes[HEADER_BYTES..table_end], "section table");
    let mut at = format::align(meta_end as u64).expect("bounded by MAX_META_BYTES");
    let mut sections = Vec::with_capacity(expected.len());
    for (e, (l, want)) in expected.iter().enumerate() {
        let what = || format!("section table entry {e}");
        let layer = t.u32("layer")? as usize;
        let side = t.u8("side")? as usize;
        let kind = t.u8("kind")?;
        let index = t.u16("index")?;
        let offset = t.u64("offset")?;
        let size = t.u64("bytes")?;
        let crc = t.u32("checksum")?;
        let reserved = t.u32("reserved")?;
        let name = section_name(*l, want, &layers[*l].codecs);
        let got = (layer, side, SectionKind::from_u8(kind), index);
        if got != (*l, want.side, Some(want.kind), want.index) {
            return Err(malformed(
                what(),
                format!(
                    "is (layer {layer}, side {side}, kind {kind}, index {index}), the records \
                     imply {name} here"
                ),
            ));
        }
        if size != want.bytes {
            return Err(malformed(
                what(),
                format!(
                    "{name} is {size} bytes, the layer record implies {}",
                    want.bytes
                ),
            ));
        }
        if offset != at {
            return Err(malformed(
                what(),
                format!("{name} is at byte {offset}, it belongs at {at}"),
            ));
        }
        if reserved != 0 {
            return Err(malformed(what(), "reserved field is not zero"));
        }
        sections.push(ParsedSection {
            layer: *l,
            spec: *want,
            offset,
            stored_crc: crc,
            computed_crc: 0,
        });
        at = offset
            .checked_add(size)
            .and_then(format::align)
            .ok_or_else(|| malformed(what(), "the section ends past 2^64"))?;
    }
    if file_bytes != at {
        return Err(malformed(
            "header (file_bytes)",
            format!("{file_bytes} bytes, the section table ends the file at {at}"),
        ));
    }
    if len < file_bytes {
        let cut = sections
            .iter()
            .find(|s| s.offset + s.spec.bytes > len)
            .map_or_else(|| "the final padding".to_string(), |s| s.name(&layers));
        let needed = sections
            .iter()
            .find(|s| s.offset + s.spec.bytes > len)
            .map_or(file_bytes, |s| s.offset + s.spec.bytes);
        return Err(truncated(&cut, needed));
    }
    if len > file_bytes {
        return Err(malformed(
            "file",
            format!(
                "{} bytes follow the end of the last section",
                len - file_bytes
            ),
        ));
    }

    // Padding is zero; checksums of the sections.
    let mut pad_from = meta_end as u64;
    for s in &mut sections {
        check_zero(bytes, pad_from, s.offset)?;
        let data = &bytes[s.offset as usize..(s.offset + s.spec.bytes) as usize];
        s.computed_crc = format::crc32(data);
        pad_from = s.offset + s.spec.bytes;
    }
    check_zero(bytes, pad_from, file_bytes)?;
    Ok(Parsed {
        version,
        file_bytes,
        writer,
        metadata,
        layers,
        sections,
    })
}

fn check_zero(bytes: &[u8], from: u64, to: u64) -> Result<(), CacheFileError> {
    match bytes[from as usize..to as usize]
        .iter()
        .position(|&b| b != 0)
    {
        Some(i) => Err(malformed(
            "padding",
            format!(
                "byte {} is {:#04x}, padding is zero",
                from as usize + i,
                bytes[from as usize + i]
            ),
        )),
        None => Ok(()),
    }
}

/// One layer record, checked against the codecs of its method; its sections.
fn parse_layer(
    r: &mut Reader<'_>,
    l: usize,
    version: u32,
) -> Result<(ParsedLayer, Vec<SectionSpec>), CacheFileError> {
    let heads = r.u32("heads")? as usize;
    let dim = r.u32("dim")? as usize;
    let residual = r.u32("residual")? as usize;
    let index = r.u32("index")? as usize;
    let tokens = r.u64("tokens")?;
    let spec = r.str("method spec")?;
    let method_err = |message: String| CacheFileError::Method {
        layer: l,
        spec: spec.clone(),
        message,
    };
    let geometry = Geometry::new(heads, dim)
        .map_err(|e| malformed(format!("layer {l} record (heads, dim)"), e.to_string()))?;
    let limit = (u32::MAX / 2) as u64;
    if tokens >= limit {
        return Err(malformed(
            format!("layer {l} record (tokens)"),
            format!("{tokens} tokens (a layer holds fewer than {limit})"),
        ));
    }
    let method = Method::parse(&spec).map_err(|e| method_err(e.to_string()))?;
    let layout = |what: String, file: String, expected: String| CacheFileError::Layout {
        layer: l,
        what,
        file,
        expected,
        method: method.to_string(),
    };
    if method.residual() != residual {
        return Err(layout(
            "the residual window".into(),
            residual.to_string(),
            method.residual().to_string(),
        ));
    }
    let codecs = codecs_of(&method, geometry, index).map_err(|e| method_err(e.to_string()))?;
    let eviction = match method.eviction() {
        None => None,
        Some(_) if version < 2 => {
            return Err(malformed(
                format!("layer {l} record (method spec)"),
                "an eviction policy in a version-1 file (eviction came with version 2)",
            ));
        }
        Some(ev) => {
            let appended = r.u64("tokens appended")?;
            let since = r.u64("tokens since the last eviction")?;
            let scorer = r.u32("scorer checksum")?;
            if appended >= limit || appended < tokens || since > appended {
                return Err(malformed(
                    format!("layer {l} record (eviction counters)"),
                    format!(
                        "{appended} tokens appended, {since} since the last eviction, {tokens} held"
                    ),
                ));
            }
            let want = crate::policy::layer::scorer_for(ev, index, geometry)
                .map_err(|e| method_err(e.to_string()))?
                .checksum();
            if scorer != want {
                return Err(layout(
                    "the eviction scorer's filters (checksum)".into(),
                    format!("{scorer:#010x}"),
                    format!("{want:#010x} (the calibration file changed)"),
                ));
            }
            Some((appended as usize, since as usize, scorer))
        }
    };
    if let Some(c) = method.center() {
        if version < 2 {
            return Err(malformed(
                format!("layer {l} record (method spec)"),
                "key centering in a version-1 file (it came with version 2)",
            ));
        }
        let stored = r.u32("key means checksum")?;
        let mu = c
            .mean(index, geometry)
            .map_err(|e| method_err(e.to_string()))?;
        let want = format::crc32_f32(&mu);
        if stored != want {
            return Err(layout(
                "the key means of centering (checksum)".into(),
                format!("{stored:#010x}"),
                format!("{want:#010x} (the calibration file changed)"),
            ));
        }
    }
    for (i, c) in codecs.iter().enumerate() {
        let side = side_name(i);
        let name = r.str("codec name")?;
        let settings = r.str("codec settings")?;
        let block = r.u32("block tokens")? as usize;
        let quantized = r.u64("quantized tokens")?;
        let n_streams = r.u32("streams")?;
        if n_streams > MAX_STREAMS {
            return Err(malformed(
                format!("layer {l} {side} record (streams)"),
                format!("{n_streams} streams (at most {MAX_STREAMS})"),
            ));
        }
        let mut streams = Vec::new();
        for _ in 0..n_streams {
            streams.push((r.str("stream name")?, r.u32("words per block")? as usize));
        }
        let table_words = r.u32("table words")? as usize;
        let f = |what: &str| format!("{side}: {what}");
        if name != c.method() {
            return Err(layout(f("the codec"), name, c.method().into()));
        }
        if settings != c.settings() {
            return Err(layout(f("the codec settings"), settings, c.settings()));
        }
        if block != c.block_tokens() {
            return Err(layout(
                f("the block size"),
                block.to_string(),
                c.block_tokens().to_string(),
            ));
        }
        let q = quantized_len(tokens as usize, residual, block) as u64;
        if quantized != q {
            return Err(layout(
                f("the quantized token count"),
                quantized.to_string(),
                format!("{q} (for {tokens} tokens)"),
            ));
        }
        let want: Vec<(String, usize)> = c
            .streams()
            .iter()
            .map(|s| (s.name.to_string(), s.words_per_block))
            .collect();
        if streams != want {
            let show = |v: &[(String, usize)]| {
                v.iter()
                    .map(|(n, w)| format!("{n}: {w} words/block"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(layout(f("the streams"), show(&streams), show(&want)));
        }
        if table_words != c.tables().len() {
            return Err(layout(
                f("the tables (words)"),
                table_words.to_string(),
                c.tables().len().to_string(),
            ));
        }
    }
    let secs =
        layer_sections(&codecs, tokens, residual as u64, eviction.is_some()).ok_or_else(|| {
            malformed(
                format!("layer {l} record"),
                "its sections are longer than 2^64 bytes",
            )
        })?;
    Ok((
        ParsedLayer {
            index,
            method,
            geometry,
            tokens: tokens as usize,
            codecs,
            eviction,
        },
        secs,
    ))
}

fn words(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Reads a whole file: [`parse`], every section's checksum, the tables against the codecs',
/// and the words against the store's rules ([`Snapshot::check`]).
pub(crate) fn decode(bytes: &[u8]) -> Result<SavedCache, CacheFileError> {
    let p = parse(bytes)?;
    if let Some(s) = p.sections.iter().find(|s| s.stored_crc != s.computed_crc) {
        return Err(CacheFileError::Checksum {
            what: s.name(&p.layers),
            stored: s.stored_crc,
            computed: s.computed_crc,
        });
    }
    let mut sides: Vec<[SideWords; 2]> = p.layers.iter().map(|_| Default::default()).collect();
    let mut states: Vec<crate::policy::EvictionState> =
        p.layers.iter().map(|_| Default::default()).collect();
    for s in &p.sections {
        let data = &bytes[s.offset as usize..(s.offset + s.spec.bytes) as usize];
        let layer = &p.layers[s.layer];
        let side = &mut sides[s.layer][s.spec.side];
        match s.spec.kind {
            SectionKind::Stream => side.streams.push(words(data)),
            SectionKind::Residual => {
                side.residual = data
                    .chunks_exact(2)
                    .map(|c| f16::from_le_bytes([c[0], c[1]]))
                    .collect();
            }
            SectionKind::Positions => states[s.layer].positions = words(data),
            SectionKind::Scores => {
                states[s.layer].scores = words(data).into_iter().map(f32::from_bits).collect();
            }
            SectionKind::Tables => {
                if words(data) != layer.codecs[s.spec.side].tables() {
                    return Err(CacheFileError::Layout {
                        layer: s.layer,
                        what: format!("{}: the tables", side_name(s.spec.side)),
                        file: format!("{} words (checksum {:#010x})", data.len() / 4, s.stored_crc),
                        expected: "other words (the codec's seeds or tables changed)".into(),
                        method: layer.method.to_string(),
                    });
                }
            }
        }
    }
    let mut out = SavedCache {
        layers: Vec::with_capacity(p.layers.len()),
        metadata: p.metadata,
    };
    for (l, ((layer, [k, v]), mut state)) in p.layers.into_iter().zip(sides).zip(states).enumerate()
    {
        let t = layer.tokens;
        let r = layer.method.residual();
        let [ck, cv] = &layer.codecs;
        let mut k = k;
        let mut v = v;
        k.quantized = quantized_len(t, r, ck.block_tokens());
        v.quantized = quantized_len(t, r, cv.block_tokens());
        let snapshot = Snapshot {
            tokens: t,
            keys: k,
            values: v,
        };
        snapshot
            .check([&**ck, &**cv], r)
            .map_err(|e| CacheFileError::Content {
                layer: l,
                message: e.to_string(),
            })?;
        let eviction = match layer.eviction {
            None => None,
            Some((appended, since, scorer)) => {
                (state.appended, state.since, state.scorer) = (appended, since, scorer);
                state
                    .check(t, layer.geometry.heads)
                    .map_err(|message| CacheFileError::Content { layer: l, message })?;
                Some(state)
            }
        };
        out.layers.push(SavedLayer {
            index: layer.index,
            method: layer.method,
            geometry: layer.geometry,
            snapshot,
            eviction,
        });
    }
    Ok(out)
}
