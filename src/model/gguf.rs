//! A GGUF v2/v3 reader: header, metadata, tensor directory, and dequantization of the tensor
//! types that llama and qwen2 checkpoints ship in (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
//! and the k-quants Q4_K and Q6_K of [`super::quant_k`]) to f32.
//!
//! The format follows ggml's `docs/gguf.md`: a little-endian header (`GGUF`, version, tensor
//! count, metadata count), the metadata key/value pairs (all thirteen value types, arrays of any
//! of them, nested arrays), the tensor directory (name, dims with `ne[0]` the fastest-varying,
//! ggml type, offset relative to the data section), then the data section, which starts at the
//! next multiple of `general.alignment` (default 32).
//!
//! **Why not a crate.** The GGUF readers on crates.io were checked first (issue 6):
//! `gguf-rs` and `gguf` parse the header, metadata and directory but do not dequantize, have
//! little use, and bring their own error and I/O types (`gguf` through `nom`); `pmetal-gguf`
//! dequantizes but is one part of a larger training/inference framework with quantizers, k-quant
//! dot products and imatrix support; `candle-core` dequantizes but is a whole ML framework. The
//! part kvpack needs (about 400 lines here) is small, its block layouts are fixed by ggml, and
//! writing it keeps kvpack's typed [`Error`] on malformed files, with every length checked
//! against the bytes that are there (no panics, no reads past the end, no allocation sized by an
//! unchecked count).
//!
//! The whole file is read into memory (SmolLM2-135M Q4_1 is 98 MB); tensor data are borrowed
//! from that buffer and dequantized on request.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use half::{bf16, f16};

use super::quant_k;
use crate::{Error, Result};

/// The tensor types [`dequantize`] handles, for error messages.
const SUPPORTED: &str = "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q6_K";

/// File name of SmolLM2-135M-Instruct (Q4_1) in the model cache (`scripts/fetch-models.sh`).
pub const SMOLLM2_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// kvpack's model cache: `$KVPACK_MODELS`, else `$HOME/.cache/kvpack` (where
/// `scripts/fetch-models.sh` puts its downloads).
pub fn models_dir() -> PathBuf {
    match std::env::var_os("KVPACK_MODELS") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default()
            .join(".cache/kvpack"),
    }
}

/// Where `scripts/fetch-models.sh` puts SmolLM2-135M-Instruct: `models_dir()/`[`SMOLLM2_FILE`].
pub fn smollm2_path() -> PathBuf {
    models_dir().join(SMOLLM2_FILE)
}

/// [`smollm2_path`] if the file is there, else an error that says how to fetch it.
pub fn find_smollm2() -> Result<PathBuf> {
    let p = smollm2_path();
    if p.is_file() {
        Ok(p)
    } else {
        Err(Error::Config(format!(
            "SmolLM2-135M-Instruct is not at {} (run scripts/fetch-models.sh, or set \
             KVPACK_MODELS to the folder that holds {SMOLLM2_FILE})",
            p.display()
        )))
    }
}

/// `GGUF` read as a little-endian u32.
const MAGIC: u32 = 0x4655_4747;
/// Alignment of the data section and of each tensor when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;
/// Nested arrays deeper than this are rejected (GGUF files use depth 1 in practice).
const MAX_ARRAY_DEPTH: u32 = 8;

fn malformed(message: impl Into<String>) -> Error {
    Error::Format {
        format: "GGUF",
        message: message.into(),
    }
}

