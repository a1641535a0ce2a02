//! [`CacheFileError`]: what is wrong with a cache file, named precisely enough to act on
//! (carried by [`crate::Error::CacheFile`] with the file's path).

/// What is wrong with a cache file. Every check of the reader (`persist::decode`) ends in
/// one of these; none panics.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CacheFileError {
    /// The first bytes are not the magic (not a kvpack cache file, or mangled by a text-mode
    /// transfer: the magic holds a non-ASCII byte and a line feed to catch that).
    #[error(
        "not a kvpack cache file (starts with {found:02x?}, a cache file with {expected:02x?})"
    )]
    NotACacheFile {
        /// Up to the first 8 bytes.
        found: Vec<u8>,
        /// The magic.
        expected: Vec<u8>,
    },

    /// Written by a newer kvpack in a format version this one cannot read.
    #[error(
        "format version {found} is newer than this kvpack reads (up to version {supported}); \
         load it with a newer kvpack"
    )]
    NewerVersion {
        /// The file's version.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },

    /// A format version that never existed (0).
    #[error("format version {found} does not exist (versions start at 1)")]
    BadVersion {
        /// The file's version.
        found: u32,
    },

    /// Flags this version does not define are set.
    #[error("flags {flags:#x} are set; format version 1 defines none")]
    UnknownFlags {
        /// The flags word.
        flags: u32,
    },

    /// The file ends before `what` does.
    #[error("truncated in {what}: it needs {needed} bytes, the file has {have}")]
    Truncated {
        /// The region the file ends in (`header`, `section table`, `layer 0 keys stream 0
        /// (codes)`, ...).
        what: String,
        /// Bytes the file must have to hold it.
        needed: u64,
        /// Bytes it has.
        have: u64,
    },

    /// A checksum does not match: the bytes of `what` changed after they were written.
    #[error("{what}: checksum {computed:#010x} does not match the stored {stored:#010x}")]
    Checksum {
        /// The header (with the section table and the layer records) or one section.
        what: String,
        /// CRC-32 stored in the file.
        stored: u32,
        /// CRC-32 of the bytes read.
        computed: u32,
    },

    /// A field holds something the format does not allow (a bad count, an offset out of
    /// place, bytes after the end, non-zero padding, a string that is not UTF-8, ...).
    #[error("{what}: {message}")]
    Malformed {
        /// The field or region.
        what: String,
        /// What is wrong with it.
        message: String,
    },

    /// A layer's method spec does not parse, or cannot be built for the layer's geometry.
    #[error("layer {layer}: method `{spec}`: {message}")]
    Method {
        /// The layer.
        layer: usize,
        /// The spec in the file.
        spec: String,
        /// Why it is unusable.
        message: String,
    },

    /// A layer's record disagrees with what its method stores for its geometry (block size,
    /// streams, words per block, codec settings or tables): the file was written for another
    /// method, another geometry, or by a kvpack whose codec changed.
    #[error(
        "layer {layer}: {what} is {file} in the file, but the method {method} stores {expected}"
    )]
    Layout {
        /// The layer.
        layer: usize,
        /// The field.
        what: String,
        /// Its value in the file.
        file: String,
        /// What the method (as this kvpack builds it) has.
        expected: String,
        /// The method's spec.
        method: String,
    },

    /// The file is sound but not what it was loaded for (another model's shape, another
    /// method, a different number of layers).
    #[error("{what}: the file has {file}, expected {expected}")]
    Mismatch {
        /// What differs.
        what: String,
        /// In the file.
        file: String,
        /// What the caller needs.
        expected: String,
    },

    /// The stored words are well-formed bytes that no cache of this method holds (e.g. a NaN
    /// in the residual window): rejected on load as an append would reject them.
    #[error("layer {layer}: {message}")]
    Content {
        /// The layer.
        layer: usize,
        /// The store's or codec's check that failed.
        message: String,
    },
}
