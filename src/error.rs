//! The one public error type of kvpack.

use crate::path::KernelPath;

/// Everything kvpack can report. Every fallible public function returns [`Result`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A path was requested that this context cannot run (no adapter, wrong backend,
    /// missing feature, or the kernel has no source for that path).
    #[error("path {requested} is not available for kernel `{kernel}`: {reason}")]
    PathUnavailable {
        /// The kernel that was asked for.
        kernel: &'static str,
        /// The path that was asked for.
        requested: String,
        /// Why it cannot run.
        reason: String,
    },

    /// A bit width outside 1..=8.
    #[error("bit width {bits} is out of range (must be 1..=8)")]
    BitsOutOfRange {
        /// The offending bit width.
        bits: u32,
    },

    /// A code does not fit in the requested bit width.
    #[error("code {code} at index {index} does not fit in {bits} bits (must be < {limit})")]
    CodeOutOfRange {
        /// Position of the first offending code.
        index: usize,
        /// Its value.
        code: u32,
        /// The bit width.
        bits: u32,
        /// 2^bits.
        limit: u32,
    },

    /// The last word of a bitstream has non-zero bits past the end of the stream.
    #[error(
        "corrupt bitstream: last word {word:#010x} has bits set above its {bits_used} used bits"
    )]
    NonZeroPadding {
        /// Bits of the last word that belong to the stream.
        bits_used: u32,
        /// The last word.
        word: u32,
    },

    /// Two lengths that must agree do not.
    #[error("length mismatch for {what}: expected {expected}, got {actual}")]
    LengthMismatch {
        /// What was measured.
        what: &'static str,
        /// What the contract requires.
        expected: usize,
        /// What was given.
        actual: usize,
    },

    /// An input tensor shape is not acceptable.
    #[error("bad shape for {what}: {message}")]
    Shape {
        /// Which input.
        what: &'static str,
        /// What is wrong.
        message: String,
    },

    /// An input holds NaN or ±Inf.
    #[error("non-finite value {value} in {what} at flat index {index}")]
    NonFinite {
        /// Which input.
        what: &'static str,
        /// Flat index of the first offending element.
        index: usize,
        /// The value.
        value: f32,
    },

    /// A configuration value is not acceptable.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// A buffer or dispatch would exceed a limit of this device.
    #[error("{what} needs {needed} but the device allows {limit}")]
    Limit {
        /// Which limit.
        what: &'static str,
        /// What the operation needs.
        needed: u64,
        /// What the device allows.
        limit: u64,
    },

    /// The GPU rejected a shader, pipeline or dispatch (captured through an error scope).
    #[error("shader/pipeline error in kernel `{kernel}` ({path}): {message}")]
    Shader {
        /// The kernel.
        kernel: &'static str,
        /// The path it was built for.
        path: KernelPath,
        /// The wgpu message.
        message: String,
    },

    /// A wgpu error outside shader creation (buffer creation, submission, mapping).
    #[error("GPU error during {during}: {message}")]
    Gpu {
        /// What kvpack was doing.
        during: &'static str,
        /// The wgpu message.
        message: String,
    },

    /// The device could not allocate a buffer (captured through an out-of-memory error
    /// scope); the operation changed nothing.
    #[error("out of memory allocating {what} ({bytes} bytes): {message}")]
    OutOfMemory {
        /// The buffer.
        what: &'static str,
        /// Its size.
        bytes: u64,
        /// The device's message.
        message: String,
    },

    /// An application's device lacks a feature or limit kvpack needs
    /// ([`crate::Context::from_device`]; [`crate::required_features`],
    /// [`crate::required_limits`]).
    #[error("device `{adapter}` lacks what kvpack needs: {}", missing.join("; "))]
    MissingCapabilities {
        /// The adapter's name.
        adapter: String,
        /// One entry per missing feature set or too-low limit (its name, what kvpack needs and
        /// what the device has).
        missing: Vec<String>,
    },

    /// No adapter could be created when one was required.
    #[error("no GPU adapter: {0}")]
    NoAdapter(String),

    /// A model or tokenizer file is malformed, or uses something kvpack does not support.
    #[error("malformed {format} file: {message}")]
    Format {
        /// The file format (`GGUF`, `llama2.c`, ...).
        format: &'static str,
        /// What is wrong, with the file's path where known.
        message: String,
    },

    /// A saved cache file (or bytes said to be one) is not one, is corrupt, is of a newer
    /// format version, or does not fit what it was loaded for ([`crate::persist`]).
    #[error("cache file {file}: {problem}")]
    CacheFile {
        /// The file's path (`<bytes>` for an in-memory buffer).
        file: String,
        /// What is wrong (boxed: it keeps [`Error`] small).
        problem: Box<crate::persist::CacheFileError>,
    },

    /// The GPU device was lost (driver reset, device destroyed, ...): nothing more can run
    /// or be read back on it. Make a new [`crate::Context`]; a cache saved before the loss
    /// loads there.
    #[error("the GPU device was lost during {during}: {message}")]
    DeviceLost {
        /// What kvpack was doing.
        during: &'static str,
        /// wgpu's reason.
        message: String,
    },

    /// A calibration file (VecInfer codebooks and λ, Q-Filters filters) is missing, malformed,
    /// of another format version, or does not match the model or the method asking for it.
    #[error("calibration file {path}: {message}")]
    Calibration {
        /// The file (or `<memory>`).
        path: String,
        /// What is wrong.
        message: String,
    },

    /// A file could not be read or written (CLI, fixtures).
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// `Result` with kvpack's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