/// A ggml tensor type, as stored in the tensor directory (named as ggml names them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// Blocks of 32: f16 scale `d`, 16 bytes of 4-bit codes; `x = (q - 8) * d`.
    Q4_0,
    /// Blocks of 32: f16 scale `d`, f16 minimum `m`, 16 bytes of 4-bit codes; `x = q * d + m`.
    Q4_1,
    /// Blocks of 32: f16 scale `d`, 4 bytes `qh` (bit i: the fifth bit of code i), 16 bytes of
    /// 4-bit codes (low nibbles codes 0..16, high nibbles codes 16..32); `x = (q - 16) * d`.
    Q5_0,
    /// Blocks of 32: f16 scale `d`, f16 minimum `m`, then `qh` and codes as in Q5_0;
    /// `x = q * d + m`.
    Q5_1,
    /// Blocks of 32: f16 scale `d`, 32 signed bytes; `x = q * d`.
    Q8_0,
    /// Super-blocks of 256 in 144 bytes: 4-bit codes, 6-bit scales and minimums per 32
    /// ([`super::quant_k`]).
    Q4_K,
    /// Super-blocks of 256 in 210 bytes: 6-bit codes, 8-bit scales per 16
    /// ([`super::quant_k`]).
    Q6_K,
    /// bfloat16.
    BF16,
    /// Any other ggml type (other k-quants, i-quants, integers): listed, not dequantized.
    Other(u32),
}

impl GgmlType {
    /// The type for a ggml type id.
    pub fn from_id(id: u32) -> Self {
        match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            12 => Self::Q4_K,
            14 => Self::Q6_K,
            30 => Self::BF16,
            other => Self::Other(other),
        }
    }

    /// ggml's type id.
    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q4_K => 12,
            Self::Q6_K => 14,
            Self::BF16 => 30,
            Self::Other(id) => id,
        }
    }

    /// `(elements per block, bytes per block)`, or `None` for a type this reader cannot size.
    pub fn block_layout(self) -> Option<(usize, usize)> {
        match self {
            Self::F32 => Some((1, 4)),
            Self::F16 | Self::BF16 => Some((1, 2)),
            Self::Q4_0 => Some((32, 18)),
            Self::Q4_1 => Some((32, 20)),
            Self::Q5_0 => Some((32, 22)),
            Self::Q5_1 => Some((32, 24)),
            Self::Q8_0 => Some((32, 34)),
            Self::Q4_K => Some((quant_k::QK_K, quant_k::Q4_K_BYTES)),
            Self::Q6_K => Some((quant_k::QK_K, quant_k::Q6_K_BYTES)),
            Self::Other(_) => None,
        }
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::F32 => f.write_str("F32"),
            Self::F16 => f.write_str("F16"),
            Self::Q4_0 => f.write_str("Q4_0"),
            Self::Q4_1 => f.write_str("Q4_1"),
            Self::Q5_0 => f.write_str("Q5_0"),
            Self::Q5_1 => f.write_str("Q5_1"),
            Self::Q8_0 => f.write_str("Q8_0"),
            Self::Q4_K => f.write_str("Q4_K"),
            Self::Q6_K => f.write_str("Q6_K"),
            Self::BF16 => f.write_str("BF16"),
            Self::Other(id) => write!(f, "ggml type {id}"),
        }
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Type 0.
    U8(u8),
    /// Type 1.
    I8(i8),
    /// Type 2.
    U16(u16),
    /// Type 3.
    I16(i16),
    /// Type 4.
    U32(u32),
    /// Type 5.
    I32(i32),
    /// Type 6.
    F32(f32),
    /// Type 7.
    Bool(bool),
    /// Type 8 (UTF-8).
    String(String),
    /// Type 9: the items' type is the same for all of them.
    Array(Vec<Value>),
    /// Type 10.
    U64(u64),
    /// Type 11.
    I64(i64),
    /// Type 12.
    F64(f64),
}

