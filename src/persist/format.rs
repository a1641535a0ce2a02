//! The constants of the cache file format (layout: [`super`]) and the little-endian byte
//! writer and bounds-checked reader its encoder and decoder share.

use super::error::CacheFileError;

/// The first 8 bytes: `0x89 'k' 'v' 'p' 'a' 'c' 'k' '\n'` (a non-ASCII byte and a line feed,
/// so that a transfer that strips the 8th bit or rewrites line ends breaks the magic).
pub const MAGIC: [u8; 8] = [0x89, b'k', b'v', b'p', b'a', b'c', b'k', b'\n'];
/// The newest format version this kvpack reads (it writes version 1 unless a layer evicts).
pub const VERSION: u32 = 2;
/// Bytes of the fixed header.
pub const HEADER_BYTES: usize = 64;
/// Bytes of one section table entry.
pub const ENTRY_BYTES: usize = 32;
/// Every section starts at a multiple of this (a memory map can cast a section to `u32`s or
/// `f16`s in place; 64 is a cache line and the largest common SIMD width).
pub const ALIGN: u64 = 64;
/// Byte offset of the header checksum field.
pub const CRC_FIELD: usize = 20;

/// At most this many layers in one file.
pub const MAX_LAYERS: u32 = 1 << 16;
/// At most this many streams per side.
pub const MAX_STREAMS: u32 = 64;
/// At most this many metadata entries.
pub const MAX_METADATA: u32 = 1024;
/// At most this many bytes of the header region (section table, records, metadata).
pub const MAX_META_BYTES: u32 = 64 << 20;

/// What a section holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum SectionKind {
    /// One stream of a side's codec: the words of its `Q / G` blocks (u32 LE).
    Stream = 0,
    /// The side's f16 residual window: rows of tokens `[Q, T)`, `H·D` f16 LE each.
    Residual = 1,
    /// The side's codec tables (u32 LE), as [`crate::codec::Codec::tables`] returns them.
    Tables = 2,
    /// Version 2, a layer under eviction (side 0): the held tokens' positions `[T][H]` u32 LE.
    Positions = 3,
    /// Version 2, a layer under eviction (side 0): their scores `[T][H]` f32 LE.
    Scores = 4,
}

impl SectionKind {
    /// The kind of byte `b`.
    pub fn from_u8(b: u8) -> Option<Self> {
        match b {
            0 => Some(Self::Stream),
            1 => Some(Self::Residual),
            2 => Some(Self::Tables),
            3 => Some(Self::Positions),
            4 => Some(Self::Scores),
            _ => None,
        }
    }
}

/// `x` rounded up to [`ALIGN`] (`None` on overflow).
pub fn align(x: u64) -> Option<u64> {
    x.checked_add(ALIGN - 1).map(|y| y / ALIGN * ALIGN)
}

/// CRC-32 (IEEE 802.3, the zlib/PNG polynomial) of `bytes`.
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// CRC-32 of f32 values' little-endian bytes (μ of key centering, Q-Filters' filters).
pub fn crc32_f32(x: &[f32]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for v in x {
        h.update(&v.to_le_bytes());
    }
    h.finalize()
}

/// The header checksum: CRC-32 of `region` (header, section table, records) with the
/// checksum field read as zero.
pub fn header_crc(region: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&region[..CRC_FIELD]);
    h.update(&[0; 4]);
    h.update(&region[CRC_FIELD + 4..]);
    h.finalize()
}

/// A little-endian byte writer.
#[derive(Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    pub fn u8(&mut self, x: u8) {
        self.0.push(x);
    }
    pub fn u16(&mut self, x: u16) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    pub fn u32(&mut self, x: u32) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    pub fn u64(&mut self, x: u64) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    /// A string: u16 byte length, then UTF-8 (longer strings are cut at a char boundary).
    pub fn str(&mut self, s: &str) {
        let mut end = s.len().min(u16::MAX as usize);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.u16(end as u16);
        self.0.extend_from_slice(&s.as_bytes()[..end]);
    }
}

/// A bounds-checked little-endian reader over one region of the file: reading past its end
/// is [`CacheFileError::Malformed`] naming the region and the field.
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    region: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8], region: &'static str) -> Self {
        Self {
            bytes,
            at: 0,
            region,
        }
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.at
    }

    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8], CacheFileError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(CacheFileError::Malformed {
                what: format!("{} ({field})", self.region),
                message: format!(
                    "runs past the end of the region ({} + {n} > {} bytes)",
                    self.at,
                    self.bytes.len()
                ),
            });
        };
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    pub fn u8(&mut self, field: &str) -> Result<u8, CacheFileError> {
        Ok(self.take(1, field)?[0])
    }
    pub fn u16(&mut self, field: &str) -> Result<u16, CacheFileError> {
        let b = self.take(2, field)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub fn u32(&mut self, field: &str) -> Result<u32, CacheFileError> {
        let b = self.take(4, field)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&mut self, field: &str) -> Result<u64, CacheFileError> {
        let b = self.take(8, field)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    pub fn str(&mut self, field: &str) -> Result<String, CacheFileError> {
        let n = self.u16(field)? as usize;
        let b = self.take(n, field)?;
        String::from_utf8(b.to_vec()).map_err(|_| CacheFileError::Malformed {
            what: format!("{} ({field})", self.region),
            message: "is not UTF-8".into(),
        })
    }
}
