//! What every codec shares (DESIGN.md, "one store, many codecs"): input conversion
//! ([`input`]), memory accounting ([`memory`]), the stored words of one side of a layer on the
//! CPU ([`cpu`]) or the GPU ([`gpu`]: growable segments sized from the binding limit and a
//! residual ring that grows with the cache), the two-phase append with its status word,
//! appends from the application's GPU buffers ([`gpu_input`]), and snapshots of the stored
//! words ([`snapshot`]).
//!
//! A layer has two **sides**, keys and values, each stored by its own codec
//! ([`crate::codec::Codec`]). A side quantizes whole blocks of `G` tokens (its codec's block
//! size: KIVI keys G, per-token codecs 1); of `T` tokens appended, the first
//! `Q = floor(max(0, T − R) / G) · G` are in the codec's stored form and the rest, `[Q, T)`,
//! sit in the side's f16 residual window (R is one number per layer). Quantized tokens never
//! change again, so any chunking of the same appends stores the same words.
//!
//! **The allocate-everything-then-swap rule.** An append computes (CPU) or allocates and
//! records (GPU) everything it needs before it changes the layer; a failure before the commit
//! (bad input, an allocation that fails, a codec's status word) leaves every stored word, the
//! token count and the memory report as they were.

pub mod center;
pub(crate) mod compact;
pub mod cpu;
pub mod gpu;
pub mod gpu_input;
pub mod input;
pub mod memory;
pub mod snapshot;

pub use gpu_input::{GpuDtype, GpuInput};
pub use input::Input;
pub use memory::{Memory, MemoryReport};
pub use snapshot::{SideWords, Snapshot};

/// Which tensor a codec stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// K.
    Keys,
    /// V.
    Values,
}

impl Side {
    /// Keys, then values.
    pub const ALL: [Side; 2] = [Side::Keys, Side::Values];

    /// `keys` / `values`.
    pub fn name(self) -> &'static str {
        match self {
            Side::Keys => "keys",
            Side::Values => "values",
        }
    }
}

/// The fixed shape of one layer: `heads` KV heads of width `dim`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Geometry {
    /// KV heads.
    pub heads: usize,
    /// Head width D.
    pub dim: usize,
}

impl Geometry {
    /// Validates a geometry: both positive, `heads · dim ≤ 2^20`.
    pub fn new(heads: usize, dim: usize) -> crate::Result<Self> {
        if heads == 0 || dim == 0 || heads.checked_mul(dim).is_none_or(|x| x > (1 << 20)) {
            return Err(crate::Error::Shape {
                what: "cache",
                message: format!(
                    "heads ({heads}) and dim ({dim}) must be positive with heads·dim ≤ 2^20"
                ),
            });
        }
        Ok(Self { heads, dim })
    }

    /// Elements of one token (`H·D`).
    pub fn token_elems(&self) -> usize {
        self.heads * self.dim
    }

    /// u32 words of one f16 row of a token (`H·D` halves, two per word, odd rows padded).
    pub fn row_words(&self) -> usize {
        self.token_elems().div_ceil(2)
    }
}

/// Tokens quantized after `t` were appended, for residual window `r` and block `g`:
/// `floor(max(0, t − r) / g) · g`.
pub fn quantized_len(t: usize, r: usize, g: usize) -> usize {
    t.saturating_sub(r) / g * g
}

/// Capacity after growing to hold `need` items from `have`: at least 1/8 more than before
/// (amortized O(1) appends) but never the doubling of `Vec`, so the memory a cache reports as
/// held stays within about 12.5 % of the bytes its data takes.
pub(crate) fn grown_capacity(have: usize, need: usize) -> usize {
    need.max(have + have / 8)
}

/// Checks that a layer holding `tokens` can take `n` more: positions travel as u32 in the
/// kernels' uniforms, kept below 2^31 for headroom.
pub(crate) fn check_token_limit(tokens: usize, n: usize) -> crate::Result<()> {
    let limit = u32::MAX as usize / 2;
    if tokens.checked_add(n).is_none_or(|t| t >= limit) {
        return Err(crate::Error::Limit {
            what: "tokens in one layer",
            needed: tokens.saturating_add(n) as u64,
            limit: limit as u64,
        });
    }
    Ok(())
}