impl Value {
    /// The value as an unsigned integer, if it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::U32(v) => Some(v.into()),
            Self::U64(v) => Some(v),
            Self::I8(v) => u64::try_from(v).ok(),
            Self::I16(v) => u64::try_from(v).ok(),
            Self::I32(v) => u64::try_from(v).ok(),
            Self::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, if it is a float or an integer.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => Some(v.into()),
            Self::F64(v) => Some(v),
            Self::I8(v) => Some(v.into()),
            Self::I16(v) => Some(v.into()),
            Self::I32(v) => Some(v.into()),
            Self::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    /// The value as a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a bool.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Self::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The value as an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Self::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// One entry of the tensor directory.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// The tensor's name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// ggml's `ne`: `dims[0]` is the fastest-varying (contiguous) dimension.
    pub dims: Vec<u64>,
    /// Storage type.
    pub ggml_type: GgmlType,
    /// Absolute byte offset of the data in the file.
    pub offset: u64,
    /// Number of elements (product of `dims`).
    pub n_elements: u64,
    /// Number of bytes of data, or `None` for a type this reader cannot size.
    pub n_bytes: Option<u64>,
}

impl TensorInfo {
    /// The shape in row-major order (slowest-varying first): `dims` reversed. A ggml matrix with
    /// `ne = [in, out]` is `[out, in]` here, so row `r` is `data[r * in..(r + 1) * in]`.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

/// A dequantized tensor: row-major shape (slowest-varying first) and f32 data.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Row-major shape, the reverse of GGUF's `ne` order.
    pub shape: Vec<usize>,
    /// `shape.iter().product()` values.
    pub data: Vec<f32>,
}

/// A parsed GGUF file held in memory.
#[derive(Debug)]
pub struct GgufFile {
    version: u32,
    metadata: Vec<(String, Value)>,
    index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
    bytes: Vec<u8>,
}

/// A bounds-checked little-endian cursor.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        let n_usize = usize::try_from(n).ok().filter(|&n| n <= self.remaining());
        let Some(n) = n_usize else {
            return Err(malformed(format!(
                "{what}: needs {n} bytes at offset {} but the file has {} left",
                self.pos,
                self.remaining()
            )));
        };
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let len = self.u64(what)?;
        let raw = self.take(len, what)?;
        String::from_utf8(raw.to_vec())
            .map_err(|e| malformed(format!("{what}: string is not UTF-8 ({e})")))
    }

    fn value(&mut self, ty: u32, what: &str, depth: u32) -> Result<Value> {
        Ok(match ty {
            0 => Value::U8(self.u8(what)?),
            1 => Value::I8(self.u8(what)? as i8),
            2 => Value::U16(self.u16(what)?),
            3 => Value::I16(self.u16(what)? as i16),
            4 => Value::U32(self.u32(what)?),
            5 => Value::I32(self.u32(what)? as i32),
            6 => Value::F32(f32::from_bits(self.u32(what)?)),
            7 => match self.u8(what)? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(malformed(format!("{what}: bool byte {b} is not 0 or 1"))),
            },
            8 => Value::String(self.string(what)?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(malformed(format!(
                        "{what}: arrays nested deeper than {MAX_ARRAY_DEPTH}"
                    )));
                }
                let item_ty = self.u32(what)?;
                let len = self.u64(what)?;
                // Every item takes at least one byte, so a count larger than what is left is
                // malformed; this also bounds the allocation.
                if len > self.remaining() as u64 {
                    return Err(malformed(format!(
                        "{what}: array of {len} items but only {} bytes left",
                        self.remaining()
                    )));
                }
                let mut items = Vec::with_capacity(len as usize);
                for _ in 0..len {
                    items.push(self.value(item_ty, what, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(self.u64(what)?),
            11 => Value::I64(self.u64(what)? as i64),
            12 => Value::F64(f64::from_bits(self.u64(what)?)),
            t => {
                return Err(malformed(format!(
                    "{what}: unknown metadata value type {t}"
                )));
            }
        })
    }
}

impl GgufFile {
    /// Reads and parses a GGUF file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_bytes(bytes).map_err(|e| match e {
            Error::Format { format, message } => Error::Format {
                format,
                message: format!("{}: {message}", path.display()),
            },
            other => other,
        })
    }

    /// Parses a GGUF file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        let mut r = Reader {
            bytes: &bytes,
            pos: 0,
        };
        let magic = r.u32("magic")?;
        if magic != MAGIC {
            return Err(malformed(format!(
                "bad magic {:02x?} (expected \"GGUF\")",
                magic.to_le_bytes()
            )));
        }
        let version = r.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(malformed(format!(
                "version {version} is not supported (2 and 3 are)"
            )));
        }
        let n_tensors = r.u64("tensor count")?;
        let n_kv = r.u64("metadata count")?;
        // A metadata pair takes at least 8 + 4 + 1 bytes, a tensor entry at least 8 + 4 + 4 + 8.
        if n_kv > (r.remaining() / 13) as u64 || n_tensors > (r.remaining() / 24) as u64 {
            return Err(malformed(format!(
                "{n_kv} metadata pairs and {n_tensors} tensors cannot fit in {} bytes",
                bytes.len()
            )));
        }

        let mut metadata = Vec::with_capacity(n_kv as usize);
        let mut index = HashMap::with_capacity(n_kv as usize);
        for i in 0..n_kv {
            let key = r.string(&format!("metadata key #{i}"))?;
            let ty = r.u32(&format!("type of metadata `{key}`"))?;
            let value = r.value(ty, &format!("metadata `{key}`"), 0)?;
            if index.insert(key.clone(), metadata.len()).is_some() {
                return Err(malformed(format!("metadata key `{key}` appears twice")));
            }
            metadata.push((key, value));
        }

        let alignment = match index.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(&i) => {
                let a = metadata[i].1.as_u64().unwrap_or(0);
                if a == 0 || !a.is_power_of_two() {
                    return Err(malformed(format!(
                        "general.alignment {:?} is not a power of two",
                        metadata[i].1
                    )));
                }
                a
            }
        };

        let mut raw = Vec::with_capacity(n_tensors as usize);
        for i in 0..n_tensors {
            let name = r.string(&format!("tensor name #{i}"))?;
            let what = format!("tensor `{name}`");
            let n_dims = r.u32(&what)?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(malformed(format!(
                    "{what}: {n_dims} dimensions (1..={MAX_DIMS} allowed)"
                )));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(r.u64(&what)?);
            }
            let ggml_type = GgmlType::from_id(r.u32(&what)?);
            let rel_offset = r.u64(&what)?;
            raw.push((name, dims, ggml_type, rel_offset));
        }
        let data_offset = (r.pos as u64).div_ceil(alignment) * alignment;
        let file_len = bytes.len() as u64;
        if data_offset > file_len && n_tensors > 0 {
            return Err(malformed(format!(
                "data section at {data_offset} starts past the end of the file ({file_len} bytes)"
            )));
        }

        let mut tensors = Vec::with_capacity(raw.len());
        let mut tensor_index = HashMap::with_capacity(raw.len());
        for (name, dims, ggml_type, rel_offset) in raw {
            let what = format!("tensor `{name}`");
            let n_elements = dims
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d))
                .filter(|&n| n <= usize::MAX as u64 / 4)
                .ok_or_else(|| malformed(format!("{what}: dims {dims:?} overflow")))?;
            if rel_offset % alignment != 0 {
                return Err(malformed(format!(
                    "{what}: offset {rel_offset} is not a multiple of the alignment {alignment}"
                )));
            }
            let offset = data_offset
                .checked_add(rel_offset)
                .ok_or_else(|| malformed(format!("{what}: offset {rel_offset} overflows")))?;
            let n_bytes = match ggml_type.block_layout() {
                None => None,
                Some((block, block_bytes)) => {
                    if dims[0] % block as u64 != 0 {
                        return Err(malformed(format!(
                            "{what}: row length {} is not a multiple of the {ggml_type} block \
                             size {block}",
                            dims[0]
                        )));
                    }
                    let n = n_elements / block as u64 * block_bytes as u64;
                    if offset.checked_add(n).is_none_or(|end| end > file_len) {
                        return Err(malformed(format!(
                            "{what}: data [{offset}, {offset} + {n}) runs past the end of the \
                             file ({file_len} bytes)"
                        )));
                    }
                    Some(n)
                }
            };
            if offset > file_len {
                return Err(malformed(format!(
                    "{what}: offset {offset} is past the end of the file ({file_len} bytes)"
                )));
            }
            if tensor_index.insert(name.clone(), tensors.len()).is_some() {
                return Err(malformed(format!("{what} appears twice")));
            }
            tensors.push(TensorInfo {
                name,
                dims,
                ggml_type,
                offset,
                n_elements,
                n_bytes,
            });
        }

        Ok(Self {
            version,
            metadata,
            index,
            tensors,
            tensor_index,
            alignment,
            data_offset,
            bytes,
        })
    }

    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Alignment of the data section and of each tensor's offset.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// All metadata pairs in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// One metadata value.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.metadata[i].1)
    }

    fn require(&self, key: &str) -> Result<&Value> {
        self.get(key)
            .ok_or_else(|| malformed(format!("metadata `{key}` is missing")))
    }

    /// A required non-negative integer.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        let v = self.require(key)?;
        v.as_u64().ok_or_else(|| {
            malformed(format!(
                "metadata `{key}` is {v:?}, not an unsigned integer"
            ))
        })
    }

    /// A required non-negative integer that fits in `usize`.
    pub fn get_usize(&self, key: &str) -> Result<usize> {
        let v = self.get_u64(key)?;
        usize::try_from(v).map_err(|_| malformed(format!("metadata `{key}` = {v} is too large")))
    }

    /// A required number, read as f64.
    pub fn get_f64(&self, key: &str) -> Result<f64> {
        let v = self.require(key)?;
        v.as_f64()
            .ok_or_else(|| malformed(format!("metadata `{key}` is {v:?}, not a number")))
    }

    /// A required string.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        let v = self.require(key)?;
        v.as_str()
            .ok_or_else(|| malformed(format!("metadata `{key}` is not a string")))
    }

    /// A required array of strings.
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>> {
        let v = self.require(key)?;
        let items = v
            .as_array()
            .ok_or_else(|| malformed(format!("metadata `{key}` is not an array")))?;
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                item.as_str().ok_or_else(|| {
                    malformed(format!("metadata `{key}`[{i}] is {item:?}, not a string"))
                })
            })
            .collect()
    }

    /// The tensor directory in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// One tensor's directory entry.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// One tensor's raw bytes.
    pub fn tensor_bytes(&self, info: &TensorInfo) -> Result<&[u8]> {
        let n = info.n_bytes.ok_or_else(|| unsupported(info))?;
        // Checked at parse time; checked again so that a hand-made `TensorInfo` cannot panic.
        let start = usize::try_from(info.offset).ok();
        let end = start.and_then(|s| s.checked_add(usize::try_from(n).ok()?));
        match (start, end) {
            (Some(s), Some(e)) if e <= self.bytes.len() => Ok(&self.bytes[s..e]),
            _ => Err(malformed(format!(
                "tensor `{}`: data runs past the end of the file",
                info.name
            ))),
        }
    }

    /// One tensor dequantized to f32, with its row-major shape.
    pub fn dequantize(&self, name: &str) -> Result<Tensor> {
        let info = self
            .tensor(name)
            .ok_or_else(|| malformed(format!("tensor `{name}` is missing")))?;
        let bytes = self.tensor_bytes(info)?;
        let data = dequantize(info.ggml_type, bytes, info.n_elements as usize)?;
        Ok(Tensor {
            shape: info.shape(),
            data,
        })
    }

    /// The llama hyperparameters (`{arch}.*` keys, `arch` from `general.architecture`).
    pub fn llama_params(&self) -> Result<LlamaParams> {
        let arch = self.get_str("general.architecture")?.to_owned();
        let key = |k: &str| format!("{arch}.{k}");
        let n_heads = self.get_usize(&key("attention.head_count"))?;
        let n_kv_heads = match self.get(&key("attention.head_count_kv")) {
            Some(_) => self.get_usize(&key("attention.head_count_kv"))?,
            None => n_heads,
        };
        let d_model = self.get_usize(&key("embedding_length"))?;
        if n_heads == 0 || n_kv_heads == 0 || d_model % n_heads != 0 || n_heads % n_kv_heads != 0 {
            return Err(malformed(format!(
                "head counts {n_heads} (query) / {n_kv_heads} (KV) do not fit d_model {d_model}"
            )));
        }
        let head_dim = d_model / n_heads;
        let rope_dim = match self.get(&key("rope.dimension_count")) {
            Some(_) => self.get_usize(&key("rope.dimension_count"))?,
            None => head_dim,
        };
        let vocab_size = match self.get(&key("vocab_size")) {
            Some(_) => self.get_usize(&key("vocab_size"))?,
            None => self
                .require("tokenizer.ggml.tokens")?
                .as_array()
                .ok_or_else(|| malformed("metadata `tokenizer.ggml.tokens` is not an array"))?
                .len(),
        };
        let rope_theta = match self.get(&key("rope.freq_base")) {
            Some(_) => self.get_f64(&key("rope.freq_base"))? as f32,
            None => 10_000.0,
        };
        Ok(LlamaParams {
            n_layers: self.get_usize(&key("block_count"))?,
            d_model,
            ffn_dim: self.get_usize(&key("feed_forward_length"))?,
            n_heads,
            n_kv_heads,
            head_dim,
            rope_dim,
            rope_theta,
            rms_eps: self.get_f64(&key("attention.layer_norm_rms_epsilon"))? as f32,
            context_length: self.get_usize(&key("context_length"))?,
            vocab_size,
            tied_embeddings: self.tensor("output.weight").is_none(),
            qkv_bias: self.tensor("blk.0.attn_q.bias").is_some(),
            arch,
        })
    }

    /// All tensors of a llama or qwen2 checkpoint dequantized to f32, by GGUF name:
    /// `token_embd.weight`, `output_norm.weight`, `output.weight` when the file has one (absent
    /// means tied to `token_embd.weight`), for each layer `N` `blk.N.{attn_norm, attn_q,
    /// attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}.weight`, and
    /// `blk.N.{attn_q, attn_k, attn_v}.bias` when [`LlamaParams::qkv_bias`] (qwen2). Shapes are
    /// row-major: matrices are `[out, in]`, `token_embd.weight` is `[vocab, d_model]`. Q and K
    /// rows are as in the file: llama.cpp's permuted order for llama (RoPE on adjacent pairs),
    /// the model's own order for qwen2 (RoPE on halves).
    ///
    /// Checks every shape against [`GgufFile::llama_params`].
    pub fn llama_tensors(&self) -> Result<HashMap<String, Tensor>> {
        let p = self.llama_params()?;
        // Every block has 9 weight tensors (12 with q/k/v biases): a block count the file
        // cannot hold is refused before anything is allocated for it (found by fuzzing: a
        // block count of 2,228,225 in a 4 KB file took 2 GB).
        let per_block = if p.qkv_bias { 12 } else { 9 };
        if p.n_layers > self.tensors().len() / per_block {
            return Err(malformed(format!(
                "{}.block_count = {} needs {} tensors per block, the file has {} tensors",
                p.arch,
                p.n_layers,
                per_block,
                self.tensors().len()
            )));
        }
        let kv_dim = p.n_kv_heads * p.head_dim;
        let mut expected: Vec<(String, Vec<usize>)> = vec![
            ("token_embd.weight".into(), vec![p.vocab_size, p.d_model]),
            ("output_norm.weight".into(), vec![p.d_model]),
        ];
        if !p.tied_embeddings {
            expected.push(("output.weight".into(), vec![p.vocab_size, p.d_model]));
        }
        for l in 0..p.n_layers {
            for (n, shape) in [
                ("attn_norm", vec![p.d_model]),
                ("attn_q", vec![p.d_model, p.d_model]),
                ("attn_k", vec![kv_dim, p.d_model]),
                ("attn_v", vec![kv_dim, p.d_model]),
                ("attn_output", vec![p.d_model, p.d_model]),
                ("ffn_norm", vec![p.d_model]),
                ("ffn_gate", vec![p.ffn_dim, p.d_model]),
                ("ffn_up", vec![p.ffn_dim, p.d_model]),
                ("ffn_down", vec![p.d_model, p.ffn_dim]),
            ] {
                expected.push((format!("blk.{l}.{n}.weight"), shape));
            }
            if p.qkv_bias {
                for (n, len) in [
                    ("attn_q", p.d_model),
                    ("attn_k", kv_dim),
                    ("attn_v", kv_dim),
                ] {
                    expected.push((format!("blk.{l}.{n}.bias"), vec![len]));
                }
            }
        }
        for (name, shape) in &expected {
            let info = self
                .tensor(name)
                .ok_or_else(|| malformed(format!("{} tensor `{name}` is missing", p.arch)))?;
            if &info.shape() != shape {
                return Err(malformed(format!(
                    "{} tensor `{name}` has shape {:?}, expected {shape:?}",
                    p.arch,
                    info.shape()
                )));
            }
            if info.n_bytes.is_none() {
                return Err(unsupported(info));
            }
        }
        // Dequantize on up to `available_parallelism` threads, tensors dealt round-robin.
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(expected.len().max(1));
        let results: Vec<Result<Vec<(String, Tensor)>>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let expected = &expected;
                    s.spawn(move || {
                        expected
                            .iter()
                            .skip(t)
                            .step_by(threads)
                            .map(|(name, _)| Ok((name.clone(), self.dequantize(name)?)))
                            .collect::<Result<Vec<_>>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(malformed("a dequantization thread panicked")))
                })
                .collect()
        });
        let mut out = HashMap::with_capacity(expected.len());
        for r in results {
            out.extend(r?);
        }
        Ok(out)
    }
}

fn unsupported(info: &TensorInfo) -> Error {
    malformed(format!(
        "tensor `{}` has type {}, which kvpack cannot dequantize ({SUPPORTED} are supported)",
        info.name, info.ggml_type
    ))
}

/// Hyperparameters of a llama-family checkpoint (llama, qwen2), from GGUF metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaParams {
    /// `general.architecture` (the metadata key prefix), e.g. `llama`.
    pub arch: String,
    /// `{arch}.block_count`.
    pub n_layers: usize,
    /// `{arch}.embedding_length`.
    pub d_model: usize,
    /// `{arch}.feed_forward_length`.
    pub ffn_dim: usize,
    /// `{arch}.attention.head_count`.
    pub n_heads: usize,
    /// `{arch}.attention.head_count_kv` (defaults to `n_heads`).
    pub n_kv_heads: usize,
    /// `d_model / n_heads`.
    pub head_dim: usize,
    /// `{arch}.rope.dimension_count` (defaults to `head_dim`).
    pub rope_dim: usize,
    /// `{arch}.rope.freq_base` (defaults to 10000).
    pub rope_theta: f32,
    /// `{arch}.attention.layer_norm_rms_epsilon`.
    pub rms_eps: f32,
    /// `{arch}.context_length`.
    pub context_length: usize,
    /// `{arch}.vocab_size`, else the length of `tokenizer.ggml.tokens`.
    pub vocab_size: usize,
    /// True when the file has no `output.weight` (the head is `token_embd.weight`).
    pub tied_embeddings: bool,
    /// True when the file has `blk.0.attn_q.bias` (qwen2: q, k and v projections have biases).
    pub qkv_bias: bool,
}

/// Dequantizes `n` elements of type `ty` from `bytes` (exactly `n / block * block_bytes` of
/// them) to f32, following ggml's block layouts.
pub fn dequantize(ty: GgmlType, bytes: &[u8], n: usize) -> Result<Vec<f32>> {
    let (block, block_bytes) = ty
        .block_layout()
        .ok_or_else(|| malformed(format!("type {ty} cannot be dequantized ({SUPPORTED} can)")))?;
    if !n.is_multiple_of(block) {
        return Err(malformed(format!(
            "{n} elements are not a whole number of {ty} blocks of {block}"
        )));
    }
    let expected = n / block * block_bytes;
    if bytes.len() != expected {
        return Err(Error::LengthMismatch {
            what: "GGUF tensor bytes",
            expected,
            actual: bytes.len(),
        });
    }
    let mut out = Vec::with_capacity(n);
    let h = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
    match ty {
        GgmlType::F32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        ),
        GgmlType::F16 => out.extend(bytes.chunks_exact(2).map(h)),
        GgmlType::BF16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32()),
        ),
        GgmlType::Q8_0 => {
            for b in bytes.chunks_exact(34) {
                let d = h(&b[0..2]);
                out.extend(b[2..34].iter().map(|&q| f32::from(q as i8) * d));
            }
        }
        GgmlType::Q4_0 => {
            for b in bytes.chunks_exact(18) {
                let d = h(&b[0..2]);
                let qs = &b[2..18];
                out.extend(qs.iter().map(|&q| (f32::from(q & 0x0f) - 8.0) * d));
                out.extend(qs.iter().map(|&q| (f32::from(q >> 4) - 8.0) * d));
            }
        }
        GgmlType::Q4_1 => {
            for b in bytes.chunks_exact(20) {
                let d = h(&b[0..2]);
                let m = h(&b[2..4]);
                let qs = &b[4..20];
                out.extend(qs.iter().map(|&q| f32::from(q & 0x0f) * d + m));
                out.extend(qs.iter().map(|&q| f32::from(q >> 4) * d + m));
            }
        }
        GgmlType::Q5_0 => {
            for b in bytes.chunks_exact(22) {
                let d = h(&b[0..2]);
                let q = q5_codes(&b[2..6], &b[6..22]);
                out.extend(q.iter().map(|&q| (f32::from(q) - 16.0) * d));
            }
        }
        GgmlType::Q5_1 => {
            for b in bytes.chunks_exact(24) {
                let d = h(&b[0..2]);
                let m = h(&b[2..4]);
                let q = q5_codes(&b[4..8], &b[8..24]);
                out.extend(q.iter().map(|&q| f32::from(q) * d + m));
            }
        }
        GgmlType::Q4_K => quant_k::dequantize_q4_k(bytes, &mut out),
        GgmlType::Q6_K => quant_k::dequantize_q6_k(bytes, &mut out),
        GgmlType::Other(_) => {
            return Err(malformed(format!("type {ty} cannot be dequantized")));
        }
    }
    Ok(out)
}

/// The 32 five-bit codes of a Q5_0/Q5_1 block: the low four bits from `qs` (code `j` in the low
/// nibble of `qs[j]`, code `j + 16` in its high nibble, `j` in 0..16), the fifth bit of code `i`
/// from bit `i` of `qh` read as a little-endian u32.
fn q5_codes(qh: &[u8], qs: &[u8]) -> [u8; 32] {
    let high = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut q = [0u8; 32];
    for j in 0..16 {
        let bit = |i: usize| (((high >> i) & 1) as u8) << 4;
        q[j] = (qs[j] & 0x0f) | bit(j);
        q[j + 16] = (qs[j] >> 4) | bit(j + 16);
    }
    q
}
